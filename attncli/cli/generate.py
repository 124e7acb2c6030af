"""Command ``attn generate``: watch attention while a language model writes. A thin layer.

The work is in :mod:`attncli.generate` (the loop, sampling, the attention views; NumPy only for
the built-in LM). This module draws: one block per step as it is made (the chosen token, its
probability, the model's top candidates, and the attention row of the query that chose it),
then the full causal matrix of prompt + generated text with the boundary marked.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from attncli.cli.common import app, emit_json, err_console, escape, info, out_console
from attncli.cli.options import PLACEMENT_OPTIONS, declared
from attncli.errors import BadInput
from attncli.generate.decoders import load_decoder
from attncli.generate.run import Settings, document, generate, header_document, lens_layers, step_document
from attncli.generate.step_view import top_keys
from attncli.io.textio import token_label, visible
from attncli.views.render import Heatmap, palette, render_heatmap

INDENT = "    "


@app.command("generate")
@declared("prompt", "n", "temperature", "top_k", "seed", "greedy", "ignore_eos", "model", "transformer",
          "allow_missing_weights", "layer", "head", "rollout", "top", "json_out", "jsonl", "lens", "chat", "backend",
          *PLACEMENT_OPTIONS)
def generate_cmd(
    prompt: Annotated[str, typer.Argument(help="The text the model continues.", show_default=False)],
    *,
    n: Annotated[int, typer.Option("-n", "--new-tokens", help="Write at most this many tokens (1-1000, and within the model's context); the model may end the text sooner.")] = 20,
    temperature: Annotated[float, typer.Option(help="Sample from softmax(logits / T), T > 0: lower is surer, higher more varied.")] = 1.0,
    top_k: Annotated[int, typer.Option("--top-k", help="Sample among the K most probable tokens only (0: the whole vocabulary).")] = 50,
    seed: Annotated[Optional[int], typer.Option(help="Seed of the sampler (0 to 2^32-1): the same seed writes the same text. Default: a fresh one, printed.")] = None,
    greedy: Annotated[bool, typer.Option("--greedy", help="Always take the most probable token (argmax; no sampling).")] = False,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Never end the text early: write exactly -n tokens.")] = False,
    layer: Annotated[Optional[int], typer.Option(help="Show this layer's attention (default: the last layer).")] = None,
    head: Annotated[Optional[int], typer.Option(help="Show this head only (default: the mean of the layer's heads).")] = None,
    rollout: Annotated[bool, typer.Option("--rollout", help="Show attention rollout through every layer (Abnar & Zuidema 2020) instead of one layer.")] = False,
    top: Annotated[Optional[int], typer.Option("--top", help="List each row's K strongest keys with their weights instead of the whole row.")] = None,
    jsonl: Annotated[bool, typer.Option("--jsonl", help="Stream JSON Lines: a header, one line per step, an end line.")] = False,
    lens: Annotated[bool, typer.Option("--lens", help="Logit lens: for each generated token, the layer from which it was the top prediction (JSON: lens_layers).")] = False,
    chat: Annotated[bool, typer.Option("--chat", help="With --transformer: wrap PROMPT as a user message in the model's chat template (default: the text as given, plus the BOS token its tokenizer adds).")] = False,
    **options: Any,
) -> None:
    """Let a causal language model continue PROMPT and watch what each new token attends to.

    Each step shows the chosen token with its probability, the model's most probable tokens, and
    the attention row of the position that chose it (over the prompt and the words written so
    far); the end shows the whole causal matrix with the prompt/generated boundary marked. JSON
    keys: prompt, tokens, generated, stopped, steps [{token, prob, candidates, attention, ...}],
    weights, model, settings, view, prompt_mapping. See docs/generate.md.
    """
    model, transformer, json_out = options["model"], options["transformer"], options["json_out"]
    allow_missing_weights, backend = options["allow_missing_weights"], options["backend"]
    if json_out and jsonl:
        raise BadInput("give --json or --jsonl, not both")
    if top is not None and top < 1:
        raise BadInput(f"--top must be at least 1 (got {top})")
    settings = Settings(n=n, temperature=temperature, top_k=top_k, seed=seed, greedy=greedy, layer=layer,
                        head=head, rollout=rollout, ignore_eos=ignore_eos)
    settings.check()  # before any model is read
    if not prompt.strip():
        raise BadInput('the prompt is empty: give a few words to continue, e.g. attn generate "the cat"')

    if allow_missing_weights and transformer is None:
        raise BadInput("--allow-missing-weights needs --transformer NAME_OR_PATH (a pretrained model)")
    decoder = load_decoder(model, transformer, allow_missing_weights=allow_missing_weights, chat=chat,
                           backend=backend.value if backend else "auto",
                           **{name: options[name] for name in PLACEMENT_OPTIONS})
    drawing = not (json_out or jsonl)
    progress = _Progress(settings.n) if (not drawing or not out_console().is_terminal) else None

    def on_start(gen) -> None:
        for note in gen.encoded.notes:
            info(f"prompt: {note}")
        if jsonl:
            emit_json({"type": "header", **header_document(gen)}, lines=True)
        elif drawing:
            _print_header(gen)

    def on_step(gen, step) -> None:
        if progress is not None:
            progress.advance(step)
        if jsonl:
            emit_json({"type": "step", **step_document(step)}, lines=True)
        elif drawing:
            _print_step(gen, step, top)

    try:
        gen = generate(decoder, prompt, settings, on_step=on_step, on_start=on_start)
    finally:
        if progress is not None:
            progress.stop()
    extra = {}
    if lens:
        extra["lens_layers"] = lens_layers(gen)
    if jsonl:
        doc = document(gen)
        emit_json({"type": "end", **{k: doc[k] for k in ("tokens", "generated", "stopped", "weights")}, **extra}, lines=True)
    elif json_out:
        emit_json({**document(gen), **extra})
    else:
        _print_end(gen, top)
        if lens:
            shown = ", ".join(f"{escape(s.token)} L{layer}" if layer is not None else f"{escape(s.token)} -"
                              for s, layer in zip(gen.steps, extra["lens_layers"]))
            out_console().print(f"logit lens, the layer from which each token was the top prediction "
                                f"(- : never, a sampled token): {shown}", highlight=False)


class _Progress:
    """'writing k/n' on stderr while stdout is piped or JSON (nothing when stderr is not a terminal)."""

    def __init__(self, total: int):
        self.bar = None
        if err_console().is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn

            self.bar = Progress(TextColumn("writing"), BarColumn(), TextColumn("{task.completed}/{task.total} tokens"),
                                TextColumn("{task.fields[last]}"), console=err_console(), transient=True)
            self.task = self.bar.add_task("generate", total=total, last="")
            self.bar.start()

    def advance(self, step) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1, last=escape(step.token))

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _sampling_label(gen) -> str:
    s = gen.settings
    if s.greedy:
        return "greedy (the most probable token at every step)"
    cut = f"top-k {s.top_k}" if s.top_k else "whole vocabulary"
    return f"sampling: temperature {s.temperature:g}, {cut}, seed {gen.seed}"


def _print_header(gen) -> None:
    d = gen.decoder
    con = out_console()
    describe = d.describe() if hasattr(d, "describe") else d.name
    # markup=False: these lines are plain text; visible(): the model's name or path, the prompt and
    # the generated text are data, their control characters are shown, not acted on
    con.print(visible(describe), style="bold", highlight=False, markup=False)
    con.print(_sampling_label(gen), highlight=False, markup=False)
    con.print(f"attention: {gen.view.label(d.heads, d.layers)}", highlight=False, markup=False)
    con.print(f"prompt: {visible(gen.text(0, gen.prompt_length))}", highlight=False, markup=False)


def _labels(gen) -> list[str]:
    """Each token of the text as drawn: its text (␣ for a space, attncli.io.textio.token_label)."""
    return [token_label(gen.decoder.token_text(i)) if i is not None else gen.decoder.label(t)
            for t, i in zip(gen.tokens, gen.ids)]


def _cells(tokens: list[str], row, top: int | None) -> list[tuple[str, float]]:
    if top is not None:
        return [(tokens[j], w) for j, w in top_keys(row, top)]
    return list(zip(tokens, (float(w) for w in row)))


def _print_cells(cells: list[tuple[str, float]], first: str) -> None:
    """Key cells 'token 0.42' on a viridis background (scaled to the row's largest weight), wrapped."""
    from rich.text import Text

    con = out_console()
    width = max(con.width, 20)
    hi = max((w for _, w in cells), default=1.0) or 1.0
    line = Text(visible(first))
    for tok, w in cells:
        cell = f"{visible(tok)} {w:.2f}"
        if len(line) + 2 + len(cell) > width and len(line) > len(INDENT):
            con.print(line, highlight=False, no_wrap=True, overflow="ellipsis")
            line = Text(INDENT)
        else:
            line.append("  " if len(line) > len(first) else " ")
        bg, fg = palette(w / hi)
        line.append(cell, style=f"{fg} on {bg}")
    con.print(line, highlight=False, no_wrap=True, overflow="ellipsis")


def _print_step(gen, step, top: int | None) -> None:
    con = out_console()
    token = token_label(step.text or step.token)
    shown = f"{token} (end of text)" if step.eos else token
    drawn = "" if step.sample_prob is None else f" ({step.sample_prob:.3f} after temperature and top-k)"
    texts = step.candidate_texts or [t for t, _ in step.candidates]
    cands = ", ".join(f"{token_label(text)} {p:.3f}" for text, (_, p) in zip(texts, step.candidates))
    con.print(f"+ {shown}  p {step.prob:.3f}{drawn}", highlight=False, markup=False, overflow="fold")
    con.print(f"{INDENT}model's top: {cands}", highlight=False, markup=False, overflow="fold")
    labels = _labels(gen)
    _print_cells(_cells(labels, step.attention, top), f"{INDENT}{labels[step.query]} attends to:")


def _print_end(gen, top: int | None) -> None:
    import numpy as np

    con = out_console()
    P, T = gen.prompt_length, len(gen.tokens)
    ended = "the model ended the text" if gen.stopped == "eos" else f"{len(gen.generated)} tokens written"
    con.print(f"text: {visible(gen.text(0, P))} | {visible(gen.text(P))}  ({ended})", highlight=False, markup=False)
    shown = _labels(gen)
    view = gen.view.label(gen.decoder.heads, gen.decoder.layers)
    where = f"rows 0-{P - 1} prompt, {P}-{T - 1} (+) generated" if T > P else "the prompt only"
    if top is not None:
        con.print(f"each row's {top} strongest keys · {view} · {where}", style="bold", highlight=False, markup=False)
        for i in range(T):
            mark = "+" if i >= P else " "
            _print_cells(_cells(shown, gen.weights[i, : i + 1], top), f"{mark}{i:>3} {shown[i]} attends to:")
        return
    labels = [("+" if i >= P else "") + t for i, t in enumerate(shown)]
    hm = Heatmap(gen.weights, [f"{i} {t}" for i, t in enumerate(labels)], labels,
                 f"prompt + generated text · {view}", masked=~np.tri(T, dtype=bool),
                 divider_after=P - 1 if T > P else None, notes=(f"{where}; the rule marks the boundary",) if T > P else (),
                 more="--top K lists each row's strongest keys, --json has every weight")
    render_heatmap(con, hm, max_rows=T)
