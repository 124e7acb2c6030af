"""What ``attn explore`` shows, as plain data: the settings, the request they make, the
equivalent ``attn matrix`` command line, and the exports. No Textual here, so it is tested and
reused (the command line, the benchmark) without a terminal.

The settings are exactly ``attn matrix``'s options; :meth:`ExploreState.request` builds the
same :class:`~attncli.attention.matrix.MatrixRequest` the command builds, so the app's numbers are
the command's numbers.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from attncli.attention.document import write_json
from attncli.attention.explain import explain
from attncli.attention.masks import MaskSpec
from attncli.attention.matrix import DEFAULT_POSITIONS, POSITIONS, MatrixRequest
from attncli.attention.projection import PROJECTIONS
from attncli.attention.variants import VARIANTS
from attncli.errors import BadInput
from attncli.explore import checkpoint_state
from attncli.explore.drawing import CAUSAL_VIEWS, WORD_VECTORS, export_drawing, view_kind
from attncli.io.export_target import DESCRIPTOR, check_export, write_export
from attncli.rules.option_conflicts import BACKENDS, CONTRIBUTIONS, TRANSFORMER_SHOWS, validate
from attncli.pipeline.compare_compute import CompareRequest
from attncli.pipeline.lens_compute import LensRequest
from attncli.pipeline.view_request import ViewRequest
from attncli.views.explanation import explanation_renderables
from attncli.views.render import matrix_renderables

SHOWS = ("weights", "scores", "output")
FILTERS = ("all", "a-a", "a-b", "b-a", "b-b")  # --filter: "all" is no filter
EXPORT_FORMATS = (".svg", ".html", ".json", ".png")
DEFAULT_EXPORT = "attn-explore.svg"


def variants() -> list[str]:
    return list(VARIANTS)


def projections() -> list[str]:
    return list(PROJECTIONS)


def _cycle(options: list[str] | tuple[str, ...], current: str, step: int) -> str:
    i = options.index(current) if current in options else -1
    return options[(i + step) % len(options)]


@dataclass(frozen=True)
class ExploreState:
    """The app's settings; every change makes a new state (``replace``)."""

    text: str = "time flies like an arrow"
    context: str | None = None
    variant: str = "scaled"
    causal: bool = False
    window: int | None = None
    pad_to: int | None = None
    positions: str = DEFAULT_POSITIONS
    projection: str = "identity"
    d_k: int | None = None
    seed: int = 0
    heads: int | None = None
    max_relative: int = 4
    layer: int | None = None
    head: int | None = None
    model: str | None = None
    show: str = "weights"
    cursor: tuple[int, int] = (0, 0)
    dict_path: str | None = None
    # a pretrained model's attention instead (attn matrix --transformer): its own options
    transformer: str | None = None
    pair: str | None = None
    filter: str | None = None  # --filter: one block of the pair (a-a, a-b, b-a, b-b, all)
    words: bool = False
    hide_special: bool = False
    rollout: bool = False
    backend: str = "auto"
    truncate: bool = False
    allow_missing_weights: bool = False  # --allow-missing-weights: a checkpoint's missing / unused weights warned about
    model_view: bool = False  # --model-view: every layer x head of the input (layers: --layers A-B)
    rows: str | None = None  # --rows SPEC, --top-k K, --pool SPAN: a long text's views (attncli.attention.long_view)
    top_k: int | None = None
    pool: str | None = None
    layers: str | None = None
    norms: bool = False  # --show norms: ||alpha f(x)|| instead of the weights
    scores: bool = False  # --show scores: q.k x scale before the softmax (never with norms)
    contribution: str | None = None  # --show alti | globenc | value-zeroing (never with norms or scores)
    flow: bool = False  # --flow: the attention flow through layers 0..layer (attncli.attention.flow)
    lens: bool = False  # the logit lens of a decoder (attn lens) instead of the attention
    compare_text: str | None = None  # attn compare: this second text's matrix beside the sentence's, and B - A
    causal_view: str | None = None  # "ablate" (G), "dla" (D), "patch" (R), "attribute" (E): that command's view
    corrupt: str | None = None  # --corrupt: the corrupted text of attn patch (R) and attn attribute (E)
    grid: tuple[int, int] | None = None  # the model view's cursor (layer, head); None: the first head shown
    view_options: tuple[tuple[str, Any], ...] = ()  # the view's switches explore has no key for (name, value)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    # ------------------------------------------------------------------ the request

    def request(self) -> MatrixRequest:
        """The MatrixRequest of ``attn matrix`` with these options (its checks included)."""
        if self.show not in SHOWS:
            raise BadInput(f"unknown --show {self.show!r}: choose one of {', '.join(SHOWS)}")
        options = {name: value for name, value in (("layer", self.layer), ("head", self.head)) if value is not None}
        validate({**options, "proj": self.projection}, "vectors")
        return MatrixRequest(
            text=self.text, context=self.context, variant=self.variant,
            mask=MaskSpec(causal=self.causal, window=self.window, pad_to=self.pad_to),
            positions=self.positions, projection=self.projection, d_k=self.d_k, seed=self.seed,
            heads=self.heads, max_relative=self.max_relative, model=self.model, projection_options=options,
        )

    def lens_request(self) -> LensRequest:
        """``attn lens``'s request of the sentence (key L)."""
        return LensRequest(self.text, transformer=self.transformer)

    def compare_request(self) -> CompareRequest:
        """``attn compare``'s request of the sentence and the second text (key C), at the view's
        layer and head, the first rows and columns of each."""
        return CompareRequest(self.text, self.compare_text, transformer=self.transformer, layer=self.layer,
                              head=self.head, words=self.words, backend=None if self.backend == "auto" else self.backend,
                              align="position")

    # ------------------------------------------------------------------ changes (keys)

    def next_variant(self, step: int = 1) -> ExploreState:
        return replace(self, variant=_cycle(variants(), self.variant, step))

    def next_projection(self, step: int = 1) -> ExploreState:
        proj = _cycle(projections(), self.projection, step)
        keep = proj == "trained"
        return replace(self, projection=proj, d_k=self.d_k if proj == "random" else None,
                       layer=self.layer if keep else None, head=self.head if keep else None)

    def next_show(self, step: int = 1) -> ExploreState:
        return replace(self, show=_cycle(SHOWS, self.show, step))

    def toggle_positions(self) -> ExploreState:
        return replace(self, positions=_cycle(POSITIONS, self.positions, 1))

    def toggle_causal(self) -> ExploreState:
        return replace(self, causal=not self.causal)

    def step_window(self, step: int) -> ExploreState:
        """None -> 1 -> 2 ...; going below 1 removes the window."""
        n = (self.window or 0) + step
        return replace(self, window=n if n >= 1 else None)

    def step_pad_to(self, step: int, n_keys: int) -> ExploreState:
        """None -> the real key count + 1 -> + 2 ...; going down to the key count removes padding."""
        n = (self.pad_to if self.pad_to is not None else n_keys) + step
        return replace(self, pad_to=n if n > n_keys else None)

    def move_cursor(self, di: int, dj: int, shape: tuple[int, int]) -> ExploreState:
        rows, cols = shape
        i = min(max(self.cursor[0] + di, 0), max(rows - 1, 0))
        j = min(max(self.cursor[1] + dj, 0), max(cols - 1, 0))
        return replace(self, cursor=(i, j))

    # ------------------------------------------------------------------ what it says

    def step_layer(self, step: int, layers: int) -> ExploreState:
        """--layer of the transformer: None is the last layer; stays within 0..layers-1."""
        current = layers - 1 if self.layer is None else self.layer
        return replace(self, layer=min(max(current + step, 0), layers - 1))

    def step_head(self, step: int, heads: int) -> ExploreState:
        """--head of the transformer: None (every head and their mean) -> 0 -> ... -> heads-1 -> None."""
        order = [None, *range(heads)]
        i = order.index(self.head) if self.head in order else 0
        return replace(self, head=order[(i + step) % len(order)])

    def next_filter(self, step: int = 1) -> ExploreState:
        """--filter: no filter (all) -> a-a -> a-b -> b-a -> b-b -> all."""
        block = _cycle(FILTERS, self.filter or "all", step)
        return replace(self, filter=None if block == "all" else block)

    def next_backend(self, step: int = 1) -> ExploreState:
        return replace(self, backend=_cycle(BACKENDS, self.backend, step))

    def toggle(self, name: str) -> ExploreState:
        on = not getattr(self, name)
        return replace(self, **{name: on}, **({"scores": False, "contribution": None} if name == "norms" and on else {}))

    def enter_model_view(self, layer: int) -> ExploreState:
        """The model view, its cursor on this view's layer and head (head 0 for all heads); it
        replaces the logit lens or a comparison."""
        return replace(self, model_view=True, grid=(layer, self.head or 0), layer=None, head=None, lens=False,
                       compare_text=None, causal_view=None)

    def open_head(self, grid: tuple[int, int]) -> ExploreState:
        """The ordinary view of the model view's head ``grid`` (layer, head); --layers stays for M."""
        return replace(self, model_view=False, grid=None, layer=grid[0], head=grid[1])

    def view_request(self) -> ViewRequest:
        """The ViewRequest of ``attn matrix --transformer`` with these options (explore's cursor
        may explain any cell: ``cursor``)."""
        return ViewRequest(self.text, transformer=self.transformer, pair=self.pair, layer=self.layer, head=self.head,
                           filter=self.filter, words=self.words, hide_special=self.hide_special,
                           rollout=self.rollout, backend=self.backend, truncate=self.truncate,
                           model_view=self.model_view, layers=self.layers if self.model_view else None,
                           allow_missing_weights=self.allow_missing_weights, show=self.transformer_show(),
                           flow=self.flow, rows=self.rows, top_k=self.top_k, pool=self.pool, cursor=True,
                           **dict(self.view_options))

    def transformer_show(self) -> str:
        return self.contribution or ("norms" if self.norms else "scores" if self.scores else "weights")

    def next_transformer_show(self, step: int = 1) -> ExploreState:
        """s / S with --transformer: weights -> scores -> norms -> alti -> globenc -> value-zeroing
        (--show); a contribution method is the whole layer's, so the head picked is dropped."""
        show = _cycle(TRANSFORMER_SHOWS, self.transformer_show(), step)
        contribution = show if show in CONTRIBUTIONS else None
        return replace(self, scores=show == "scores", norms=show == "norms", contribution=contribution,
                       head=None if contribution else self.head)

    def transformer_options(self, explain: bool, cell: tuple[int, int] | None = None) -> list[str]:
        return self.view_request().options((cell or self.cursor) if explain else None)

    def options(self, explain: bool = True, cell: tuple[int, int] | None = None) -> list[str]:
        """The sentence and the options of ``attn matrix`` that differ from its defaults (with
        ``--explain`` of the cursor's cell when ``explain``; ``cell``: the input positions of that
        cell where they differ from the cursor's, in a transformer's view with --filter)."""
        if self.transformer is not None:
            return self.transformer_options(explain, cell)
        args = [self.text]
        if self.context is not None:
            args += ["--context", self.context]
        if self.variant != "scaled":
            args += ["--variant", self.variant]
        if self.causal:
            args.append("--causal")
        for option, value, default in (("--window", self.window, None), ("--pad-to", self.pad_to, None),
                                       ("--positions", self.positions, DEFAULT_POSITIONS),
                                       ("--proj", self.projection, "identity"), ("--d-k", self.d_k, None),
                                       ("--seed", self.seed, 0), ("--layer", self.layer, None),
                                       ("--head", self.head, None), ("--heads", self.heads, None),
                                       ("--max-relative", self.max_relative, 4), ("--show", self.show, "weights"),
                                       ("--model", self.model, None)):
            if value != default:
                args += [option, str(value)]
        return args + (["--explain", str(self.cursor[0]), str(self.cursor[1])] if explain else [])

    def command_line(self, explain: bool = True, cell: tuple[int, int] | None = None) -> str:
        """The ``attn matrix`` command that prints this view (and --explain of the cursor's cell,
        or of ``cell``: see :meth:`options`); the ``attn lens`` or ``attn compare`` command of those views.

        >>> ExploreState("time flies", causal=True, window=2).command_line()
        "attn matrix 'time flies' --causal --window 2 --explain 0 0"
        >>> ExploreState("time flies", transformer="gpt2", compare_text="fruit flies", layer=1).command_line()
        "attn compare 'time flies' 'fruit flies' --transformer gpt2 --layer 1 --align position"
        """
        if self.transformer is not None and self.lens:
            return self.lens_request().command_line()
        if self.causal_view is not None:  # the target is the result's; without --transformer, the built-in LM
            transformer = [] if self.transformer is None else ["--transformer", self.transformer]
            corrupt = [self.corrupt or ""] if self.causal_view in ("patch", "attribute") else []
            return shlex.join(["attn", self.causal_view, self.text, *corrupt, *transformer])
        if self.transformer is not None and self.compare_text is not None:
            return self.compare_request().command_line()
        return shlex.join(["attn", "matrix", *self.options(explain, cell)])

    def explore_args(self) -> list[str]:
        """The arguments of ``attn explore`` that start the app in this state."""
        return (self.options() + (["--dict", self.dict_path] if self.dict_path is not None else [])
                + (["--corrupt", self.corrupt] if self.corrupt is not None else []))

    def summary(self) -> str:
        """One line of the current settings (the app's status bar)."""
        if self.transformer is not None and self.model_view:
            parts = [f"transformer {Path(self.transformer).name or self.transformer}",
                     f"model view, layers {self.layers or 'all'}"]
            parts += [name for name, flag in (("pair", self.pair is not None), ("hide special", self.hide_special),
                                              (f"backend {self.backend}", self.backend != "auto"),
                                              ("truncate", self.truncate)) if flag]
            return " · ".join(parts + ([f"layer {self.grid[0]} head {self.grid[1]}"] if self.grid else []))
        if self.transformer is not None and self.lens:
            return f"transformer {Path(self.transformer).name or self.transformer} · logit lens (L returns)"
        if self.causal_view is not None:
            key, what = CAUSAL_VIEWS[self.causal_view]
            model = (f"transformer {Path(self.transformer).name or self.transformer}" if self.transformer is not None
                     else f"built-in LM of {self.model or 'the default model'}")
            return f"{model} · {what} ({key} returns)"
        if self.transformer is not None and self.compare_text is not None:
            which = "all heads" if self.head is None else f"head {self.head}"
            return " · ".join([f"transformer {Path(self.transformer).name or self.transformer}", f"compare with {self.compare_text!r}",
                               f"layer {'last' if self.layer is None else self.layer}", which, "C returns"])
        if self.transformer is not None:
            which = ("flow" if self.flow else "rollout" if self.rollout else "the whole layer" if self.contribution
                     else "all heads" if self.head is None else f"head {self.head}")
            parts = [f"transformer {Path(self.transformer).name or self.transformer}",
                     f"layer {'last' if self.layer is None else self.layer}", which]
            parts += [name for name, flag in (("pair", self.pair is not None), (f"filter {self.filter}", self.filter),
                                              ("words", self.words), ("hide special", self.hide_special),
                                              ("show scores", self.scores), (f"show {self.contribution}", self.contribution),
                                              (f"backend {self.backend}", self.backend != "auto"),
                                              ("truncate", self.truncate)) if flag]
            return " · ".join(parts + [f"cell {self.cursor[0]},{self.cursor[1]}"])
        mask = MaskSpec(causal=self.causal, window=self.window, pad_to=self.pad_to).describe()
        parts = [f"variant {self.variant}", f"mask {mask}", f"proj {self.projection}", f"pos {self.positions}",
                 f"show {self.show}", f"cell {self.cursor[0]},{self.cursor[1]}"]
        if self.context is not None:
            parts.insert(0, "cross")
        return " · ".join(parts)


