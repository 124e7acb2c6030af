"""Every shared option of the ``attn`` commands, declared once: its flag, type, help and default.

Each is an ``Annotated`` alias (``LayerOpt``), and :data:`OPTIONS` names them by parameter name with
their defaults; :func:`declared` builds a command's signature from those names, so ``attn matrix``
and ``attn explore`` (which takes ``attn matrix``'s options as its starting state) list their 40-odd
options once, here, and any command reuses them by name. Which options go together is
attncli.rules.option_conflicts' table, by the same names. Each help text is true for every command that
takes it. Nothing heavy is imported here: the completions import the registries only when they run.
"""

import inspect
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from attncli.attention.projection import PROJECTIONS
from attncli.attention.variants import VARIANTS
from attncli.rules.option_conflicts import BACKENDS, NEW_SWITCHES, SHOWS, STACKS, SWITCHES, TRANSFORMER_ONLY, flag  # noqa: F401

PRETRAINED = "Pretrained transformers"  # the --help panel of the --transformer options


def switch(name: str) -> Any:
    """The flag of a pretrained view's switch, declared with its help beside its conflict rows
    (attncli.rules.option_conflicts.SWITCHES)."""
    return Annotated[bool, typer.Option(flag(name), help=SWITCHES[name], rich_help_panel=PRETRAINED)]


Show = Enum("Show", [(name.replace("-", "_"), name) for name in SHOWS], type=str)  # the choices: attncli.rules.option_conflicts


class Positions(str, Enum):
    sinusoidal = "sinusoidal"
    none = "none"


Backend = Enum("Backend", [(name, name) for name in BACKENDS], type=str)  # the choices: attncli.rules.option_conflicts


class FilterSpecials(str, Enum):
    none = "none"
    bertviz = "bertviz"


class PairFilter(str, Enum):
    all = "all"
    a_a = "a-a"
    a_b = "a-b"
    b_a = "b-a"
    b_b = "b-b"


def _complete_variant(incomplete: str) -> list[str]:
    return [name for name in VARIANTS if name.startswith(incomplete)]


def _complete_projection(incomplete: str) -> list[str]:
    return [name for name in PROJECTIONS if name.startswith(incomplete)]


# --- the word-vector matrix -----------------------------------------------------------------------

ContextOpt = Annotated[Optional[str], typer.Option(help="Cross-attention: keys and values come from this sentence.")]
VariantOpt = Annotated[str, typer.Option(help="Attention variant (see 'attn variants').", autocompletion=_complete_variant,
                                         metavar="NAME")]
CausalOpt = Annotated[bool, typer.Option("--causal", help="Each query sees only itself and earlier keys.")]
WindowOpt = Annotated[Optional[int], typer.Option(help="Each query sees keys at most N positions away (local: window D, default 2).",
                                                  metavar="N")]
PadToOpt = Annotated[Optional[int], typer.Option("--pad-to", help="Append <pad> tokens up to N; pad keys are masked.", metavar="N")]
PositionsOpt = Annotated[Positions, typer.Option(help="Positional encoding added to the word vectors: sinusoidal or none.",
                                                 metavar="KIND")]
ProjOpt = Annotated[str, typer.Option("--proj", help="Projection to Q, K, V: identity, random (seeded) or trained.",
                                      autocompletion=_complete_projection, metavar="NAME")]
DKOpt = Annotated[Optional[int], typer.Option("--d-k", help="Query/key/value size of --proj random (default: the vector size).")]
SeedOpt = Annotated[int, typer.Option(help="Seed of the random projection and the variants' own weights.")]
LayerOpt = Annotated[Optional[int], typer.Option(help="Layer of --proj trained (default 0) or of --transformer (0-based; default the last).")]
HeadOpt = Annotated[Optional[int], typer.Option(help="One head of --proj trained or --transformer (0-based; default: every head and their mean).")]
HeadsOpt = Annotated[Optional[int], typer.Option(help="Heads of --variant multihead (default 4).")]
MaxRelativeOpt = Annotated[int, typer.Option("--max-relative", help="Clipping distance k of --variant relative.")]
ShowOpt = Annotated[Show, typer.Option(help="What the heatmap shows: weights, scores (before the softmax) or output (the output "
                                       "vectors); with --transformer weights, scores, norms (||alpha f(x)||) or a contribution method, one "
                                       "matrix per layer with the residual and norms: alti, globenc, value-zeroing.",
                  metavar="VIEW")]
ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="Word-vector model (default: $ATTN_MODEL or the built-in one).")]

