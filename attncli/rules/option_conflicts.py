"""Which options of ``attn matrix``, ``attn explore``, the causal tests (``attn ablate``, ``patch``,
``dla``, ``attribute``, ``circuit``), ``attn qk`` and ``attn stats`` go together: one table of refusals.

Each row of :data:`ROWS` names the state it refuses (conditions on the options, all of which hold),
the paths it applies to, and the message, which says what to do instead. Three things are made
from it: the command line's errors (:func:`validate`, a BadInput: exit 2), the keys ``attn
explore`` shows disabled with the row's reason (:func:`refusal`), and the table of docs/pretrained.md
("Which options go together", :func:`markdown`; ``python -m attncli.rules.option_conflicts --markdown``
prints it, ``--write`` rewrites it in place, and tests/test_option_conflicts.py checks the two agree).

The options are named by ``attn matrix``'s parameter names (``filter`` is --filter, ``text``
the sentence argument); an option counts as on unless it is absent, None or False.
The rows are checked in order, so the first refusal of a state is always the same one.

    >>> validate({"rollout": True, "head": 0}, "transformer")
    Traceback (most recent call last):
    ...
    attncli.errors.BadInput: --rollout uses every head (the mean of each layer's heads): drop --head

To add a conflict: add a Row where it should be checked, with its conditions (On, Off, Given, Is,
Not, Below, Outside, Blank: attncli.rules.option_conditions), its paths and a message that names the fix;
run ``python -m attncli.rules.option_conflicts --write``. The CLI test of every row, explore's keys and the
docs follow (a new option: a sample in SAMPLES).

A helper below every wing (attncli/rules/): every wing may import it (the transformer wing reads :data:`BACKENDS`).
"""

from __future__ import annotations

import sys
from dataclasses import fields
from typing import Any, ClassVar, Iterable, Mapping, Optional

from attncli.errors import BadInput
from attncli.rules.option_conditions import (Below, Blank, Given, Is, Not, Off, On, Outside, Row,  # noqa: F401
                                       flag)  # the table's words, re-exported
from attncli.io.fileio import atomic_write, read_text

# --- choices, named once --------------------------------------------------------------------------

BACKENDS = ("auto", "numpy", "torch")
STACKS = ("encoder", "decoder", "cross")
CONTRIBUTIONS = ("alti", "globenc", "value-zeroing")  # --show's contribution methods (attncli.hf.methods.contributions)
VECTOR_SHOWS = ("weights", "scores", "output")  # --show of the word-vector matrix
TRANSFORMER_SHOWS = ("weights", "scores", "norms", *CONTRIBUTIONS)  # --show with --transformer
SHOWS = tuple(dict.fromkeys(VECTOR_SHOWS + TRANSFORMER_SHOWS))  # every --show value: cli.options.Show's choices
ALIGNS = ("same", "position")  # attn compare --align

# the switches of a pretrained model's view, each declared once here beside its rows (its help): cli.options
# makes it the flag --NAME of attn matrix and explore, ViewRequest carries it and writes it in its command
# line, explore starts with it; its field and its branch in compute follow (CONTRIBUTING.md, "Adding a view").
SWITCHES = {
    "words": "Merge word pieces: sum over a word's keys, mean over its queries.",
    "hide_special": "Drop [CLS]/[SEP]/<s> rows and columns; rows renormalised over the other keys.",
    "rollout": "Attention rollout through layers 0..--layer: R = Â_L...Â_0, Â = rownorm(head mean + I) (Abnar & Zuidema 2020).",
    "truncate": "Cut an input longer than the model's limit.",
    "model_view": "Every layer x head at a glance, each head's class beside it.",
    "allow_missing_weights": "Run a model whose checkpoint lacks weights it needs or holds some it does not use "
                             "(an error without this flag), with a warning: its attention is not the trained model's.",
    "flow": "Attention flow through layers 0..--layer: max-flow from each input token through the rollout's Â graph "
            "(Abnar & Zuidema 2020).",
}
ABLATE_MODES = ("zero", "mean")  # attn ablate --mode (attncli.causal.grids.MODES)
PATCH_SITES = ("resid", "attn", "mlp", "head")  # attn patch --site (attncli.causal.grids.PATCH_SITES)
ATTRIBUTE_SITES = (*PATCH_SITES, "key", "query")  # attn attribute --site (attncli.causal.attribution.SITES)
MAX_STEPS = 256  # attn circuit --steps at most (attncli.causal.circuit.MAX_STEPS)
PRECISIONS = ("float32", "float64")  # attn stats --precision

