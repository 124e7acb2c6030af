"""The built-in LM as a model like the others (attncli.model.interface): ``BuiltinLM`` wraps a
``TrainedAttention`` with the traced pass of attncli/model/trace.py, its named sites, kept rows
and heads, interventions, resuming at a layer, batched reruns and the unembedding.

Its tokens are words (``vectors.tokenize``: lower-cased runs of letters and digits), read through
their word vectors. Token ids are the output vocabulary's (``output_words``: what the model can
predict, so a target is one of them); a word read that it lacks gets an id past the vocabulary,
V + i, in the order first read (``token_strings`` names it). Each layer is pre-LN:

    resid_mid = resid_pre + attn.out,  attn.out = z W_O + b_O,  z = softmax(q k^T / sqrt(d_k) + causal) v
    resid_post = resid_mid + mlp.out,  mlp.out = gelu(LN2(resid_mid) W_1 + b_1) W_2 + b_2
    final_norm = LN(resid_post of the last layer),  logits = final_norm W_head^T + b_head

the same operations as ``TrainedAttention.logits`` (float32). Shapes: B a batch, T words, d the
model dimension, h heads, d_k a head's dimension, V the output vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from attncli.numeric import softmax
from attncli.errors import BadInput
from attncli.model.interface import CAPABILITIES, refusal
from attncli.model.record import Recorder
from attncli.model.trace import Intervention, Keep, Trace, split
from attncli.tinylm.model import TrainedAttention, causal_mask, gelu_tanh, input_vectors, layer_norm, load_trained
from attncli.vectors.tokenize import tokenize

CAN = frozenset({"trace", "resume", "rerun", "unembed", "dla", "output_weight", "next_token", "lens", "progress"})
WHY_NOT = {
    "batch": "is the built-in LM, which traces one text per pass",
    "cache": "is the built-in LM, which keeps no key/value cache",
    "grad": "is the built-in LM, for which attn writes no gradients",
    "tape": "is the built-in LM, for which attn writes no gradients",
    "pairs": "is a decoder, it reads one text",
    "mlm": "is a decoder, with no masked-language-model head",
    "stacks": "is not an encoder-decoder",
    "contributions": "is the built-in LM, for which the contribution methods are not written",
    "explain": "is the built-in LM, whose cells attn matrix --proj trained --explain I J explains",
    "precision": "is the built-in LM, which runs in float64",
    "weights": "is the built-in LM, whose heads attn heads --weights does not read",
}


@dataclass
class Words:
    """One input of the built-in LM, shaped as ``hf.text.encoding.Encoding`` where the views read it."""

    ids: list[int]
    tokens: list[str]
    text: str
    special: list[bool] = field(default_factory=list)
    word_ids: list[int | None] = field(default_factory=list)
    type_ids: list[int] = field(default_factory=list)
    truncated: bool = False

    def __post_init__(self):
        n = len(self.ids)
        self.special = self.special or [False] * n
        self.word_ids = self.word_ids or list(range(n))
        self.type_ids = self.type_ids or [0] * n
        self.words = list(self.tokens)
        self.segments = [None] * n


class BuiltinLM:
    """``TrainedAttention`` ``att`` behind the model interface (module docstring)."""

    backend = "builtin"
    model_type = "builtin"
    is_decoder = True
    special_ids: frozenset[int] = frozenset()
    can = CAN | {"qk"}

    def __init__(self, att: TrainedAttention):
        self.att = att
        self.name = att.model
        self.layers, self.heads = att.layers, att.heads
        self.kv_heads = att.heads
        self.words = list(att.output_words)  # ids 0..V-1, then the words read that it lacks
        self.vocab_size = len(self.words)
        self.index = {w: i for i, w in enumerate(self.words)}

    def why_not(self, capability: str) -> str:
        return "" if capability in self.can else WHY_NOT.get(capability, "lacks it")

    # words and ids ----------------------------------------------------------------------------
    def pieces(self, text: str) -> list[int]:
        out = []
        for w in tokenize(text):
            if w not in self.index:
                self.index[w] = len(self.words)
                self.words.append(w)
            out.append(self.index[w])
        return out

    def encode(self, text: str, pair: str | None = None, *, truncate: bool = False, special: bool = True) -> Words:
        if pair is not None:
            raise BadInput(f"the built-in LM '{self.name}' takes no sentence pairs (a decoder, it reads one text): drop --pair")
        ids = self.pieces(text)
        if not ids:
            raise BadInput("the text has no words (the built-in LM reads runs of letters and digits)")
        return Words(ids, self.token_strings(ids), text)

    def vocab_id(self, word: str) -> int | None:
        found = self.index.get(word)
        return found if found is not None and found < self.vocab_size else None

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [self.words[int(i)] if 0 <= int(i) < len(self.words) else "" for i in ids]

    def token_texts(self, ids: Sequence[int]) -> list[str]:
        return self.token_strings(ids)  # words are their own text

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.token_strings(ids))

    def _ids(self, enc: Any) -> list[int]:
        ids = list(enc.ids) if hasattr(enc, "ids") else [int(i) for i in enc]
        if not ids or min(ids) < 0 or max(ids) >= len(self.words):
            raise BadInput(f"token ids must lie in 0..{len(self.words) - 1} (ids of words the model has read)")
        return ids

    # the traced pass -----------------------------------------------------------------------------
    def _p(self, name: str) -> np.ndarray:
        return self.att.w[name]

    def forward(self, ids: list[int], rec: Recorder, batch: int = 1, start: tuple[int, np.ndarray] | None = None) -> np.ndarray:
        """(B, T, d) the final norm's output of ``batch`` copies of ``ids``, sites through ``rec``;
        from layer ``start[0]`` with ``start[1]`` (B, T, d) as its resid_pre when given."""
        att, first = self.att, 0
        if start is None:
            e = input_vectors(att.vectors, self.token_strings(ids))  # (T, d)
            x = rec("embed", None, np.repeat(att.embed_vectors(e)[None], batch, axis=0))  # (B, T, d)
        else:
            first, x = start
        T = x.shape[1]
        for l in range(first, self.layers):
            pre = f"blocks.{l}."
            x = rec("resid_pre", l, x)
            q, k, v = (rec(name, l, m) for name, m in zip(("attn.q", "attn.k", "attn.v"), att.project(x, l)))  # (B, h, T, d_k)
            scores = np.where(causal_mask(T, T), q @ k.swapaxes(-1, -2) / np.sqrt(att.d_k), -np.inf)  # (B, h, T, T)
            scores = rec("attn.scores", l, scores)
            pattern = rec("attn.pattern", l, softmax(scores))  # (B, h, T, T), masked keys exactly 0
            z = rec("attn.z", l, (pattern @ v).swapaxes(-3, -2))  # (B, T, h, d_k)
            out = z.reshape(x.shape) @ self._p(pre + "attn.out_proj.weight").T + self._p(pre + "attn.out_proj.bias")
            h = rec("resid_mid", l, x + rec("attn.out", l, out))  # (B, T, d)
            a = layer_norm(h, self._p(pre + "ln2.weight"), self._p(pre + "ln2.bias"), att.eps)
            hidden = gelu_tanh(a @ self._p(pre + "mlp.0.weight").T + self._p(pre + "mlp.0.bias"))  # (B, T, d_ff)
            mlp = rec("mlp.out", l, hidden @ self._p(pre + "mlp.2.weight").T + self._p(pre + "mlp.2.bias"))
            x = rec("resid_post", l, (h + mlp).astype(np.float32))
        y = rec("final_norm", None, layer_norm(x, self._p("final_ln.weight"), self._p("final_ln.bias"), att.eps))
        if rec.wants("logits"):
            rec("logits", None, self.unembed(y))
        return y

    def trace(self, enc: Any, keep: Keep | Iterable[str] | str | None = None, *,
              rows: Sequence[int] | None = None, interventions: Sequence[Intervention] = (),
              start: tuple[int, np.ndarray] | None = None,
              on_layer: Callable[[int, int], None] | None = None) -> Trace:
        ids = self._ids(enc)
        keep = Keep.of(keep, rows)
        keep.check(len(ids), self.heads)
        for iv in interventions:
            layer = split(iv.site)[0]
            if layer is not None and layer >= self.layers:
                raise BadInput(f"site {iv.site}: model '{self.name}' has layers 0..{self.layers - 1}")
        begin = None
        if start is not None:
            begin = (int(start[0]), self._resid(start[0], start[1], len(ids))[None])
        rec = Recorder(keep, interventions)
        self.forward(ids, rec, start=begin)
        return Trace(ids, rec.one(), rows=keep.rows, backend=self.backend, heads=keep.heads)

    def _resid(self, layer: int, resid: np.ndarray, T: int) -> np.ndarray:
        self.att._check_layer(int(layer))
        resid = np.asarray(resid, dtype=np.float32)
        if resid.shape != (T, self.att.d_model):
            raise BadInput(f"start's residual stream has shape {resid.shape}, the pass needs ({T}, {self.att.d_model})")
        return resid

    def rerun(self, ids: Sequence[int], layer: int, resid: np.ndarray, per_batch: Sequence[Sequence[Intervention]],
              position: int) -> np.ndarray:
        ids = self._ids(ids)
        x = np.repeat(self._resid(layer, resid, len(ids))[None], len(per_batch), axis=0)  # (B, T, d)
        return self.forward(ids, Recorder(Keep(), per_batch=per_batch), start=(int(layer), x))[:, position]  # (B, d)

    def float32_pass(self) -> "BuiltinLM":
        return self  # its pass is float32

    def unembed(self, x: np.ndarray) -> np.ndarray:
        return x @ self._p("head.weight").T + self._p("head.bias")  # (..., V)

    def output_weight(self, layer: int) -> np.ndarray:
        self.att._check_layer(layer)
        return self._p(f"blocks.{layer}.attn.out_proj.weight").T  # (h d_k, d): y = concat(z) W_O + b_O

    def residual_stream(self, ids: Sequence[int]) -> np.ndarray:
        """(L + 1, T, d) the embeddings and each layer's output, before the final norm."""
        tr = self.trace(list(ids), ["embed", "blocks.*.resid_post"])
        return np.stack([tr["embed"]] + [tr[f"blocks.{l}.resid_post"] for l in range(self.layers)])

    def lens_logits(self, x: np.ndarray) -> np.ndarray:
        return self.att.lens_logits(x)

    def _refuse(self, capability: str, doing: str):
        raise BadInput(refusal(self, capability, doing))

    def trace_batch(self, encs: Sequence[Any], keep: Any = None, **kwargs: Any) -> list[Trace]:
        self._refuse("batch", "a batched traced pass")

    def tape(self, dtype: Any = None, weights: Any = None, unembedding: Any = None) -> Any:
        self._refuse("tape", "gradients on a recorded forward pass")

    def site_gradients(self, ids: Sequence[int], position: int, d_metric: Any = None) -> Any:
        self._refuse("grad", "gradients of a metric")

    def unembedding(self) -> np.ndarray:
        return self._p("head.weight")  # (V, d)

    def unembedding_bias(self) -> np.ndarray:
        return self._p("head.bias")  # (V,)

    def final_norm_parts(self) -> tuple[str, np.ndarray, np.ndarray | None, float]:
        return "layer", self._p("final_ln.weight"), self._p("final_ln.bias"), self.att.eps

    def output_norm_parts(self, layer: int) -> None:
        """No norm on the attention's output: each head adds to the stream as it is."""
        self.att._check_layer(layer)
        return None


def load_builtin(model: str | None = None) -> BuiltinLM:
    """The built-in LM stored with word-vector model ``model`` (None: the default), as a Model."""
    return BuiltinLM(load_trained(model))


assert set(WHY_NOT) | CAN | {"qk"} == set(CAPABILITIES), "every capability: had or refused with a reason"