# --- a pretrained transformer's attention ---------------------------------------------------------

TransformerOpt = Annotated[Optional[str], typer.Option(help="A pretrained Hugging Face model: hub id or directory (docs/transformers.md).",
                                                       metavar="NAME_OR_PATH", rich_help_panel=PRETRAINED)]
PairOpt = Annotated[Optional[str], typer.Option(help="Second sentence: the two are ONE input (segments A and B).",
                                                rich_help_panel=PRETRAINED)]
FilterOpt = Annotated[Optional[PairFilter], typer.Option("--filter", help="One block of a --pair, QUERIES-KEYS: all, a-a, a-b, "
                                                         "b-a or b-b.", metavar="BLOCK", rich_help_panel=PRETRAINED)]
FilterSpecialsOpt = Annotated[Optional[FilterSpecials], typer.Option(
    "--filter-specials", help="Special tokens in a --filter block: none (attn's default) or bertviz ([CLS] and the first [SEP] in A, the last [SEP] in B).",
    metavar="WHICH", rich_help_panel=PRETRAINED)]
WordsOpt = switch("words")
HideSpecialOpt = switch("hide_special")
RolloutOpt = switch("rollout")
BackendOpt = Annotated[Optional[Backend], typer.Option(help="numpy (attn's own forward pass), torch (transformers) or auto.",
                                                       metavar="NAME", rich_help_panel=PRETRAINED)]
DeviceOpt = Annotated[Optional[str], typer.Option(help="With --backend torch: where transformers runs the model: cpu, cuda, mps or auto.",
                                                   rich_help_panel=PRETRAINED)]
DtypeOpt = Annotated[Optional[str], typer.Option(help="With --backend torch: the weights' dtype: float32, bfloat16 or float16.",
                                                  rich_help_panel=PRETRAINED)]
DeviceMapOpt = Annotated[Optional[str], typer.Option(
    "--device-map", help="With --backend torch: let accelerate split the model across the GPUs, the CPU and the disk: auto "
    "(or balanced, balanced_low_0, sequential). The big extra.", metavar="auto", rich_help_panel=PRETRAINED)]
MaxMemoryOpt = Annotated[Optional[str], typer.Option(
    "--max-memory", help="With --device-map: each device's budget, DEVICE=SIZE,... (a GPU index, cpu, mps), plus disk "
    "to allow disk offload, e.g. 0=20GiB,cpu=64GiB,disk.", metavar="SPEC", rich_help_panel=PRETRAINED)]
TruncateOpt = switch("truncate")
ModelViewOpt = switch("model_view")
AllowMissingWeightsOpt = switch("allow_missing_weights")
LayersOpt = Annotated[Optional[str], typer.Option(help="Layers of --model-view, A-B (0-based, both included).",
                                                  rich_help_panel=PRETRAINED)]

# --- a long text (docs/transformers.md, "A long text") --------------------------------------------

LongRowsOpt = Annotated[Optional[str], typer.Option("--rows", help="Only these query rows: N, A:B (B excluded), A-B (both included), "
                                                    "last:N or word:TEXT (0-based input positions).", metavar="SPEC",
                                                    rich_help_panel=PRETRAINED, show_default=False)]
TopKOpt = Annotated[Optional[int], typer.Option("--top-k", help="Each row's K strongest keys, the rest summed into one 'other' column.",
                                                metavar="K", rich_help_panel=PRETRAINED, show_default=False)]
PoolOpt = Annotated[Optional[str], typer.Option("--pool", help="Attention between spans: sentence, line or N (chunks of N tokens); "
                                                "summed over a span's keys, averaged over its queries.",
                                                metavar="SPAN", rich_help_panel=PRETRAINED, show_default=False)]

# --- exports (--svg, --html, --png, --width): laid out for the file, not the terminal ------------

SvgOpt = Annotated[Optional[Path], typer.Option(help="Also save the view as SVG (as wide as the view needs; offline fonts).",
                                                metavar="FILE", readable=False)]
HtmlOpt = Annotated[Optional[Path], typer.Option(help="Also save the view as HTML (--transformer: an interactive page, offline).",
                                                 metavar="FILE", readable=False)]
