// The interactive page of `attn matrix --transformer ... --html` (attncli/views/page.py): vanilla
// JavaScript, no library, nothing loaded. The data are `attn matrix --json` documents, one per
// layer x {tokens, special tokens hidden} x {heads, rollout}, each with its words merged; D.extra
// holds the views beyond the weights (--show norms / scores, --flow), one document per layer. Rows
// and columns may be other tokens (an encoder-decoder's cross-attention, T x S: D.square false).
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("attn-data").textContent);
  const S = Object.assign({}, D.start);  // the state: view, layer, head (null: mean), words, hide_special, rollout, filter
  const $ = (id) => document.getElementById(id);
  const SVGNS = "http://www.w3.org/2000/svg";
  const STOPS = D.viridis.map((h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16)));

  function viridis(t) {  // t in [0, 1] -> "rgb(r, g, b)", the 11 stops interpolated as attncli.views.render.palette
    t = Math.min(Math.max(t, 0), 1) * (STOPS.length - 1);
    const lo = Math.floor(t), hi = Math.min(lo + 1, STOPS.length - 1), f = t - lo;
    const c = STOPS[lo].map((a, k) => Math.round(a + f * (STOPS[hi][k] - a)));
    return c;
  }
  function css(c) { return "rgb(" + c.join(",") + ")"; }
  function ink(c) {  // black or white text, whichever reads better (WCAG luminance crossover)
    const l = c.map((v) => { v /= 255; return v <= 0.04045 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * l[0] + 0.7152 * l[1] + 0.0722 * l[2] > 0.179 ? "#000" : "#fff";
  }
  // the text a model or a user gave, shown as attncli.io.textio.visible shows it: control, bidi and
  // line-separator characters as visible escapes (\x1b, \u202e), so none reorders or hides the page
  const NAMED = { "\t": "\\t", "\n": "\\n", "\r": "\\r" };
  const INVISIBLE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
  function shown(s) {
    return String(s).replace(INVISIBLE, (c) => NAMED[c] || (c.charCodeAt(0) < 0x100
      ? "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0") : "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0")));
  }
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, shown(attrs[k]));
    if (text !== undefined) e.textContent = shown(text);
    return e;
  }

  function doc(layer, rollout) {
    return D.views[layer + "|" + (S.hide_special ? 1 : 0) + "|" + (rollout ? 1 : 0)];
  }
  // A view beyond the weights (--show norms / scores, --flow): token by token, one document per layer.
  function extra() { return S.show !== "weights" && D.extra[S.show] !== undefined; }
  // A contribution method (--show alti / globenc / value-zeroing): one matrix per layer, no heads.
  function contribution() { return extra() && D.extra[S.show][0].formula !== undefined; }
  function fmt(w) { return w === null ? "" : w.toFixed(3); }  // --show scores: a masked cell (null) is blank

  // The matrix shown: rows (queries) and columns (keys) with labels and segments, the block kept;
  // ri, ci: the rows and columns of the document kept (input positions in a token view).
  function matrix(layer, head, rollout, weightsOnly) {
    const other = !weightsOnly && extra();
    const d = other ? D.extra[S.show][layer] : doc(layer, rollout);
    let part, rows, cols, rowSeg, colSeg;  // a row's number: its input position (a word's: its index among the words), as attn matrix numbers it
    if (S.words && !other) {
      part = d.words; rows = part.tokens; cols = part.key_tokens;
      rowSeg = part.groups.map((g) => D.input.segments[g[0]]);
      colSeg = part.key_groups.map((g) => D.key_input.segments[g[0]]);  // cross-attention: the source's
    } else {
      part = d; rowSeg = d.segments; colSeg = d.key_segments;  // each token's text as drawn (␣ for a space)
      rows = d.rows.map((t) => D.input.labels[t]); cols = d.cols.map((t) => D.key_input.labels[t]);
    }
    const M = ((!other && rollout) || head === null || !part.head_weights) ? part.weights : part.head_weights[head];
    let ri = rows.map((_, i) => i), ci = cols.map((_, j) => j);
    if (S.filter !== "all") {
      ri = ri.filter((i) => rowSeg[i] === S.filter[0]);
      ci = ci.filter((j) => colSeg[j] === S.filter[2]);
    }
    const mark = (s) => (D.pair !== null && s ? s.toUpperCase() + " " : "");
    return {
      rows: ri.map((i) => part.rows[i] + " " + mark(rowSeg[i]) + rows[i]), cols: ci.map((j) => mark(colSeg[j]) + cols[j]),
      W: ri.map((i) => ci.map((j) => M[i][j])), ri: ri, ci: ci, layer: layer, head: head,
    };
  }

  // The hover text of a cell: the number; for --show norms also alpha, ||f(x_j)|| and their
  // product, as attn matrix --show norms --explain I J gives them.
  function cellTitle(m, i, j) {
    const w = m.W[i][j], where = m.rows[i] + " \u2192 " + m.cols[j] + ": ";
    if (w === null) return where + "masked (-inf before the softmax)";
    if (S.show !== "norms" || !extra()) return where + w;
    const I = m.ri[i], J = m.ci[j];
    if (m.head === null) return where + "||sum over the heads of alpha f(x_j)|| = " + w;
    const alpha = D.views[m.layer + "|0|0"].head_weights[m.head][I][J];
    const size = D.extra.norms[m.layer].value_norms[m.head][J];
    return where + "alpha = " + alpha + ", ||f(x_j)|| = " + size + ", ||alpha f(x_j)|| = " + w;
  }

  function which() {
    if (S.show === "flow" && extra()) return "attention flow through layers 0-" + S.layer;
    if (contribution()) {
      const d = D.extra[S.show][S.layer];
      return d.rollout ? d.show + " rolled out through layers 0-" + S.layer : "layer " + S.layer + " " + d.show + " (the whole layer)";
    }
    if (S.rollout) return "rollout through layers 0-" + S.layer;
    const norms = S.show === "norms" && extra();
    const what = norms ? " ||alpha f(x)||," : S.show === "scores" && extra() ? " scores," : "";
    return "layer " + S.layer + what + (S.head === null ? (what ? " " : ", ") + (norms ? "the " + D.heads + " heads' vectors added"
      : "mean of " + D.heads + " heads") : " head " + S.head);
  }

  // --- the head view: queries on the left, keys on the right, a line per weight ------------------
  function drawHead() {
    const m = matrix(S.layer, S.head, S.rollout);
    const q = $("queries"), k = $("keys"), svg = $("lines");
    q.replaceChildren(); k.replaceChildren(); svg.replaceChildren();
    const n = Math.max(m.rows.length, m.cols.length);
    svg.setAttribute("height", String(22 * n));
    const lines = [];
    const shown = m.W.flat().filter((w) => w !== null);
    const top = Math.max(...shown, 0), bottom = Math.min(...shown, 0);
    const strength = extra() ? (w) => (w === null || top <= bottom ? 0 : (w - bottom) / (top - bottom)) : (w) => w;
    m.rows.forEach((label, i) => {
      const t = el("div", { class: "tok q", "data-i": String(i) }, label);
      t.addEventListener("mouseover", () => focus(i, null));
      t.addEventListener("mouseout", () => focus(null, null));
      q.appendChild(t);
    });
    m.cols.forEach((label, j) => {
      const t = el("div", { class: "tok k", "data-j": String(j) });
      t.appendChild(el("span", { class: "label" }, label));
      t.appendChild(el("span", { class: "w" }, ""));
      t.addEventListener("mouseover", () => focus(null, j));
      t.addEventListener("mouseout", () => focus(null, null));
      k.appendChild(t);
    });
    m.W.forEach((row, i) => row.forEach((w, j) => {
      const line = document.createElementNS(SVGNS, "line");
      line.setAttribute("x1", "0"); line.setAttribute("y1", String(22 * i + 11));
      line.setAttribute("x2", "160"); line.setAttribute("y2", String(22 * j + 11));
      line.setAttribute("stroke", "#2a6fdb"); line.setAttribute("stroke-width", "2");
      line.setAttribute("stroke-opacity", String(strength(w)));
      svg.appendChild(line);
      lines.push([i, j, line]);
    }));
    function focus(fi, fj) {  // hover: one query's (or key's) lines, and their numbers beside the tokens
      for (const [i, j, line] of lines) line.style.display = (fi === null || i === fi) && (fj === null || j === fj) ? "" : "none";
      q.querySelectorAll(".q").forEach((t, i) => t.classList.toggle("hot", i === fi));
      k.querySelectorAll(".k").forEach((t, j) => {
        t.classList.toggle("hot", j === fj);
        t.querySelector(".w").textContent = fi === null ? "" : fmt(m.W[fi][j]);
      });
      if (fj !== null) q.querySelectorAll(".q").forEach((t, i) => { t.title = shown(cellTitle(m, i, fj)); });
      $("readout").textContent = shown(fi !== null
        ? m.rows[fi] + " attends: " + m.cols.map((c, j) => c + " " + fmt(m.W[fi][j])).join(", ")
        : fj !== null ? m.cols[fj] + " is attended by: " + m.rows.map((r, i) => r + " " + fmt(m.W[i][fj])).join(", ") : "");
    }
    drawMatrix(m);
  }

  // --- the heatmap of the same matrix, each cell with its number -----------------------------------
  function drawMatrix(m) {
    const table = $("matrix");
    table.replaceChildren();
    const all = m.W.flat().filter((w) => w !== null);
    const lo = Math.min(...all), hi = Math.max(...all);
    const head = el("tr");
    head.appendChild(el("th"));
    m.cols.forEach((c) => head.appendChild(el("th", {}, c)));
    table.appendChild(head);
    m.W.forEach((row, i) => {
      const tr = el("tr");
      tr.appendChild(el("th", { class: "r" }, m.rows[i]));
      row.forEach((w, j) => {
        const td = el("td", { "data-i": String(i), "data-j": String(j), title: cellTitle(m, i, j) }, fmt(w));
        if (w !== null) {
          const c = viridis(hi > lo ? (w - lo) / (hi - lo) : 0);
          td.style.background = css(c); td.style.color = ink(c);
        }
        tr.appendChild(td);
      });
      table.appendChild(tr);
    });
  }

  // --- the model view: every layer x head as a thumbnail; a click opens it --------------------------
  function drawModel() {
    const grid = $("modelview");
    grid.replaceChildren();
    grid.style.gridTemplateColumns = "repeat(" + (D.heads + 1) + ", auto)";
    for (let layer = 0; layer < D.layers; layer++) {
      grid.appendChild(el("div", { class: "thumb" }, "layer " + layer));
      for (let h = 0; h < D.heads; h++) {
        const m = matrix(layer, h, false, true);  // the model view classifies the heads by their weights
        const cell = Math.max(2, Math.min(6, Math.floor(72 / Math.max(m.W.length, m.cols.length, 1))));
        const canvas = el("canvas", { width: String(cell * m.cols.length), height: String(cell * m.W.length) });
        const g = canvas.getContext("2d");
        m.W.forEach((row, i) => row.forEach((w, j) => { g.fillStyle = css(viridis(w)); g.fillRect(j * cell, i * cell, cell, cell); }));
        const c = D.classes[layer][h];
        const box = el("div", { class: "thumb" + (layer === S.layer && h === S.head ? " on" : ""),
                                "data-layer": String(layer), "data-head": String(h),
                                title: "layer " + layer + " head " + h + ": " + c.label + (c.score === null ? "" : " " + c.score.toFixed(2)) });
        box.appendChild(canvas);
        box.appendChild(el("div", {}, h + " " + c.label));
        box.addEventListener("click", () => { Object.assign(S, { layer: layer, head: h, rollout: false, view: "head" }); draw(); });
        grid.appendChild(box);
      }
    }
  }

  function controls() {
    const layer = $("layer"), head = $("head");
    if (!layer.options.length) {
      for (let l = 0; l < D.layers; l++) layer.appendChild(el("option", { value: String(l) }, String(l)));
      head.appendChild(el("option", { value: "mean" }, "all (mean)"));
      for (let h = 0; h < D.heads; h++) head.appendChild(el("option", { value: String(h) }, String(h)));
    }
    layer.value = String(S.layer);
    head.value = S.head === null ? "mean" : String(S.head);
    const show = $("show");
    if (!show.options.length) for (const name of ["weights", ...Object.keys(D.extra)]) show.appendChild(el("option", { value: name }, name));
    show.value = extra() ? S.show : "weights";
    $("show-label").style.display = Object.keys(D.extra).length ? "" : "none";
    const tokenwise = S.view === "head" && extra();  // norms, scores, flow: token by token, no row renormalised
    head.disabled = S.rollout || (tokenwise && (S.show === "flow" || contribution()));
    $("words").checked = S.words; $("hide").checked = S.hide_special; $("rollout").checked = S.rollout;
    $("words").disabled = tokenwise; $("rollout").disabled = tokenwise || !D.square;  // T x S: no rollout
    $("hide").disabled = tokenwise || !D.input.special.concat(D.key_input.special).some((s) => s);
    $("filter").value = S.filter; $("filter-label").style.display = D.pair === null ? "none" : "";
    $("tab-head").classList.toggle("on", S.view === "head");
    $("tab-model").classList.toggle("on", S.view === "model");
    $("head-pane").style.display = S.view === "head" ? "" : "none";
    $("model-pane").style.display = S.view === "model" ? "" : "none";
  }

  function draw() {
    controls();
    $("title").textContent = shown(D.model + " \u00b7 " + (S.view === "head" ? which() : "model view: " + D.layers + " layers x " + D.heads + " heads"));
    $("sub").textContent = shown(D.pair === null ? D.text : "A: " + D.text + "  \u00b7  B: " + D.pair);
    const what = extra() ? { norms: "||alpha f(x_j)||, f(x) = (x W_V + b_V) W_O (Kobayashi et al. 2020); hover a cell: alpha, ||f(x_j)|| and their product",
                             scores: "scores before the softmax (a masked cell is blank)",
                             flow: "attention flow: max-flow from each input token through layers 0-" + S.layer + " (Abnar & Zuidema 2020)" }[S.show]
                             || D.extra[S.show][S.layer].formula
                         : "weights";
    $("note").textContent = "rows: queries, columns: keys; " + what + " as attn matrix --json gives them" +
      (S.words ? "; word pieces merged (a word's row is the mean of its pieces' rows, its column the sum of their columns)" : "") +
      (S.hide_special ? "; special tokens hidden, each row renormalised over the other keys" : "") +
      (S.filter !== "all" ? "; block " + S.filter + ": weights as in the whole matrix" : "");
    if (S.view === "head") drawHead(); else drawModel();
    document.body.setAttribute("data-drawn", which() + " " + S.view);
  }

  $("layer").addEventListener("change", (e) => { S.layer = Number(e.target.value); draw(); });
  $("head").addEventListener("change", (e) => { S.head = e.target.value === "mean" ? null : Number(e.target.value); draw(); });
  $("words").addEventListener("change", (e) => { S.words = e.target.checked; draw(); });
  $("hide").addEventListener("change", (e) => { S.hide_special = e.target.checked; draw(); });
  $("rollout").addEventListener("change", (e) => { S.rollout = e.target.checked; draw(); });
  $("show").addEventListener("change", (e) => {  // the token-level views drop what mixes tokens or layers
    S.show = e.target.value;
    if (extra()) Object.assign(S, { words: false, hide_special: false, rollout: false, head: S.show === "flow" || contribution() ? null : S.head });
    draw();
  });
  $("filter").addEventListener("change", (e) => { S.filter = e.target.value; draw(); });
  $("tab-head").addEventListener("click", () => { S.view = "head"; draw(); });
  $("tab-model").addEventListener("click", () => { S.view = "model"; draw(); });
  draw();
})();