# ---------------------------------------------------------------------- exports


def export_path(given: str, cwd: Path | None = None) -> Path:
    """The file an export goes to: ``given`` (relative to ``cwd``); its suffix picks the format.
    Checked by the export door (attncli.io.export_target); not stdout or stderr: the app draws there."""
    given = given.strip()
    if not given:
        raise BadInput("give a file name for the export, e.g. attn-explore.svg (or .html, .png, .json)")
    path = Path(os.path.expanduser(given))
    if not path.is_absolute():
        path = (cwd or Path.cwd()) / path
    if path.is_dir():
        raise BadInput(f"{given!r} is a directory: give a file name, e.g. {path / DEFAULT_EXPORT}")
    if path.suffix.lower() not in EXPORT_FORMATS:
        raise BadInput(f"{given!r}: the export's name must end in {', '.join(EXPORT_FORMATS)} (it picks the format)")
    target = check_export(path, binary=path.suffix.lower() == ".png")
    if target.kind == DESCRIPTOR:
        raise BadInput(f"{given!r} is one of the app's own streams (it draws on the terminal): export to a file")
    return path


def export_text(res, state: ExploreState, fmt: str, width: int | None = None,
                split: checkpoint_state.Split | None = None) -> str | bytes:
    """The current view as ``fmt`` (.svg, .html, .png, .json): the JSON is ``attn matrix --json
    --explain I J``'s document; SVG and HTML are the heatmap and the explanation as drawn.
    ``split``: a transformer's QK split on screen (key Q), which the export then holds too."""
    if view_kind(res) != WORD_VECTORS:
        return checkpoint_state.export_text(res, state, fmt, width, split)
    explanation = explain(res, *state.cursor)
    if fmt == ".json":
        parts: list[str] = []
        write_json(res, parts.append, explanation)
        return "".join(parts)
    return export_drawing(lambda w: [*matrix_renderables(res, w, state.show), *explanation_renderables(explanation)],
                          state.command_line(), " ".join(res.tokens), fmt, width)


def export(res, state: ExploreState, given: str, cwd: Path | None = None, width: int | None = None,
           split: checkpoint_state.Split | None = None) -> Path:
    """Write the current view to ``given`` (format from its suffix), atomically; the path written.
    ``width`` None: laid out for the file (as wide as the view needs), not for the app's window."""
    path = export_path(given, cwd)
    write_export(path, export_text(res, state, path.suffix.lower(), width, split), binary=path.suffix.lower() == ".png")
    return path