PngOpt = Annotated[Optional[Path], typer.Option(help="Also save the view as PNG (the SVG's picture; the png extra).",
                                                metavar="FILE", readable=False)]
ExportWidthOpt = Annotated[Optional[int], typer.Option("--width", help="Lay the --svg/--html/--png view out for N columns "
                                                       "(default: as wide as it needs).", metavar="N")]

# --- beyond raw weights (issue 22: docs/beyond-weights.md) -----------------------------------------

FlowOpt = switch("flow")

# --- encoder-decoders (T5, BART: docs/transformers.md, "Encoder-decoders") ---------------------------

Stack = Enum("Stack", [(name, name) for name in STACKS], type=str)


TargetOpt = Annotated[Optional[str], typer.Option("--target", help="An encoder-decoder's (T5, BART) decoder text: its labels shifted right, as transformers feeds them.",
                                                  rich_help_panel=PRETRAINED, show_default=False)]
StackOpt = Annotated[Optional[Stack], typer.Option("--stack", help="An encoder-decoder's attention: encoder (default), decoder (causal, over --target) or cross (--target's tokens over the sentence's).",
                                                   metavar="STACK", rich_help_panel=PRETRAINED, show_default=False)]

# --- every command's output, and the model it reads -------------------------------------------------

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
ExploreOpt = Annotated[bool, typer.Option("--explore", help="Then open the statistics in an interactive view (the explore extra).")]

# --- the causal tests (attn ablate, patch, dla, attribute, circuit): what they measure -----------------

TargetTokenOpt = Annotated[Optional[str], typer.Option("--target", help="The token whose log-probability (or logit) is measured.",
                                                       metavar="TOKEN")]
TargetIdOpt = Annotated[Optional[int], typer.Option("--target-id", help="The target as a vocabulary id.", metavar="ID")]
ContrastOpt = Annotated[Optional[str], typer.Option("--contrast", help="Measure logit(target) - logit(this token) instead.",
                                                    metavar="TOKEN")]
ContrastIdOpt = Annotated[Optional[int], typer.Option("--contrast-id", help="The contrast as a vocabulary id.", metavar="ID")]

# --- work in shards (attn stats; --pairs FILE on attn ablate, patch, attribute and circuit) ------------

PairsOpt = Annotated[Optional[Path], typer.Option(
    "--pairs", metavar="FILE", help="Average over the prompt pairs of a JSONL file (one object a line: clean, corrupt, "
    "target, optional contrast) instead of one text.")]
OutOpt = Annotated[Optional[Path], typer.Option("--out", metavar="DIR", help="Write a shard per chunk here; a run started "
                                                "again resumes.")]
ShardPairsOpt = Annotated[int, typer.Option("--shard-pairs", metavar="N", help="With --pairs: pairs per shard.")]
WorkersOpt = Annotated[int, typer.Option("--workers", metavar="N", help="Local worker processes (with --ray: actors; "
                                         "default the cluster's CPUs).")]
RayOpt = Annotated[Optional[str], typer.Option("--ray", metavar="ADDRESS", help="Run the chunks on the Ray cluster at this "
                                               "address (the cluster extra).")]

# TRANSFORMER_ONLY: the options that only --transformer gives a meaning to (attn matrix's parameter
# names), read by cli.matrix (which sends them to --transformer); the table refuses them without it


# --- the declarations, by parameter name: what a command's signature is built from ------------------

