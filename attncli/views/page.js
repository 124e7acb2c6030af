// The interactive page of `attn matrix --transformer ... --html` (attncli/views/page.py): vanilla
// JavaScript, no library, nothing loaded. The data are `attn matrix --json` documents, one per
// layer x {tokens, special tokens hidden} x {heads, rollout}, each with its words merged.
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
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function doc(layer, rollout) {
    return D.views[layer + "|" + (S.hide_special ? 1 : 0) + "|" + (rollout ? 1 : 0)];
  }

  // The matrix shown: rows (queries) and columns (keys) with labels and segments, the block kept.
  function matrix(layer, head, rollout) {
    const d = doc(layer, rollout);
    let part, rows, cols, rowSeg, colSeg;
    if (S.words) {
      part = d.words; rows = part.tokens; cols = part.key_tokens;
      rowSeg = part.groups.map((g) => D.input.segments[g[0]]);
      colSeg = part.key_groups.map((g) => D.input.segments[g[0]]);
    } else {
      part = d; rows = d.tokens; cols = d.key_tokens; rowSeg = d.segments; colSeg = d.key_segments;
    }
    const M = (rollout || head === null || !part.head_weights) ? part.weights : part.head_weights[head];
    let ri = rows.map((_, i) => i), ci = cols.map((_, j) => j);
    if (S.filter !== "all") {
      ri = ri.filter((i) => rowSeg[i] === S.filter[0]);
      ci = ci.filter((j) => colSeg[j] === S.filter[2]);
    }
    const mark = (s) => (D.pair !== null && s ? s.toUpperCase() + " " : "");
    return {
      rows: ri.map((i) => i + " " + mark(rowSeg[i]) + rows[i]), cols: ci.map((j) => mark(colSeg[j]) + cols[j]),
      W: ri.map((i) => ci.map((j) => M[i][j])),
    };
  }

  function which() {
    if (S.rollout) return "rollout through layers 0-" + S.layer;
    return "layer " + S.layer + (S.head === null ? ", mean of " + D.heads + " heads" : " head " + S.head);
  }

  // --- the head view: queries on the left, keys on the right, a line per weight ------------------
  function drawHead() {
    const m = matrix(S.layer, S.head, S.rollout);
    const q = $("queries"), k = $("keys"), svg = $("lines");
    q.replaceChildren(); k.replaceChildren(); svg.replaceChildren();
    const n = Math.max(m.rows.length, m.cols.length);
    svg.setAttribute("height", String(22 * n));
    const lines = [];
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
      line.setAttribute("stroke-opacity", String(w));
      svg.appendChild(line);
      lines.push([i, j, line]);
    }));
    function focus(fi, fj) {  // hover: one query's (or key's) lines, and their numbers beside the tokens
      for (const [i, j, line] of lines) line.style.display = (fi === null || i === fi) && (fj === null || j === fj) ? "" : "none";
      q.querySelectorAll(".q").forEach((t, i) => t.classList.toggle("hot", i === fi));
      k.querySelectorAll(".k").forEach((t, j) => {
        t.classList.toggle("hot", j === fj);
        t.querySelector(".w").textContent = fi === null ? "" : m.W[fi][j].toFixed(3);
      });
      if (fj !== null) q.querySelectorAll(".q").forEach((t, i) => { t.title = m.W[i][fj].toFixed(6); });
      $("readout").textContent = fi !== null
        ? m.rows[fi] + " attends: " + m.cols.map((c, j) => c + " " + m.W[fi][j].toFixed(3)).join(", ")
        : fj !== null ? m.cols[fj] + " is attended by: " + m.rows.map((r, i) => r + " " + m.W[i][fj].toFixed(3)).join(", ") : "";
    }
    drawMatrix(m);
  }

  // --- the heatmap of the same matrix, each cell with its number -----------------------------------
  function drawMatrix(m) {
    const table = $("matrix");
    table.replaceChildren();
    const all = m.W.flat();
    const lo = Math.min(...all), hi = Math.max(...all);
    const head = el("tr");
    head.appendChild(el("th"));
    m.cols.forEach((c) => head.appendChild(el("th", {}, c)));
    table.appendChild(head);
    m.W.forEach((row, i) => {
      const tr = el("tr");
      tr.appendChild(el("th", { class: "r" }, m.rows[i]));
      row.forEach((w, j) => {
        const c = viridis(hi > lo ? (w - lo) / (hi - lo) : 0);
        const td = el("td", { "data-i": String(i), "data-j": String(j), title: m.rows[i] + " \u2192 " + m.cols[j] + ": " + w },
                      w.toFixed(3));
        td.style.background = css(c); td.style.color = ink(c);
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
        const m = matrix(layer, h, false);
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
    head.disabled = S.rollout;
    $("words").checked = S.words; $("hide").checked = S.hide_special; $("rollout").checked = S.rollout;
    $("hide").disabled = !D.input.special.some((s) => s);
    $("filter").value = S.filter; $("filter-label").style.display = D.pair === null ? "none" : "";
    $("tab-head").classList.toggle("on", S.view === "head");
    $("tab-model").classList.toggle("on", S.view === "model");
    $("head-pane").style.display = S.view === "head" ? "" : "none";
    $("model-pane").style.display = S.view === "model" ? "" : "none";
  }

  function draw() {
    controls();
    $("title").textContent = D.model + " \u00b7 " + (S.view === "head" ? which() : "model view: " + D.layers + " layers x " + D.heads + " heads");
    $("sub").textContent = D.pair === null ? D.text : "A: " + D.text + "  \u00b7  B: " + D.pair;
    $("note").textContent = "rows: queries, columns: keys; weights as attn matrix --json gives them" +
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
  $("filter").addEventListener("change", (e) => { S.filter = e.target.value; draw(); });
  $("tab-head").addEventListener("click", () => { S.view = "head"; draw(); });
  $("tab-model").addEventListener("click", () => { S.view = "model"; draw(); });
  draw();
})();