# options that only --transformer gives a meaning to (attn matrix's parameter names)
TRANSFORMER_ONLY = ("pair", "filter", "filter_specials", "words", "hide_special", "rollout", "backend", "truncate",
                    "model_view", "layers", "allow_missing_weights", "flow", "device", "dtype", "target", "stack",
                    "top_k", "pool", "device_map", "max_memory")
NEW_SWITCHES = tuple(name for name in SWITCHES if name not in TRANSFORMER_ONLY)  # declared above since these
TRANSFORMER_ONLY += NEW_SWITCHES

# attn matrix options that belong to the word-vector path, with what to use instead
NOT_FOR_TRANSFORMERS = {
    "variant": "the model's own attention is shown (scaled dot product, per head)",
    "proj": "the model's own W_Q, W_K are used",
    "positions": "the model has its own position embeddings",
    "d_k": "the model's head size is fixed",
    "context": "for two sentences as one input use --pair TEXT",
    "causal": "a decoder (GPT-2) is causal by itself, an encoder (BERT) is not",
    "window": "the model sees the whole input",
    "pad_to": "the input is not padded",
    "seed": "nothing is random",
    "heads": "the model's head count is fixed; pick one with --head",
    "max_relative": "it belongs to --variant relative",
    "model": "--transformer names the model",
}

PATHS = {  # path -> where it is (the docs' column)
    "vectors": "attn matrix, attn explore (word vectors)",
    "transformer": "attn matrix --transformer",
    "explore": "attn explore --transformer, and its keys",
    "seq2seq": "encoder-decoders (T5, BART; --target, --stack)",
    "compare": "attn compare",
    "heads": "attn heads",
    "lens": "attn lens",
    "causal": "attn ablate, attn patch, attn dla",
    "gradients": "attn attribute, attn circuit",
    "qk": "attn qk",
    "stats": "attn stats",
    "merge": "attn stats merge",
    "pairs": "attn ablate, patch, attribute, circuit: --pairs FILE",
}
V, T, E, S, C, H, LENS = ("vectors",), ("transformer",), ("explore",), ("seq2seq",), ("compare",), ("heads",), ("lens",)
CA, GR, QK, ST, M, PA = ("causal",), ("gradients",), ("qk",), ("stats",), ("merge",), ("pairs",)
PLACEMENT = ("device", "dtype", "device_map", "max_memory")  # where a --transformer model runs
# one text's options, which a --pairs run refuses (each pair brings its texts and its target; the model runs on
# attn's own pass, placed by none of these)
NOT_WITH_PAIRS = ("target", "target_id", "contrast", "contrast_id", "reference", "position", "verify_cells", *PLACEMENT)
PAIRS_RUN = {"workers": 1, "shard_pairs": 64}  # a --pairs run's options with a default, and the default

# --- the table ------------------------------------------------------------------------------------

FILTER_NEEDS_PAIR = "--filter picks a block of a sentence pair: give the second sentence with --pair TEXT"
NOT_WITH_MODEL_VIEW = ("--model-view draws every head of every layer (pick layers with --layers A-B): --layer, --head, "
                       "--explain, --rollout, --words and --filter do not apply")
LAYERS_NEED_MODEL_VIEW = "--layers A-B picks the layers of --model-view (one layer of the matrix: --layer L)"
FLOW = "--flow is one matrix through every head of layers 0..--layer: drop {}"
NORMS_WHY = {"rollout": "it multiplies weights through the layers", "words": "word rows sum and average weights",
             "hide_special": "it renormalises rows of weights", "model_view": "it classifies the heads by their weights"}
CONTRIBUTION_WHY = {"head": "the residual and the norms are the whole layer's", "hide_special": NORMS_WHY["hide_special"],
                    "model_view": NORMS_WHY["model_view"], "explain": "a cell is a share of the block's output, not a q.k"}
LONG_VIEWS = ("rows", "top_k", "pool")  # a long text's options (attncli.attention.long_view)
NOT_ACROSS = {  # option -> why it does not apply to the cross stack (rows and columns are other tokens)
    "rollout": "--rollout multiplies a stack's layers over one sequence: the cross stack's rows (the target) and "
               "columns (the source) are different tokens, so rollout is not defined there",
    "flow": "--flow follows one sequence's tokens through the layers: not defined across the stacks",
    "model_view": "--model-view draws square self-attention: use --stack encoder or decoder",
    "pair": "--pair is a second source sentence: use it with --stack encoder",
}


