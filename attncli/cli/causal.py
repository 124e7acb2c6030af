"""Commands ``attn ablate``, ``attn patch`` and ``attn dla``: each builds its request
(attncli.causal.causal_request), hands it to attncli.pipeline.compute_causal and prints the result with
attncli.cli.output.show (--json, --svg, --png and --html as every view); ``attn attribute`` and ``attn
circuit`` (cli/attribute.py, cli/circuit.py) do the same through :func:`run_gradients`. The options
the causal commands share are declared once, in attncli.cli.options. Nothing heavy is imported at module level."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from attncli.causal.causal_request import AblateRequest, CausalRequest, DlaRequest, PatchRequest
from attncli.causal.gradient_request import GradientRequest
from attncli.cli.common import app
from attncli.cli.options import CAUSAL_MODEL_OPTIONS, PAIRS_OPTIONS, declared
from attncli.cli.output import Exports, check_exports, show
from attncli.cli.pairs import check_pairs_options, run_pairs_command
from attncli.cli.progress import Progress
from attncli.cli.transformer import load_model
from attncli.pipeline.causal_compute import compute as compute_causal
from attncli.pipeline.gradient_compute import compute as compute_gradients

MODEL_OPTIONS = CAUSAL_MODEL_OPTIONS  # before a command's own options
RUN_OPTIONS = ("backend", "device", "dtype", "device_map", "max_memory", "allow_missing_weights")  # after them
OUTPUT_OPTIONS = ("json_out", "svg", "html", "png", "width")
MEASURED = ("transformer", "target", "target_id", "contrast", "contrast_id")  # MODEL_OPTIONS' parameters: request fields
REQUEST_OPTIONS = (*MEASURED, *RUN_OPTIONS)  # the request's shared fields


def _shared(options: dict[str, Any]) -> dict[str, Any]:
    """The request's shared fields from the command's options (--backend's enum: its value)."""
    fields = {name: options[name] for name in REQUEST_OPTIONS}
    fields["backend"] = fields["backend"].value if fields["backend"] else "auto"
    return fields


def _run(request: CausalRequest, options: dict[str, Any]) -> None:
    """Check, load, compute and print ``request``; the export targets are checked before any work
    (--json with an export into stdout refused: they would share it)."""
    request.check()
    json_out = options["json_out"]
    exports = Exports.of(options)
    check_exports(exports, json_out)
    model = None  # no --transformer: compute loads attn's built-in LM (a second, nothing to show loading)
    if request.transformer is not None:
        model = load_model(request.transformer, request.backend, request.allow_missing_weights, json_out=json_out,
                           device=request.device, dtype=request.dtype, device_map=request.device_map,
                           max_memory=request.max_memory)  # auto: the NumPy pass wherever it runs
    result = compute_causal(request, model, progress=Progress(json_out))
    show(result, json_out=json_out, exports=exports)


@app.command("ablate")
@declared("text", *MODEL_OPTIONS, "mode", "reference", "position", *PAIRS_OPTIONS, *RUN_OPTIONS, *OUTPUT_OPTIONS)
def ablate_cmd(
    text: Annotated[Optional[str], typer.Argument(help="The text the model reads (or --pairs FILE).",
                                                  show_default=False)] = None,
    *,
    mode: Annotated[str, typer.Option(help="zero: the head's output set to 0; mean: to its mean over --reference.")] = "zero",
    reference: Annotated[Optional[Path], typer.Option(help="Texts (one a line) a head's mean output is taken over.",
                                                      metavar="FILE")] = None,
    position: Annotated[Optional[int], typer.Option(help="Ablate at this token position only (default: every one).",
                                                    metavar="N")] = None,
    **options: Any,
) -> None:
    """Knock each head out and see how the prediction moves: layers x heads.

    --pairs FILE: the mean over a JSONL file of pairs (docs/causal.md)."""
    check_pairs_options({**options, "mode": mode, "reference": reference, "position": position}, [text])
    if options["pairs"] is not None:
        return run_pairs_command("ablate", options)
    _run(AblateRequest(text, **_shared(options), mode=mode, reference=reference, position=position), options)


@app.command("patch")
@declared("clean", "corrupt", *MODEL_OPTIONS, "site", *PAIRS_OPTIONS, *RUN_OPTIONS, *OUTPUT_OPTIONS)
def patch_cmd(
    clean: Annotated[Optional[str], typer.Argument(help="The clean text (or --pairs FILE).", show_default=False)] = None,
    corrupt: Annotated[Optional[str], typer.Argument(help="The corrupted text (the same number of tokens).",
                                                     show_default=False)] = None,
    *,
    site: Annotated[str, typer.Option("--site", help="resid (the stream into a layer), attn, mlp (their outputs), "
                                      "per position; or head (a head's output at every position).")] = "resid",
    **options: Any,
) -> None:
    """Copy clean activations into the corrupted run: the fraction of the logit difference restored.

    --pairs FILE: the mean over a JSONL file of pairs (docs/causal.md)."""
    check_pairs_options(options, [clean, corrupt])
    if options["pairs"] is not None:
        return run_pairs_command("patch", options, site=site)
    _run(PatchRequest(clean, **_shared(options), corrupt=corrupt, site=site), options)


@app.command("dla")
@declared("text", *MODEL_OPTIONS, *RUN_OPTIONS, *OUTPUT_OPTIONS)
def dla_cmd(
    text: Annotated[str, typer.Argument(help="The text the model reads.", show_default=False)],
    **options: Any,
) -> None:
    """Direct logit attribution: each head's and MLP's direct part of the target's logit."""
    _run(DlaRequest(text, **_shared(options)), options)


# --- attn attribute and attn circuit (cli/attribute.py, cli/circuit.py): gradients on attn's tape or torch's ---

GRADIENT_OPTIONS = ("backend", "allow_missing_weights")  # after their own options


def gradient_fields(options: dict[str, Any]) -> dict[str, Any]:
    """The gradient request's shared fields from the command's options (--backend's enum: its value)."""
    fields = {name: options[name] for name in (*MEASURED, *GRADIENT_OPTIONS)}
    fields["backend"] = fields["backend"].value if fields["backend"] else "auto"
    return fields


def run_gradients(request: GradientRequest, options: dict[str, Any]) -> None:
    """Check, load (its --backend: auto, attn's NumPy pass where it runs the model, whose tape runs the
    backward; torch, transformers' modules under autograd), compute and print ``request``;
    the export targets are checked before any work (--json with an export into stdout refused)."""
    request.check()
    json_out = options["json_out"]
    exports = Exports.of(options)
    check_exports(exports, json_out)
    model = load_model(request.transformer, request.backend, request.allow_missing_weights, json_out=json_out)
    result = compute_gradients(request, model, progress=Progress(json_out))
    show(result, json_out=json_out, exports=exports)
