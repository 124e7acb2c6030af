"""Two views of ``attn explore --transformer`` that replace the heatmap of one input's attention:
the logit lens of a decoder (key L: ``attn lens --transformer``'s request, compute and result,
attncli.pipeline.lens_compute) and the comparison of the sentence with a second text (key C:
``attn compare --transformer``'s, attncli.pipeline.compare_compute). The app builds the command's
request from its state (ExploreState.lens_request, compare_request) and runs the command's compute
on the model it has loaded; the result is the command's, drawn, exported and copied through the
result protocol (attncli.views.result). What is here: the refusals that name the app's keys, and
the line under each view saying which key returns.
"""

from __future__ import annotations

from attncli.model.interface import has
from attncli.errors import BadInput
from attncli.hf.families.registry import DECODER_FAMILIES
from attncli.pipeline.compare_compute import CompareResult
from attncli.pipeline.compare_compute import compute as compute_comparison
from attncli.pipeline.lens_compute import LensResult
from attncli.pipeline.lens_compute import compute as compute_lens_result


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
    return compute_lens_result(state.lens_request(), model)


def lens_refusal(model) -> str:
    return (f"the logit lens reads a decoder's next-token predictions: '{model.name}' ({model.model_type}) is an "
            f"encoder; start attn explore with a decoder attn runs in NumPy: {DECODER_FAMILIES}")


def compute_compare(model, state) -> CompareResult:
    """``attn compare TEXT TEXT_B --transformer NAME [--layer/--head/--words] --align position`` on
    the loaded ``model``: the view's options that the comparison does not carry are refused."""
    for on, option in ((state.pair is not None, "the --pair sentence (k, then an empty line)"),
                       (state.filter, "--filter"), (state.rollout, "--rollout"), (state.flow, "--flow"),
                       (state.norms, "--show norms (N)"), (state.scores, "--show scores (s)"),
                       (state.contribution, f"--show {state.contribution} (s)"), (state.hide_special, "--hide-special (z)")):
        if on:
            raise BadInput(f"compare draws one layer's weights of two texts (attn compare): drop {option}")
    if not state.compare_text.strip():
        raise BadInput("the second text is empty: C, then type a sentence to compare with")
    return compute_comparison(state.compare_request(), model)


def panel_notes(res) -> list[str]:
    """The lines under a view that replaces the heatmap: what it shows and the key that returns
    (the causal views say their own)."""
    if isinstance(res, LensResult):
        return ["logit lens (nostalgebraist 2020): each cell is the top next token the final norm and the "
                "unembedding make of the residual stream after that layer (L0: the embeddings), and its "
                "probability; the last column is the model's own prediction. L returns to the attention."]
    if isinstance(res, CompareResult):
        c = res.comparison
        return [f"compare (attn compare): A is the sentence, B the second text, at the same layer and head; "
                f"delta = B - A, largest |delta| {abs(c.delta).max() if c.delta.size else 0.0:.3f}"
                + ("; the texts differ in length: the first rows and columns of each (--align position)"
                   if c.cropped else "") + ". [ ] { } and u change the layer, the head and --words of both; "
                "C returns to the attention."]
    return list(res.notes())