def _or(choices: Iterable[str]) -> str:
    *first, last = choices
    return f"{', '.join(first)} or {last}"


ROWS: tuple[Row, ...] = (
    # the word-vector matrix (no --transformer)
    *(Row((Given(p),), V, f"{flag(p)} needs --transformer NAME_OR_PATH (a pretrained model)") for p in TRANSFORMER_ONLY),
    Row((Is("show", tuple(show for show in SHOWS if show not in VECTOR_SHOWS)),), V,
        "--show {show} needs --transformer NAME_OR_PATH (the value vectors of a pretrained model)"),
    *(Row((On(p), Not("proj", ("trained",))), V, f"{flag(p)} needs --proj trained (it picks a learned layer or head)")
      for p in ("layer", "head")),
    # a pretrained model's attention
    *(Row((Given(p),), T, f"{flag(p)} does not apply with --transformer: {why}") for p, why in NOT_FOR_TRANSFORMERS.items()),
    Row((On("filter"), Off("pair")), T + E, FILTER_NEEDS_PAIR),
    Row((On("rollout"), On("head")), T + E, "--rollout uses every head (the mean of each layer's heads): drop --head"),
    *(Row((Below(p),), T + E, f"{flag(p)} is 0-based and at least 0 (got {{{p}}})") for p in ("layer", "head")),
    Row((Not("filter_specials", ("none",)), Is("filter", (None, "all"))), T,
        "--filter-specials says where a --filter block puts the special tokens: add --filter a-a|a-b|b-a|b-b"),
    Row((On("explain"), On("words")), T,
        "--explain I J explains one token-level cell: drop --words (word rows mix several pieces)"),
    Row((On("explain"), On("rollout")), T, "--explain I J explains one head's cell, not the rollout: drop --rollout"),
    Row((On("explain"), On("hide_special")), T,
        "--explain I J takes input positions (special tokens included): drop --hide-special"),
    *(Row((On("model_view"), On(p)), T + E, NOT_WITH_MODEL_VIEW)
      for p in ("head", "layer", "explain", "rollout", "words", "filter")),
    Row((On("layers"), Off("model_view")), T + E, LAYERS_NEED_MODEL_VIEW),
    Row((Not("show", TRANSFORMER_SHOWS),), T,
        f"--show {{show}} does not apply with --transformer: choose {_or(TRANSFORMER_SHOWS)}"),
    *(Row((Is("show", ("scores", "norms")), On(p)), T + E,
          f"--show {{show}} draws one layer's heads token by token: drop {flag(p)} ({why})")
      for p, why in NORMS_WHY.items()),
    *(Row((Is("show", CONTRIBUTIONS), On(p)), T + E, f"--show {{show}} is one matrix per layer, each row summing to 1: "
          f"drop {flag(p)} ({why})") for p, why in CONTRIBUTION_WHY.items()),
    *(Row((On("flow"), cond), T if cond.name == "explain" else T + E, FLOW.format(flag(cond.name)))
      for cond in (On("head"), On("rollout"), On("explain"), Not("show", ("weights",)), On("words"),
                   On("hide_special"), On("model_view"))),
    # an encoder-decoder's stacks
    Row((Not("stack", STACKS),), S, f"--stack {{stack!r}}: choose one of {', '.join(STACKS)}"),
    Row((Is("stack", ("decoder", "cross")), Off("target")), S,
        "--stack {stack} reads the decoder: give its text with --target \"TEXT\""),
    Row((Blank("target"),), S, "the --target text is empty: give the decoder's text, e.g. --target \"le chat\""),
    Row((Not("show", ("weights",)),), S,
        "--show {show} is not implemented for encoder-decoders (T5, BART): use --show weights"),
    Row((On("explain"),), S, "--explain needs attn's NumPy forward pass, which does not run encoder-decoders (T5, BART)"),
    *(Row((Is("stack", ("cross",)), On(p)), S, why) for p, why in NOT_ACROSS.items()),
    Row((Is("stack", ("decoder",)), On("pair")), S, NOT_ACROSS["pair"]),
    # a long text's views (attncli.attention.long_view): rows, or each row's strongest keys, or spans
    Row((On("top_k"), On("pool")), T + E, "--top-k and --pool are two views of the keys: give one of them"),
    *(Row((On(p), On("model_view")), T + E,
          f"{flag(p)} picks rows or keys of one matrix; --model-view draws every head whole: drop one")
      for p in LONG_VIEWS),
    *(Row((On(p), Not("show", ("weights",))), T + E, f"{flag(p)} sums attention weights: drop --show {{show}}")
      for p in LONG_VIEWS[1:]),
    *(Row((On(p), On("flow")), T + E,
          f"{flag(p)} sums attention weights, and flow values are not shares of a row: drop --flow")
      for p in LONG_VIEWS[1:]),
    Row((On("pool"), On("words")), T + E, "--pool merges tokens into spans itself: drop --words"),
    *(Row((On(p),), S, f"{flag(p)} is for one stack of tokens (BERT, GPT-2, Llama families); an encoder-decoder's "
                       "view takes --rows START:END") for p in LONG_VIEWS[1:]),
    # the causal tests (attncli.causal.causal_request: attn ablate, patch and dla; attribute and circuit: gradients)
    Row((Not("mode", ABLATE_MODES),), CA, f"--mode {{mode!r}}: choose one of {', '.join(ABLATE_MODES)}"),
    Row((On("reference"), Is("mode", ("zero",))), CA,
        "--reference is the texts of --mode mean: add --mode mean, or drop --reference"),
    Row((Not("site", PATCH_SITES),), CA, f"--site {{site!r}}: choose one of {', '.join(PATCH_SITES)}"),
    Row((Not("site", ATTRIBUTE_SITES),), GR, f"--site {{site!r}}: choose one of {', '.join(ATTRIBUTE_SITES)}"),
    Row((Outside("steps", 1, MAX_STEPS),), GR, f"--steps {{steps}}: give 1 (EAP) to {MAX_STEPS} points on the path"),
    Row((Outside("faithfulness", 0, 1, above=True),), GR,
        "--faithfulness {faithfulness}: a fraction above 0 and at most 1"),
    Row((Blank("text"),), CA + GR, 'the text is empty: give the text the model reads, e.g. "time flies like an"'),
    Row((Blank("corrupt"),), CA + GR, "the corrupted text is empty: give a text of as many tokens as the clean one"),
    # --backend torch: torch's autograd through transformers' modules gives the gradients at the sites; what needs
    # attn's NumPy tape (its per-reader input gradients, its patterns recomputed) stays there
    Row((Is("backend", ("torch",)), On("steps")), GR,  # attn circuit (its --steps is always set)
        "attn circuit scores each edge with the gradient at each reader's own input, which attn's NumPy tape "
        "gives: drop --backend torch (attn attribute --backend torch --no-qk-fix runs on torch)"),
    Row((Is("backend", ("torch",)), Is("site", ("key", "query"))), GR,
        "--site {site} recomputes a head's pattern on attn's NumPy tape: drop --backend torch, or choose --site "
        "resid, attn, mlp or head"),
    Row((Is("backend", ("torch",)), Off("no_qk_fix")), GR,
        "AtP*'s QK fix recomputes attention patterns on attn's NumPy tape: with --backend torch add --no-qk-fix "
        "(plain AtP, torch's autograd), or drop --backend torch"),
    Row((Off("transformer"), On("steps")), GR,  # attn circuit (its --steps is always set): decoders only
        "give the model with --transformer NAME (a hub id or a directory: GPT-2 or the Llama family)"),
    Row((Off("transformer"),), GR,
        "give the model with --transformer NAME (a hub id or a directory: GPT-2 or the Llama family, or BERT, "
        "RoBERTa, DistilBERT or MPNet with its masked-language-model head)"),
    Row((Off("transformer"),), QK, "give the model with --transformer NAME (a hub id or a directory)"),
    *(Row((Off("transformer"), c), CA, f"{flag(c.name)} places a --transformer model: without one, attn's built-in LM "
          "runs on its own pass") for c in (Not("backend", ("auto",)), *map(On, PLACEMENT))),
    # a dataset of prompt pairs (attncli.cli.pairs: --pairs FILE on attn ablate, patch, attribute and circuit)
    *(Row((On("pairs"), On(p)), PA, f"{flag(p)} is one text's option; with --pairs each pair brings its own texts "
          f"and target: drop {flag(p)}") for p in NOT_WITH_PAIRS),
    Row((On("pairs"), Not("mode", ("zero",))), PA,
        "--mode mean needs --reference, one text's option: --pairs ablates with --mode zero"),
    *(Row((Off("pairs"), On(p)), PA, f"{flag(p)} goes with --pairs FILE: drop it, or add --pairs") for p in ("out", "ray")),
    *(Row((Off("pairs"), Not(p, (default,))), PA, "--workers and --shard-pairs go with --pairs FILE: drop them, or add "
          "--pairs") for p, default in PAIRS_RUN.items()),
    # head statistics over a corpus (attncli.stats.stats_request: attn stats, attn stats merge)
    Row((On("explore"), On("json_out")), ST + M,
        "--explore opens the statistics in an interactive view; --json prints them: choose one"),
    Row((Not("precision", PRECISIONS),), ST, "--precision must be float32 or float64 (got {precision!r})"),
    Row((Off("transformer"),), ST, "attn stats needs --transformer NAME_OR_PATH (the model whose heads to measure)"),
    # the forward pass
    Row((Not("backend", BACKENDS),), T + E + CA + GR + ST, f"--backend {{backend!r}}: expected {_or(BACKENDS)}"),
    # attn compare (attncli.pipeline.compare_compute.CompareRequest)
    Row((On("align"), Not("align", ALIGNS)), C, "--align {align!r}: choose same or position"),
    Row((On("transformer_b"), Off("transformer")), C, "--transformer-b needs --transformer (model A)"),
    *(Row((On("transformer"), cond), C, f"{flag(cond.name)} belongs to the word-vector path, not --transformer")
      for cond in (On("variant_b"), On("causal_b"), On("causal"), Not("variant", ("scaled",)), On("model"))),
    Row((On("transformer"), Off("text_b"), Off("transformer_b")), C,
        "nothing to compare: give a second text, or a second model with --transformer-b"),
    *(Row((Off("transformer"), On(p)), C, f"{flag(p)} needs --transformer (the word-vector path is one layer of words)")
      for p in ("words", "layer", "head", "backend")),
    Row((Off("transformer"), Off("text_b"), Off("variant_b"), Off("causal_b")), C,
        "nothing to compare: give a second text, --variant-b NAME or --causal-b"),
    # attn heads (attncli.pipeline.heads_compute.HeadsRequest)
    Row((On("transformer"), On("model")), H,
        "--model names attn's own LM; with --transformer the pretrained model is scored: drop one"),
    Row((On("transformer"), Not("backend", BACKENDS)), H, f"--backend {{backend!r}}: expected {_or(BACKENDS)}"),
    Row((On("transformer"), On("stack"), Not("stack", STACKS)), H, f"--stack {{stack!r}}: choose one of {', '.join(STACKS)}"),
    *(Row((Off("transformer"), cond), H, f"{flag(cond.name)} needs --transformer NAME_OR_PATH (a pretrained model)")
      for cond in (On("exclude_first"), Not("backend", ("auto",)), On("allow_missing_weights"), On("stack"))),
    # attn heads --weights / --random (attncli.pipeline.head_roles)
    *(Row((On(p), Off("transformer")), H, f"{flag(p)} reads a pretrained model's heads: give --transformer NAME_OR_PATH")
      for p in ("weights", "random", "role", "threshold")),
    Row((On("weights"), On("random"), On("transformer")), H, "--weights reads the heads from their weights, --random from their attention "
                                          "on repeated random tokens: give one"),
    *(Row((On("weights"), On(p), On("transformer")), H, f"--weights reads no text: drop {flag(p)}")
      for p in ("file", "sentences", "exclude_first", "stack")),
    *(Row((On("random"), On(p), On("transformer")), H, f"--random scores the heads on repeated random tokens: drop {flag(p)}")
      for p in ("file", "exclude_first", "stack")),
    *(Row((On(p), Off("weights"), Off("random"), On("transformer")), H, f"{flag(p)} picks what the head map of --weights or --random shows")
      for p in ("role",)),
    Row((On("threshold"), Off("weights"), On("transformer")), H, "--threshold picks the composition edges of --weights: add --weights"),
    # attn lens (attncli.pipeline.lens_compute.LensRequest)
    Row((On("transformer"), On("model")), LENS,
        "--model names a word-vector model with a built-in LM; --transformer a pretrained one: give one of them"),
)