OPTIONS: dict[str, tuple[Any, ...]] = {  # parameter name -> (its Annotated type, its default[, the parameter's name])
    "context": (ContextOpt, None), "variant": (VariantOpt, "scaled"), "causal": (CausalOpt, False),
    "sentences": (Annotated[Optional[int], typer.Option(help="Use at most this many sentences.")], None),
    "window": (WindowOpt, None), "pad_to": (PadToOpt, None), "positions": (PositionsOpt, Positions.sinusoidal),
    "proj": (ProjOpt, "identity"), "d_k": (DKOpt, None), "seed": (SeedOpt, 0), "layer": (LayerOpt, None),
    "head": (HeadOpt, None), "heads": (HeadsOpt, None), "max_relative": (MaxRelativeOpt, 4),
    "show": (ShowOpt, Show.weights), "model": (ModelOpt, None),
    "svg": (SvgOpt, None), "html": (HtmlOpt, None), "png": (PngOpt, None), "width": (ExportWidthOpt, None),
    "transformer": (TransformerOpt, None), "pair": (PairOpt, None), "filter": (FilterOpt, None),
    "filter_specials": (FilterSpecialsOpt, None), "words": (WordsOpt, False), "hide_special": (HideSpecialOpt, False),
    "rollout": (RolloutOpt, False), "backend": (BackendOpt, None), "truncate": (TruncateOpt, False),
    "model_view": (ModelViewOpt, False), "layers": (LayersOpt, None),
    "allow_missing_weights": (AllowMissingWeightsOpt, False), "flow": (FlowOpt, False), "device": (DeviceOpt, None),
    "dtype": (DtypeOpt, None), "device_map": (DeviceMapOpt, None), "max_memory": (MaxMemoryOpt, None),
    "target": (TargetOpt, None), "stack": (StackOpt, None), "rows": (LongRowsOpt, None), "top_k": (TopKOpt, None),
    "pool": (PoolOpt, None),
    **{name: (switch(name), False) for name in NEW_SWITCHES},
    "json_out": (JsonOpt, False), "explore": (ExploreOpt, False),
    "target_token": (TargetTokenOpt, None, "target"),  # the causal tests' --target: a parameter named target
    "target_id": (TargetIdOpt, None), "contrast": (ContrastOpt, None), "contrast_id": (ContrastIdOpt, None),
    "pairs": (PairsOpt, None), "out": (OutOpt, None), "shard_pairs": (ShardPairsOpt, 64), "workers": (WorkersOpt, 1),
    "ray": (RayOpt, None),
}

# groups of them, in the order --help lists them
WORD_VECTOR_OPTIONS = ("context", "variant", "causal", "window", "pad_to", "positions", "proj", "d_k", "seed", "layer",
                       "head", "heads", "max_relative", "show")
EXPORT_OPTIONS = ("svg", "html", "png", "width")
VIEW_OPTIONS = ("transformer", "pair", "filter", "filter_specials", "words", "hide_special", "rollout", "backend",
                "truncate", "model_view", "layers", "allow_missing_weights", "flow", *NEW_SWITCHES)  # a pretrained model's view
PLACEMENT_OPTIONS = ("device", "dtype", "device_map", "max_memory")  # --backend torch: where and how it runs
LONG_OPTIONS = ("rows", "top_k", "pool")  # a long text's views
CAUSAL_MODEL_OPTIONS = ("transformer", "target_token", "target_id", "contrast", "contrast_id")  # what a causal test measures
PAIRS_OPTIONS = ("pairs", "out", "shard_pairs", "workers", "ray")  # --pairs FILE and how its shards run


def declared(*names: str) -> Callable[[Callable], Callable]:
    """Build a command's signature from the declarations: ``names`` lists every parameter of the
    command in the order ``--help`` shows them; a name the function declares itself is its own
    (its positional arguments, an option only it has, or its own help for a shared name), any other
    is :data:`OPTIONS`' (keyword-only; the parameter's name is the key, or the entry's third field),
    and reaches the function through its ``**options``. Typer
    reads the signature built here (``__signature__``), so the help, the completion and the checks
    are those of the declaration. Nothing runs at call time: Typer passes every option by name.

        @app.command("ablate")
        @declared("text", "transformer", "backend", "layer", "head", "json_out")
        def ablate_cmd(text: Annotated[str, typer.Argument(...)], *, json_out: JsonOpt = False, **options): ...
    """
    def decorate(fn: Callable) -> Callable:
        own = dict(inspect.signature(fn, eval_str=True).parameters)
        if not any(p.kind is p.VAR_KEYWORD for p in own.values()):
            raise TypeError(f"{fn.__name__} takes the declared options through **options")
        params = []
        for name in names:
            if name in own:
                params.append(own.pop(name))
            else:
                annotation, default, *renamed = OPTIONS[name]
                params.append(inspect.Parameter(renamed[0] if renamed else name, inspect.Parameter.KEYWORD_ONLY,
                                                annotation=annotation, default=default))
        left = [name for name, p in own.items() if p.kind is not p.VAR_KEYWORD]
        if left:
            raise TypeError(f"{fn.__name__}: declared() does not list {', '.join(left)}")
        fn.__signature__ = inspect.Signature(params)
        return fn

    return decorate
