"""Two views of ``attn explore --transformer`` that replace the heatmap of one input's attention:
the logit lens of a decoder (key L: what ``attn lens --transformer`` draws) and the comparison of
the sentence with a second text (key C: what ``attn compare --transformer`` draws, A, B and
B - A). Each is computed in the app's worker from the model already loaded, as plain data with
its drawing, its export and its command line. Shapes: ``L`` layers, ``T`` positions, ``k`` tokens
kept per cell, ``R`` x ``C`` a compared matrix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from attncli.attention import checkpoint_views as pv
from attncli.attention.compare import compare, document, transformer_side
from attncli.attention.logit_lens import logit_lens
from attncli.errors import BadInput
from attncli.explore.drawing import Panel, export_drawing
from attncli.hf.numpy_backend import DECODER_FAMILIES
from attncli.model.interface import has
from attncli.views.compare_view import compare_heatmaps
from attncli.views.lens import lens_renderables
from attncli.views.render import heatmap_renderables

LENS_TOP_K = 1  # attn lens's default --top-k


@dataclass
class LensResult(Panel):
    """The logit lens of the sentence: ``doc`` is ``attn lens --transformer ... --json``'s document."""

    model: Any
    enc: Any
    doc: dict[str, Any]

    def renderables(self, width: int | None, lines: bool = True) -> list:
        return lens_renderables(self.doc, width)

    def notes(self) -> list[str]:
        return ["logit lens (nostalgebraist 2020): each cell is the top next token the final norm and the "
                "unembedding make of the residual stream after that layer (L0: the embeddings), and its "
                "probability; the last column is the model's own prediction. L returns to the attention."]

    def document(self) -> dict[str, Any]:
        return self.doc


@dataclass
class CompareResult(Panel):
    """The sentence (A) and the second text (B) at the view's layer and head, and B - A."""

    model: Any
    comparison: Any  # attncli.attention.compare.Comparison
    meta_a: dict[str, Any]
    meta_b: dict[str, Any]
    unit: str

    def renderables(self, width: int | None, lines: bool = True) -> list:
        """A, B and delta as heatmaps at ``width`` columns (None: as wide as they need, for a file)."""
        return [part for hm in compare_heatmaps(self.comparison, self.meta_a, self.meta_b)
                for part in heatmap_renderables(hm, width, lines=lines)]

    def notes(self) -> list[str]:
        c = self.comparison
        return [f"compare (attn compare): A is the sentence, B the second text, at the same layer and head; "
                f"delta = B - A, largest |delta| {abs(c.delta).max() if c.delta.size else 0.0:.3f}"
                + ("; the texts differ in length: the first rows and columns of each (--align position)"
                   if c.cropped else "") + ". [ ] { } and u change the layer, the head and --words of both; "
                "C returns to the attention."]

    def document(self) -> dict[str, Any]:
        return document(self.comparison, self.meta_a, self.meta_b, self.unit)


def token_label(piece: str) -> str:
    """A token's text for a label, as attn lens writes it (attncli.generate.hf_decoder.shown, which
    this wing may not import): invisible characters escaped, its leading space dropped."""
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in piece)
    return text.strip(" ") or ("␣" * len(text) if text else "∅")


def piece(model, i: int) -> str:
    """Token ``i``'s text; a byte-level piece of a multi-byte character (U+FFFD alone) keeps its raw
    piece, e.g. 'âĢ', so it stays distinguishable (as attn lens writes it)."""
    text = model.decode([int(i)])
    return model.token_strings([int(i)])[0] if "\ufffd" in text else text


def compute_lens(model, state) -> LensResult:
    """``attn lens TEXT --transformer NAME`` on the loaded ``model``: refused for an encoder, a
    pair, and a model not on attn's NumPy pass (the lens reads its residual stream)."""
    if not model.is_decoder:
        raise BadInput(lens_refusal(model))
    if state.pair is not None:
        raise BadInput("the logit lens reads one text: remove the --pair sentence (k, then an empty line)")
    if not has(model, "lens"):
        raise BadInput(f"the logit lens reads attn's own NumPy forward pass, which runs {DECODER_FAMILIES}; "
                       f"'{model.name}' runs on the {model.backend} backend (b switches it)")
    enc = model.encode(state.text, truncate=state.truncate)
    ids = [int(i) for i in enc.ids]
    lens = logit_lens(model.residual_stream(ids), model.lens_logits, LENS_TOP_K)  # (L + 1, T, k)
    label = lambda i: token_label(piece(model, i))  # noqa: E731
    cells = [[[{"token": label(i), "id": int(i), "prob": round(float(p), 6)}
               for i, p in zip(lens.top_ids[l, t], lens.top_probs[l, t])] for t in range(len(ids))]
             for l in range(lens.top_ids.shape[0])]
    doc = {"model": model.name, "kind": "pretrained", "tokens": [label(i) for i in ids],
           "layers": lens.top_ids.shape[0] - 1, "top_k": LENS_TOP_K,
           "rows": "lens[l][t]: after l layers (0 = the embeddings) at position t, the top_k next tokens, best first",
           "lens": cells, "follow": None}
    return LensResult(model, enc, doc)


def lens_refusal(model) -> str:
    return (f"the logit lens reads a decoder's next-token predictions: '{model.name}' ({model.model_type}) is an "
            f"encoder; start attn explore with a decoder attn runs in NumPy: {DECODER_FAMILIES}")


def compute_compare(model, state) -> CompareResult:
    """``attn compare TEXT TEXT_B --transformer NAME [--layer/--head/--words] --align position`` on
    the loaded ``model``: the view's options that the comparison does not carry are refused."""
    for on, option in ((state.pair is not None, "the --pair sentence (k, then an empty line)"),
                       (state.pair_filter, "--filter"), (state.rollout, "--rollout"), (state.flow, "--flow"),
                       (state.norms, "--show norms (N)"), (state.scores, "--show scores (s)"), (state.hide_special, "--hide-special (z)")):
        if on:
            raise BadInput(f"compare draws one layer's weights of two texts (attn compare): drop {option}")
    if not state.compare_text.strip():
        raise BadInput("the second text is empty: C, then type a sentence to compare with")
    layer = pv.layer_shown(model, state.layer, state.head)
    (ma, ta, ka, meta_a), (mb, tb, kb, meta_b) = [transformer_side(model, text, layer, state.head, state.words)
                                                  for text in (state.text, state.compare_text)]
    unit = "words" if state.words else "tokens"
    return CompareResult(model, compare(ma, mb, ta, tb, ka, kb, align="position", unit=unit), meta_a, meta_b, unit)


def export_panel(res, state, fmt: str, width: int | None = None) -> str | bytes:
    """The lens or the comparison as .json (the command's --json document), .svg, .html or .png
    (the drawing and the command line)."""
    if fmt == ".json":
        return json.dumps(res.document(), ensure_ascii=False, allow_nan=False, indent=2) + "\n"
    command = getattr(res, "command", None) or state.command_line()
    return export_drawing(lambda w: res.renderables(w, lines=False), command, state.text, fmt, width)