# --- the entries ----------------------------------------------------------------------------------


def refusal(options: Mapping[str, Any], *paths: str, given: Optional[Iterable[str]] = None) -> Optional[str]:
    """The message of the first row of ``paths`` that refuses ``options`` (None: they go together).
    ``given``: the names of the options typed on the command line, for the rows about typing one
    at all (a word-vector option with --transformer, a --transformer option without it)."""
    typed = set(given or ())
    for row in ROWS:
        if any(p in row.paths for p in paths) and row.holds(options, typed):
            return row.text(options)
    return None


def validate(options: Mapping[str, Any], *paths: str, given: Optional[Iterable[str]] = None) -> None:
    """BadInput (exit 2) with the first refusing row's message; nothing when the options go together."""
    message = refusal(options, *paths, given=given)
    if message is not None:
        raise BadInput(message)


class TableRequest:
    """A command's request that this table checks: mixed into a dataclass whose fields are the
    command's options by their parameter names, ``table_path`` its path (a key of :data:`PATHS`).
    The requests of attn ablate, patch, dla, attribute, circuit, qk, lens, compare and heads; one
    with refusals of its own besides the table's adds them in its ``check`` around ``super().check()``.

        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class Lens(TableRequest):
        ...     text: str
        ...     transformer: Optional[str] = None
        ...     model: Optional[str] = None
        ...     table_path: ClassVar[str] = "lens"
        >>> print(Lens("time flies", transformer="gpt2", model="brown").refusal())
        --model names a word-vector model with a built-in LM; --transformer a pretrained one: give one of them
        >>> Lens("time flies", transformer="gpt2").positionals()
        ['time flies']
    """

    table_path: ClassVar[str] = ""
    POSITIONALS: ClassVar[tuple[str, ...]] = ("text",)  # the fields the command takes as arguments, in order

    def check(self) -> None:
        """The refusals that need no model (BadInput, exit 2): the table's rows of ``table_path``."""
        validate(self._fields(), self.table_path)

    def refusal(self) -> Optional[str]:
        """The table's message that :meth:`check` would raise, or None (explore's keys say it)."""
        return refusal(self._fields(), self.table_path)

    def _fields(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def positionals(self) -> list[str]:
        return [getattr(self, name) for name in self.POSITIONALS]


# --- the docs' table -------------------------------------------------------------------------------

_PLACEHOLDERS = {"show": "SHOW", "stack": "STACK", "backend": "NAME", "layer": "L", "head": "H", "align": "HOW",
                 "mode": "MODE", "site": "SITE", "precision": "P", "steps": "N", "faithfulness": "F"}
BEGIN = "<!-- option conflicts: made by `python -m attncli.rules.option_conflicts --write`; do not edit by hand -->"
END = "<!-- end of option conflicts -->"


def markdown() -> str:
    """The docs' table: one line per row, in the order they are checked."""
    cell = lambda text: text.replace("|", "\\|")  # noqa: E731
    lines = ["| option | refused with | where | message |", "| --- | --- | --- | --- |"]
    for row in ROWS:
        first, *rest = row.when
        where = "; ".join(PATHS[p] for p in row.paths)
        against = ", ".join(f"`{c.text()}`" for c in rest) or "alone"
        lines.append(f"| `{first.text()}` | {cell(against)} | {where} | {cell(row.message.format_map(_PLACEHOLDERS))} |")
    return "\n".join(lines) + "\n"


def docs_block() -> str:
    return f"{BEGIN}\n\n{markdown()}\n{END}"


def rewrite(text: str) -> str:
    """``text`` (docs/pretrained.md) with the table between BEGIN and END made anew."""
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise BadInput(f"the docs page has no {BEGIN!r} ... {END!r} block")
    return head + docs_block() + tail


def main(argv: list[str]) -> int:
    from pathlib import Path
    if argv == ["--markdown"]:
        sys.stdout.write(markdown())
        return 0
    if argv == ["--write"]:
        page = Path(__file__).resolve().parents[2] / "docs" / "pretrained.md"  # this file: attncli/rules/
        atomic_write(page, rewrite(read_text(page, 1 << 20)))
        print(f"wrote {page}", file=sys.stderr)
        return 0
    print("usage: python -m attncli.rules.option_conflicts --markdown | --write", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
