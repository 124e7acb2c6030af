"""The written model interface: what every model attn runs does, and what it can do, as data.

Every model implements ``Model``: the NumPy families (``hf.backends.numpy_backend``), the torch backend
(``hf.backends.torch_backend``), the encoder-decoders (``hf.backends.seq2seq``) and the built-in LM (``tinylm``).
What a model can do is the set ``model.can`` of names from ``CAPABILITIES``; a command asks
``require(model, "dla", "direct logit attribution")`` and gets the one refusal every command and
explore key shows, built from the capability's meaning and the model's own ``why_not``. No caller
probes a model with ``hasattr`` or reaches a private name.

Shapes: T tokens, d the model dimension, h query heads, d_head a head's dimension, V the
vocabulary, B a batch.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol, Sequence, runtime_checkable

import numpy as np

from attncli.errors import BadInput
from attncli.model.trace import Intervention, Keep, Trace
from attncli.io.textio import visible

# capability -> what it is, as a refusal names it ("... needs <this>")
CAPABILITIES: dict[str, str] = {
    "trace": "a traced forward pass (named sites, kept rows and heads, interventions)",
    "resume": "a trace that starts at a layer from a given residual stream",
    "batch": "a traced pass over a padded batch of texts (trace_batch)",
    "rerun": "a batch of resumed passes, each with its own interventions (rerun)",
    "unembed": "the unembedding of final-norm rows into logits",
    "dla": "a pre-norm decoder's unembedding and final norm's parts (direct paths to a logit)",
    "output_weight": "each layer's attention output weight W_O",
    "qk": "attention scores that are q k^T alone (no relative position bias)",
    "pairs": "a sentence pair read as one input",
    "mlm": "a masked-language-model head",
    "next_token": "next-token logits (a decoder, or an encoder's masked-language-model head)",
    "lens": "the residual stream and what the final norm and unembedding make of it",
    "cache": "next-token logits with a key/value cache (generation)",
    "stacks": "the encoder, decoder and cross stacks of an encoder-decoder",
    "grad": "gradients of a metric at the kept sites",
    "contributions": "each layer's values, residual and norms as attn's NumPy pass holds them (ALTI, GlobEnc, "
                     "value zeroing)",
    "tape": "a forward pass that records what its backward reads, and the backward (attn's NumPy pass)",
    "progress": "a pass that reports each layer as it is done (trace's on_layer)",
    "explain": "a cell's score and softmax step by step from a layer's q and k (attn's NumPy pass)",
    "precision": "a pass in float32 or float64 as asked (attn stats --precision: attn's NumPy pass)",
    "weights": "each layer's weights by role, read from the checkpoint (attn heads --weights: attn's NumPy pass)",
}
Tape = Any  # "tape": what Model.tape returns (hf/methods/backward.py's DecoderTape or hf/methods/backward_encoder.py's
#   EncoderTape: forward, backward, each layer's parts; forward_all and backward_all run a list of tapes)


@runtime_checkable
class Model(Protocol):
    """What every model attn runs provides. Methods behind a capability raise BadInput through
    ``require`` when the model lacks it."""

    name: str  # as the user gave it
    model_type: str  # the family ("bert", "llama", "builtin", ...), for messages
    backend: str  # "numpy", "torch" or "builtin"
    layers: int  # L
    heads: int  # h, query heads
    kv_heads: int  # key-value heads (fewer than h under grouped-query attention)
    is_decoder: bool  # causal self-attention: predicts the next token
    vocab_size: int  # V
    special_ids: frozenset[int]  # the ids of the beginning, end and padding tokens the model names
    can: frozenset[str]  # names from CAPABILITIES

    def why_not(self, capability: str) -> str:
        """Why this model lacks ``capability``, in words that end a sentence about the model
        ("is an encoder-decoder, which neither backend traces"); "" when it has it."""

    def encode(self, text: str, pair: str | None = None, *, truncate: bool = False, special: bool = True) -> Any:
        """One input (an ``hf.text.encoding.Encoding``-shaped object: ids, tokens, special, words, ...)."""

    def pieces(self, text: str) -> list[int]:
        """The token ids of ``text`` with no special tokens added."""

    def vocab_id(self, word: str) -> int | None:
        """The id of the vocabulary entry spelled ``word`` exactly, None when there is none."""

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        """Each id as the vocabulary spells it."""

    def token_texts(self, ids: Sequence[int]) -> list[str]:
        """Each id's text, what the views draw: " an" for "Ġan" (the tokenizer's decoder,
        attncli.hf.text.token_text); a word-level model's words are their own text."""

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids."""

    def trace(self, enc: Any, keep: Keep | Iterable[str] | str | None = None, *,
              rows: Sequence[int] | None = None, interventions: Sequence[Intervention] = (),
              start: tuple[int, np.ndarray] | None = None,
              on_layer: Callable[[int, int], None] | None = None) -> Trace:
        """"trace": one forward pass holding the kept sites (model/trace.py); ``start``: "resume"."""

    def trace_batch(self, encs: Sequence[Any], keep: Keep | Iterable[str] | str | None = None, *,
                    precision: str = "float64", on_layer: Callable[[int, int], None] | None = None) -> list[Trace]:
        """"batch": ``trace`` of each input from one padded pass."""

    def rerun(self, ids: Sequence[int], layer: int, resid: np.ndarray,
              per_batch: Sequence[Sequence[Intervention]], position: int) -> np.ndarray:
        """"rerun": (B, d) the final norm's output at ``position`` of B passes of ``ids`` from
        ``layer`` on, each starting from ``resid`` (T, d) with its own interventions
        ``per_batch[b]`` (one row each: a grid of T positions would otherwise hold B T d floats)."""

    def float32_pass(self) -> "Model":
        """"rerun": this model with its pass in float32 (itself when it is already), the causal grids'."""

    def unembed(self, x: np.ndarray) -> np.ndarray:
        """"unembed": (..., d) final-norm outputs -> (..., V) logits."""

    def unembedding(self) -> np.ndarray:
        """"dla": (V, d) the unembedding matrix."""

    def unembedding_bias(self) -> np.ndarray | None:
        """"dla": (V,) the unembedding's bias (the built-in LM's output head has one), None without one."""

    def final_norm_parts(self) -> tuple[str, np.ndarray, np.ndarray | None, float]:
        """"dla": the final norm as (kind "layer" | "rms", weight (d,), bias (d,) or None, eps)."""

    def output_weight(self, layer: int) -> np.ndarray:
        """"output_weight": (h d_head, d) layer ``layer``'s W_O, rows in head order."""

    def output_norm_parts(self, layer: int) -> tuple[str, np.ndarray, np.ndarray | None, float, Any] | None:
        """"dla": the norm on layer ``layer``'s attention output before its residual add as (kind,
        weight (d,), bias (d,) or None, eps, b_O (d,) or None: the output projection's bias, inside
        the norm); None where the heads add to the stream as they are (every family but Gemma 3)."""

    def site_gradients(self, ids: Sequence[int], position: int,
                       d_metric: Callable[[np.ndarray], np.ndarray] | None = None
                       ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
        """"grad": one pass of token ids ``ids``: (each site's value by name, d metric / d each site
        (empty when ``d_metric`` is None: no backward), the logits (V,) at ``position``), float64.
        ``d_metric(logits (V,)) -> (V,)``. The sites: embed, blocks.l.resid_pre (T, d), blocks.l.attn.z
        (T, h, d_head), blocks.l.attn.out and blocks.l.mlp.out (T, d); a torch model whose family's
        modules attn does not name holds the stream's sites only (hf/backends/torch_grad.py)."""

    def tape(self, dtype: Any = np.float64, weights: list[dict[str, Any]] | None = None,
             unembedding: Any = None) -> Tape:
        """"tape": a recorder of this model's forward pass in ``dtype`` and its backward (attribution
        patching, edge attribution patching); ``weights``: another tape's per-layer weights of the same
        model and dtype, reused (not read and widened again), and its ``unembedding``, likewise."""


def has(model: Any, capability: str) -> bool:
    """Whether ``model`` has ``capability`` (a name from CAPABILITIES)."""
    if capability not in CAPABILITIES:
        raise KeyError(f"no capability '{capability}': the capabilities are {', '.join(CAPABILITIES)}")
    return capability in model.can


def refusal(model: Any, capability: str, doing: str) -> str:
    """The one sentence that refuses ``doing`` on ``model`` for want of ``capability``."""
    why = model.why_not(capability) or "lacks it"
    return (f"{doing} needs {CAPABILITIES[capability]}: model '{visible(str(model.name))}' "
            f"({visible(str(model.model_type))}, {model.backend} backend) {why}")


def require(model: Any, capability: str, doing: str) -> None:
    """BadInput with ``refusal(...)`` unless ``model`` has ``capability``."""
    if not has(model, capability):
        raise BadInput(refusal(model, capability, doing))
