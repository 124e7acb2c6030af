"""Commands ``attn ablate``, ``attn patch`` and ``attn dla``: the causal tests of attncli/causal on a
pretrained model's traced pass (attn's NumPy pass where it runs the model, transformers' under hooks
with --backend torch or where it does not), drawn by attncli/views/causal.py, with --json, --svg, --png and
--html as every view. Nothing heavy is imported at module level."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from attncli.causal import documents, grids
from attncli.causal.dla import dla
from attncli.causal.grids import check_traced
from attncli.causal.target import resolve
from attncli.tinylm.traced import load_builtin
from attncli.cli.common import app
from attncli.cli.matrix import Exports, _check_exports
from attncli.cli.options import (BackendOpt, DeviceMapOpt, DeviceOpt, DtypeOpt, ExportWidthOpt, HtmlOpt, MaxMemoryOpt, PngOpt,
                                 SvgOpt)
from attncli.cli.output import show
from attncli.cli.progress import Stage
from attncli.cli.transformer import load_model
from attncli.errors import BadInput
from attncli.textio import read_user_text
from attncli.views.causal import causal_view

ModelArg = Annotated[Optional[str], typer.Option("--transformer", help="A pretrained model: hub id or directory "
                                                 "(a decoder, or an encoder with its masked-LM head).", show_default=False)]
TargetWord = Annotated[Optional[str], typer.Option("--target", help="The token whose log-probability (or logit) is measured.",
                                                   metavar="TOKEN")]
TargetId = Annotated[Optional[int], typer.Option("--target-id", help="The target as a vocabulary id.", metavar="ID")]
ContrastWord = Annotated[Optional[str], typer.Option("--contrast", help="Measure logit(target) - logit(this token) instead.",
                                                     metavar="TOKEN")]
ContrastId = Annotated[Optional[int], typer.Option("--contrast-id", help="The contrast as a vocabulary id.", metavar="ID")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
AllowOpt = Annotated[bool, typer.Option("--allow-missing-weights", help="Warn instead of refusing unused weights.")]


def _setup(transformer: Optional[str], text: str, allow: bool, json_out: bool, exports: tuple,
           placed: tuple = (None,) * 5, kind: str | None = None):
    """The model and the text's encoding, after the export targets (``exports``: svg, html, png,
    width) are checked, so a target attn cannot write is refused before any work. ``placed``:
    --backend, --device, --dtype, --device-map, --max-memory."""
    svg, html, png, width = exports
    _check_exports(Exports(svg=svg, html=html, png=png, width=width))
    backend, device, dtype, device_map, max_memory = placed
    if not transformer:  # ablate, patch, dla: attn's built-in LM (attncli.tinylm.traced); attribute needs a checkpoint
        if kind is None:
            raise BadInput("give the model with --transformer NAME (a hub id or a directory)")
        if any(p is not None for p in placed):
            raise BadInput("--backend, --device, --dtype, --device-map and --max-memory place a --transformer model: "
                           "without one, the built-in LM runs on attn's own pass")
        model = load_builtin()
    else:
        model = load_model(transformer, backend.value if backend else "auto", allow, json_out=json_out, device=device,
                           dtype=dtype, device_map=device_map, max_memory=max_memory)  # auto: the NumPy pass wherever it runs
    check_traced(model, kind or "ablate")  # the refusal explore gives too (causal.grids.missing)
    return model, model.encode(text)


def _target(model, ids, target, target_id, contrast, contrast_id):
    return resolve(model, ids, target=target, target_id=target_id, contrast=contrast, contrast_id=contrast_id)


def _show(doc: dict[str, Any], title: str, json_out: bool, svg, html, png, width, positionals: list,
          options: list) -> None:
    view = causal_view(doc, title=title, command=doc["command"], positionals=positionals, options=options)
    show(view, json_out=json_out, exports=Exports(svg=svg, html=html, png=png, width=width))


def _options(transformer, target, target_id, contrast, contrast_id, backend, device, dtype, allow, *more) -> list:
    """The options of a causal command, for the command line that reproduces its result."""
    return [("--transformer", transformer), ("--target", target), ("--target-id", target_id), ("--contrast", contrast),
            ("--contrast-id", contrast_id), *more, ("--backend", backend.value if backend else None),
            ("--device", device), ("--dtype", dtype), ("--allow-missing-weights", allow)]


def _progress(what: str, json_out: bool):
    return Stage(what, json_out=json_out)


def _reference_ids(model, path: Path) -> list[list[int]]:
    lines = [line.strip() for line in read_user_text(path, "--reference", hint="one text per line").splitlines()]
    texts = [line for line in lines if line]
    if not texts:
        raise BadInput(f"--reference {path} holds no text: mean ablation needs at least one line to average over")
    return [model.encode(t, truncate=True).ids for t in texts]


@app.command("ablate")
def ablate_cmd(
    text: Annotated[str, typer.Argument(help="The text the model reads.", show_default=False)],
    *,
    transformer: ModelArg = None,
    target: TargetWord = None,
    target_id: TargetId = None,
    contrast: ContrastWord = None,
    contrast_id: ContrastId = None,
    mode: Annotated[str, typer.Option(help="zero: the head's output set to 0; mean: to its mean over --reference.")] = "zero",
    reference: Annotated[Optional[Path], typer.Option(help="Texts (one a line) a head's mean output is taken over.",
                                                      metavar="FILE")] = None,
    position: Annotated[Optional[int], typer.Option(help="Ablate at this token position only (default: every one).",
                                                    metavar="N")] = None,
    backend: BackendOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    device_map: DeviceMapOpt = None,
    max_memory: MaxMemoryOpt = None,
    allow_missing_weights: AllowOpt = False,
    json_out: JsonOpt = False,
    svg: SvgOpt = None,
    html: HtmlOpt = None,
    png: PngOpt = None,
    width: ExportWidthOpt = None,
) -> None:
    """Knock each head out and see how the prediction moves: layers x heads."""
    if mode not in grids.MODES:
        raise BadInput(f"--mode {mode!r}: choose one of {', '.join(grids.MODES)}")
    if mode == "zero" and reference is not None:
        raise BadInput("--reference is the texts of --mode mean: add --mode mean, or drop --reference")
    model, enc = _setup(transformer, text, allow_missing_weights, json_out, (svg, html, png, width),
                        (backend, device, dtype, device_map, max_memory), "ablate")
    t = _target(model, enc.ids, target, target_id, contrast, contrast_id)
    means = grids.head_means(model, _reference_ids(model, reference)) if mode == "mean" and reference else None
    with _progress(f"ablating {model.layers} x {model.heads} heads", json_out):
        grid = grids.ablate(model, enc.ids, t, mode=mode, means=means, position=position)
    doc = documents.ablate_document(model, enc, t, grid, mode=mode, position=position)
    _show(doc, f"attn ablate: {text[:60]}", json_out, svg, html, png, width, [text],
          _options(transformer, target, target_id, contrast, contrast_id, backend, device, dtype, allow_missing_weights,
                   ("--mode", mode if mode != "zero" else None), ("--reference", reference), ("--position", position)))


@app.command("patch")
def patch_cmd(
    clean: Annotated[str, typer.Argument(help="The clean text.", show_default=False)],
    corrupt: Annotated[str, typer.Argument(help="The corrupted text (the same number of tokens).", show_default=False)],
    *,
    transformer: ModelArg = None,
    target: TargetWord = None,
    target_id: TargetId = None,
    contrast: ContrastWord = None,
    contrast_id: ContrastId = None,
    site: Annotated[str, typer.Option("--site", help="resid (the stream into a layer), attn, mlp (their outputs), "
                                      "per position; or head (a head's output at every position).")] = "resid",
    backend: BackendOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    device_map: DeviceMapOpt = None,
    max_memory: MaxMemoryOpt = None,
    allow_missing_weights: AllowOpt = False,
    json_out: JsonOpt = False,
    svg: SvgOpt = None,
    html: HtmlOpt = None,
    png: PngOpt = None,
    width: ExportWidthOpt = None,
) -> None:
    """Copy clean activations into the corrupted run: the fraction of the logit difference restored."""
    if site not in grids.PATCH_SITES:
        raise BadInput(f"--site {site!r}: choose one of {', '.join(grids.PATCH_SITES)}")
    model, enc = _setup(transformer, clean, allow_missing_weights, json_out, (svg, html, png, width),
                        (backend, device, dtype, device_map, max_memory), "patch")
    bad = model.encode(corrupt)
    grids.check_same_length(model, enc.ids, bad.ids)
    t = _target(model, enc.ids, target, target_id, contrast, contrast_id)
    with _progress(f"patching {site} in {model.layers} layers", json_out):
        grid = grids.patch(model, enc.ids, bad.ids, t, where=site)
    doc = documents.patch_document(model, enc, bad, t, grid, site=site)
    _show(doc, f"attn patch: {clean[:60]}", json_out, svg, html, png, width, [clean, corrupt],
          _options(transformer, target, target_id, contrast, contrast_id, backend, device, dtype, allow_missing_weights,
                   ("--site", site if site != "resid" else None)))


@app.command("dla")
def dla_cmd(
    text: Annotated[str, typer.Argument(help="The text the model reads.", show_default=False)],
    *,
    transformer: ModelArg = None,
    target: TargetWord = None,
    target_id: TargetId = None,
    contrast: ContrastWord = None,
    contrast_id: ContrastId = None,
    backend: BackendOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    device_map: DeviceMapOpt = None,
    max_memory: MaxMemoryOpt = None,
    allow_missing_weights: AllowOpt = False,
    json_out: JsonOpt = False,
    svg: SvgOpt = None,
    html: HtmlOpt = None,
    png: PngOpt = None,
    width: ExportWidthOpt = None,
) -> None:
    """Direct logit attribution: each head's and MLP's direct part of the target's logit."""
    model, enc = _setup(transformer, text, allow_missing_weights, json_out, (svg, html, png, width),
                        (backend, device, dtype, device_map, max_memory), "dla")
    t = _target(model, enc.ids, target, target_id, contrast, contrast_id)
    doc = documents.dla_document(model, enc, t, dla(model, enc.ids, t))
    _show(doc, f"attn dla: {text[:60]}", json_out, svg, html, png, width, [text],
          _options(transformer, target, target_id, contrast, contrast_id, backend, device, dtype, allow_missing_weights))
