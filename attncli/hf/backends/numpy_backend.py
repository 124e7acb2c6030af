"""The numpy backend: attn's own forward pass from ``model.safetensors``, tokenized by ``tokenizers``
from ``tokenizer.json``. Neither torch nor transformers is imported on this path.

Attentions, q/k and logits are computed in float64 (the weights, float32 / float16 / bfloat16 on
disk, are widened once as each layer first needs them); ``embed`` runs in float32 (twice as fast,
within 1e-6), and so may ``trace_batch`` (``precision="float32"``: attn stats' default). Checked against transformers' ``output_attentions`` in
tests/hf/test_numpy_backend.py. The attention runs by chunks of query rows (chunked_attention.py)
and the decoders' MLPs by blocks of rows (ops.by_rows), so a long text's pass holds one layer's
activations and the rows it keeps (tests/hf/test_chunked_attention.py); the generation cache is numpy_cache.py.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from attncli.errors import BadInput, RuntimeFailure
from attncli.io.fileio import FileProblem, read_text
from attncli.hf.kernels import blas, heap
from attncli.hf.backends import capabilities
from attncli.hf.kernels.chunked_attention import Mask
from attncli.hf.families.registry import Verdict, family
from attncli.hf.text.encoding import Encoding, tokenized, tokenizer_errors
from attncli.hf.methods.layer_weights import layer_weights
from attncli.hf.backends.mlm import MaskedLMHead
from attncli.hf.backends.pretrained_base import Pretrained
from attncli.model.trace import qk_of, stream_of, value_sites
from attncli.model.record import PassDone, Recorder, attention_only
from attncli.model.trace import Intervention, Keep, Trace, site, split
from attncli.hf.checks.config_check import TOKENIZER_BYTES, damaged
from attncli.hf.formats.source import SAFETENSORS, TOKENIZER
from attncli.hf.backends.numpy_cache import KVCache
from attncli.hf.checks.weight_check import check_activations, check_finite, check_weight_names
from attncli.hf.formats.weights import Weights, WeightsAs, checkpoint_file

PRECISIONS = ("float32", "float64")  # trace_batch's: the weights' dtype of the pass
RERUN_BATCH = 64  # passes per batched rerun at most (a layer's heads, or positions)


def unsupported(path: Path, verdict: Verdict) -> str | None:
    """Why the numpy backend cannot run this model (the registry's ``verdict`` on its config, then
    its files), or None when it can."""
    if verdict.family is None:
        return verdict.numpy
    if checkpoint_file(path) is None:
        return f"the model has no {SAFETENSORS} or model.safetensors.index.json (pytorch_model.bin weights)"
    if not (path / TOKENIZER).is_file():
        return f"the model has no {TOKENIZER} (only a slow tokenizer's files)"
    return verdict.numpy


class NumpyPretrained(Pretrained):
    backend = "numpy"
    traced = True

    def __init__(self, name: str, path: Path, config: dict[str, Any], *, allow_missing_weights: bool = False):
        super().__init__(name, path, config)
        from tokenizers import Tokenizer

        try:
            text = read_text(self.path / TOKENIZER, TOKENIZER_BYTES, follow_symlinks=True)
        except FileProblem as exc:
            raise damaged(TOKENIZER, str(exc)) from None
        with tokenizer_errors(name, f"read {TOKENIZER}"):
            self.tokenizer = Tokenizer.from_str(text)
            self.tokenizer.no_truncation()  # tokenizer.json may carry a fixed truncation / padding
            self.tokenizer.no_padding()     # (all-MiniLM-L6-v2's pads to 128); transformers sets them per call
        fam = family(self.model_type)
        weights = Weights(checkpoint_file(self.path), fam.module.ANCHORS, fam.dtype)
        check_weight_names(name, fam.module, weights, config, allow_missing_weights)
        self.arch = fam.cls(weights, config)
        self.layers = self.arch.layers
        self.heads = self.arch.heads
        self.is_decoder = self.arch.causal
        self.use_type_ids = (self.model_type in ("bert", "electra")
                             and "embeddings.token_type_embeddings.weight" in self.arch.w)

    @tokenized("split the text into tokens")
    def _tokenize(self, texts: list[str], max_length: int | None, special: bool = True) -> Any:
        tok = self.tokenizer
        if max_length is not None:
            tok.enable_truncation(max_length, strategy="longest_first")
        try:
            return tok.encode(*texts, add_special_tokens=special)
        finally:
            tok.no_truncation()

    def scale(self, layer: int) -> float:
        """The factor q k^T is multiplied by before the softmax in ``layer``."""
        self.check_layer(layer)
        return self.arch.scale(layer)

    def _arrays(self, enc: Encoding | Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(1, T) ids, type ids and mask of an Encoding or a list of token ids."""
        if isinstance(enc, Encoding):
            if not enc.ids:
                raise BadInput("trace() takes an Encoding from encode() or a list of token ids (this Encoding has no tokens)")
            ids = np.asarray([enc.ids], dtype=np.int64)  # (1, T)
            type_ids = np.asarray([enc.type_ids], dtype=np.int64)  # (1, T)
        elif isinstance(enc, (str, bytes)) or not isinstance(enc, (Sequence, np.ndarray)):
            raise BadInput("trace() takes an Encoding from encode() or a list of token ids")
        else:
            ids = self.check_ids(enc)[None]  # (1, T)
            type_ids = np.zeros_like(ids)
        if ids.shape[1] > self.max_positions:
            raise BadInput(f"{ids.shape[1]} tokens is more than the model's limit of {self.max_positions}")
        return ids, type_ids, np.ones_like(ids, dtype=bool)

    @cached_property
    def arch32(self) -> Any:
        """The same model in float32 (the same weights file and cache), for ``embed``."""
        return family(self.model_type).cls(WeightsAs(self.arch.w, np.float32), self.config)

    def float32_pass(self) -> "NumpyPretrained":
        """This model with its pass in float32 (itself where it runs in float32 already: the Llama
        family): the causal grids' pass, within float32 rounding of float64's (tests/causal/test_grids32.py)."""
        return self if self.pass_dtype == np.float32 else self._twin32

    @cached_property
    def _twin32(self) -> "NumpyPretrained":
        twin = copy.copy(self)  # the same tokenizer, weights file and caches; the float32 arch and MLM head
        twin.__dict__.pop("mlm_head", None)
        twin.arch = self.arch32
        return twin

    @cached_property
    def mlm_head(self) -> MaskedLMHead:
        """An encoder's masked-language-model head (BadInput naming the model when it has none)."""
        return MaskedLMHead(self.arch.w, self.config, self.name)

    def unembed(self, x: np.ndarray) -> np.ndarray:
        """(..., d) final-norm outputs -> (..., V) logits: a decoder's LM head, an encoder's MLM head."""
        if "unembed" not in self.can:
            return super().unembed(x)  # the refusal: an encoder without an MLM head
        return self.arch.logits(x) if self.is_decoder else self.mlm_head(x)

    @cached_property
    def _reasons(self) -> dict[str, str]:
        return capabilities.numpy_reasons(self)

    def unembedding(self) -> np.ndarray:
        return self.arch.unembedding() if "dla" in self.can else super().unembedding()  # (V, d)

    def final_norm_parts(self) -> tuple[str, np.ndarray, np.ndarray | None, float]:
        return self.arch.final_norm_parts() if "dla" in self.can else super().final_norm_parts()

    def output_weight(self, layer: int) -> np.ndarray:
        self.check_layer(layer)
        return self.arch.output_weight(layer) if "output_weight" in self.can else super().output_weight(layer)

    def output_norm_parts(self, layer: int) -> tuple[str, np.ndarray, np.ndarray | None, float, Any] | None:
        """The description's attn_out_norm of ``layer`` (Gemma 3's post-attention norm, weight 1 + w), float64."""
        self.check_layer(layer)
        if "dla" not in self.can:
            return super().output_norm_parts(layer)
        W = layer_weights(self.arch, layer, np.float64, parts=("attn_out_norm", "o"))
        if W["attn_out_norm"] is None:
            return None
        return (W["norm"], *W["attn_out_norm"], self.arch.parts.eps, W["o"][1])

    def rerun(self, ids: Sequence[int], layer: int, resid: np.ndarray, per_batch: Sequence[Sequence[Intervention]],
              position: int) -> np.ndarray:
        """(B, d) the final norm's output at ``position`` of B passes of ``ids`` from ``layer`` on,
        each from ``resid`` (T, d) with its own interventions, RERUN_BATCH passes at a time."""
        out = []
        for s in range(0, len(per_batch), RERUN_BATCH):
            chunk = list(per_batch[s: s + RERUN_BATCH])
            arr = np.asarray(ids, dtype=np.int64)[None].repeat(len(chunk), axis=0)  # (B, T)
            x = np.broadcast_to(resid, (len(chunk),) + resid.shape).astype(self.pass_dtype)  # (B, T, d)
            rec = Recorder(Keep(), per_batch=chunk)
            out.append(self.forward(arr, np.zeros_like(arr), np.ones_like(arr, dtype=bool), rec, start=(layer, x))[:, position])
        return np.concatenate(out)  # (B, d)

    def running(self, tokens: int) -> contextlib.ExitStack:
        """The context a pass over ``tokens`` (batch x length) runs in: the BLAS threads blas.py's
        policy gives that size; glibc's large arrays mapped on their own when it is long and the
        command line allowed it (heap.py); an overflow is found by check_activations and reported
        as damage, not as a RuntimeWarning."""
        stack = contextlib.ExitStack()
        stack.enter_context(blas.for_rows(tokens))
        if tokens > blas.SMALL_ROWS:
            heap.map_large_arrays()  # before the pass's first large array; only where the CLI allowed it
        stack.enter_context(np.errstate(over="ignore", invalid="ignore"))
        return stack

    def forward(self, ids: np.ndarray, type_ids: np.ndarray, mask: np.ndarray, rec: Recorder, *,
                arch: Any = None, start: tuple[int, np.ndarray] | None = None,
                on_layer: Callable[[int, int], None] | None = None) -> np.ndarray:
        """The forward pass of ``ids`` (B, T) (of ``self.arch`` unless another ``arch``), every site
        recorded by ``rec``; from layer ``start[0]`` on with ``start[1]`` (B, T, d) as its
        resid_pre when given; ``on_layer(l, L)`` called as each layer l of L is done. Returns the
        final norm's output (B, T, d)."""
        arch = self.arch if arch is None else arch
        first = 0
        if start is None:
            try:
                x = arch.embeddings(ids, type_ids, mask)  # (B, T, d)
            except IndexError:
                raise RuntimeFailure(f"model '{self.name}': a token or token-type id lies outside the model's "
                                     "embedding tables (its tokenizer and weights do not match)") from None
            x = rec("embed", None, x)
        else:
            first, x = start
        keys = Mask(None if mask.all() else mask, arch.causal)  # which keys each query sees, made per chunk
        with self.running(x.shape[0] * x.shape[1]):
            for l in range(first, arch.layers):
                x = arch.layer(l, rec("resid_pre", l, x), keys, rec)
                check_activations(l, x)
                x = rec("resid_post", l, x)
                if on_layer is not None:
                    on_layer(l, arch.layers)
            h = rec("final_norm", None, arch.final(x))  # (B, T, d)
            if rec.wants("logits"):
                logits = self.unembed(h) if arch is self.arch else arch.logits(h)  # (B, T, V)
                check_finite(logits, "the logits")
                rec("logits", None, logits)
        return h

    def trace(self, enc: Encoding | Sequence[int], keep: Keep | Iterable[str] | str | None = None, *,
              rows: Sequence[int] | None = None, interventions: Sequence[Intervention] = (),
              start: tuple[int, np.ndarray] | None = None,
              on_layer: Callable[[int, int], None] | None = None) -> Trace:
        """One forward pass of ``enc`` (an Encoding or token ids) holding the sites ``keep`` names
        (patterns allowed; ``rows``: only those query rows of the pattern and scores, as a Keep's
        rows and heads), with ``interventions`` made where their sites are computed.
        ``start=(l, resid_pre)`` resumes at layer l from a residual stream (T, d), running only
        layers l..L-1 (see trace.py); ``on_layer(l, L)`` is called as each layer l of L is done.
        The attention runs by chunks of query rows (chunked_attention.py): a pattern kept for a
        few rows costs those rows, never a layer's (h, T, T)."""
        ids, type_ids, mask = self._arrays(enc)
        keep = Keep.of(keep, rows)
        keep.check(ids.shape[1], self.heads)
        for iv in interventions:
            self._check_site(iv.site)
        begin = None
        if start is not None:
            layer, resid = start
            self.check_layer(layer)
            resid = np.asarray(resid, dtype=self.arch.w.dtype)
            if resid.shape != (ids.shape[1], self.arch.d):
                raise BadInput(f"start's residual stream has shape {resid.shape}, the pass needs "
                               f"({ids.shape[1]}, {self.arch.d})")
            begin = (int(layer), resid[None])
        rec = Recorder(keep, interventions)
        self.forward(ids, type_ids, mask, rec, start=begin, on_layer=on_layer)
        return Trace(ids[0].tolist(), rec.one(), rows=keep.rows, backend=self.backend, heads=keep.heads)

    def trace_batch(self, encs: Sequence[Encoding], keep: Keep | Iterable[str] | str | None = None, *,
                    precision: str = "float64", on_layer: Callable[[int, int], None] | None = None) -> list[Trace]:
        """``trace(enc, keep)`` of each encoding, from one forward pass over them all: padded on the
        right with the model's pad id to the longest, the padding masked (no real token attends to
        it), each Trace cut to its own text's tokens. The same as one pass per text to float
        rounding (1e-12 in float64; tests/model/test_trace_batch.py). ``precision="float32"`` runs the
        float32 weights (as ``embed``) and attention, the scores and pattern widened to float64 after."""
        if precision not in PRECISIONS:
            raise BadInput(f"unknown precision '{precision}': choose one of {', '.join(PRECISIONS)}")
        if not encs:
            return []
        keep = Keep.of(keep)
        if keep.rows is not None:
            raise BadInput("trace_batch keeps whole sites (no rows)")
        keep.check(1, self.heads)
        for enc in encs:
            if not isinstance(enc, Encoding):
                raise BadInput("trace_batch() takes Encodings from encode()")
            self._arrays(enc)  # its checks: not empty, within the model's limit
        ids, type_ids, mask = self.padded(encs)  # (B, T) each
        if hasattr(self.arch.w, "hold_widened"):  # a corpus: widened or dequantized weights kept across passes
            self.arch.w.hold_widened()
        rec = Recorder(replace(keep, float32=True) if precision == "float32" else keep,  # float32 attention (Llama's too)
                       stop_after=None if on_layer else attention_only(keep, self.layers))
        with contextlib.suppress(PassDone):  # nothing kept after the last layer's attention: not computed
            self.forward(ids, type_ids, mask, rec, arch=self.arch32 if precision == "float32" else self.arch,
                         on_layer=on_layer)
        widen = {"attn.scores", "attn.pattern"} if precision == "float32" and not keep.float32 else set()
        traces = []
        for b, enc in enumerate(encs):  # each text's sites copied out of the batch once (float64 where widened)
            sites = {name: x.astype(np.float64) if split(name)[1] in widen else x.copy()
                     for name, x in rec.cut(b, len(enc.ids), copy=False).items()}
            traces.append(Trace(enc.ids, sites, backend=self.backend, heads=keep.heads))
        return traces

    pass_dtype = property(lambda self: self.arch.w.dtype)  # the weights' dtype in the pass (Llama: float32)

    def _check_site(self, name: str) -> None:
        layer, _ = split(name)
        if layer is not None and layer >= self.layers:
            raise BadInput(f"site {name}: model '{self.name}' has layers 0..{self.layers - 1}")

    @staticmethod
    def _encoding(enc: Any, method: str) -> Encoding:
        """``enc`` if it is an Encoding (attentions, qk, scores, value_vectors take one, as on the
        torch backend; bare token ids are for ``trace`` and ``logits_and_attentions``)."""
        if not isinstance(enc, Encoding) or not enc.ids:
            raise BadInput(f"{method}() takes an Encoding from encode() (token ids: trace())")
        return enc

    def attentions(self, enc) -> np.ndarray:
        """(L, h, T, T) float64: every layer's and head's attention weights for ``enc``."""
        enc = self._encoding(enc, "attentions")
        return self.trace(enc, "blocks.*.attn.pattern").stack("attn.pattern", self.layers)  # (L, h, T, T)

    def check_qk(self) -> None:
        """BadInput for a model whose scores are more than q k^T (a relative position bias)."""
        if self.why_not("qk"):
            raise BadInput(f"model '{self.name}' ({self.model_type}) adds a relative position bias to q k^T: "
                           "its queries and keys alone do not give its attention (no --explain)")

    def qk(self, enc, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """q, k (h, T, d_head) of ``layer``: softmax(q k^T * scale(layer) + mask) is its attentions."""
        self.check_layer(layer)
        self.check_qk()
        tr = self.trace(self._encoding(enc, "qk"), [site(layer, "attn.q"), site(layer, "attn.k")])
        return qk_of(tr, layer)

    def scores(self, enc, layer: int) -> np.ndarray:
        """(h, T, T) q k^T * scale(layer) of ``layer``, before the softmax; -inf where masked (causal)."""
        self.check_layer(layer)
        self.check_qk()
        return self.trace(self._encoding(enc, "scores"), site(layer, "attn.scores"))[site(layer, "attn.scores")].astype(np.float64)

    def value_vectors(self, enc, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """The attentions A (h, T, T) of ``layer`` and each head's transformed value vectors
        f^h(x_j) = (x_j W_V + b_V)^h W_O^h (h, T, d), W_O^h the rows of head h (Kobayashi et al.
        2020, eq. 6; b_O, shared by every token, is left out): the layer's attention output is
        sum_h sum_j A[h, i, j] f^h(x_j) + b_O. Grouped-query attention (Llama family): v comes
        repeated per query head, so head h reads its key-value group's v^{g(h)} and its own rows of W_O."""
        self.check_layer(layer)
        self.check_value_vectors()
        return self.value_vectors_of(self.trace(self._encoding(enc, "value_vectors"), value_sites(layer)), layer)

    def check_value_vectors(self) -> None:
        if not hasattr(self.arch, "output_weight"):  # the family's own pass (inside the model wing)
            raise BadInput(f"--show norms reads each head's value vectors and output projection: attn's NumPy pass "
                           f"of '{self.model_type}' does not expose them")

    def value_vectors_of(self, tr: Trace, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """``value_vectors`` read from a trace that kept ``value_sites(layer)``."""
        h, d_head = self.heads, self.arch.d_head
        w_o = self.arch.output_weight(layer).astype(np.float64).reshape(h, d_head, -1)  # (h, d_head, d)
        v = tr[site(layer, "attn.v")].astype(np.float64)  # (h, T, d_head)
        return tr[site(layer, "attn.pattern")], v @ w_o  # (h, T, T), (h, T, d): one product per head (einsum: 5x slower)

    def _last_hidden(self, ids: np.ndarray, type_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """For ``embed``: in float32, twice as fast as float64 and within 1e-6 of it."""
        return self.forward(ids, type_ids, mask, Recorder(), arch=self.arch32)  # (B, T, d)

    def new_cache(self) -> KVCache:
        """A key/value cache for ``logits_and_attentions`` (decoders): see there."""
        self.check_decoder()
        return KVCache(self.layers)

    def logits_and_attentions(self, ids: Sequence[int], cache: KVCache | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Decoders: (T, V) next-token logits and (L, h, T, T) attentions for token ids ``ids``.

        With ``cache`` (from ``new_cache()``), only the tokens past the longest prefix the cache
        has already seen are run (their queries against the cached keys and values); the result is
        the same as without (in a causal model, earlier rows do not change as tokens are added).
        """
        self.check_decoder()
        arr = self.check_ids(ids)  # (T,)
        if cache is None:
            tr = self.trace(arr.tolist(), ["logits", "blocks.*.attn.pattern"])
            return tr["logits"], tr.stack("attn.pattern", self.layers)  # (T, V), (L, h, T, T)
        return cache.extend(self, arr)

    def residual_stream(self, ids: Sequence[int]) -> np.ndarray:
        """Decoders: (L + 1, T, d) the residual stream of token ids ``ids`` before layer 0 (the
        embeddings) and after each layer, before the final norm (the logit lens reads it). In
        float32, as ``embed``: the weights need no widening (a 12-layer GPT-2 spent 4 s there)."""
        self.check_decoder()
        arr = self.check_ids(ids)[None]  # (1, T)
        rec = Recorder(Keep.of(["embed", "blocks.*.resid_post"]))
        self.forward(arr, np.zeros_like(arr), np.ones_like(arr, dtype=bool), rec, arch=self.arch32)
        return stream_of(Trace(arr[0].tolist(), rec.one()), self.layers)  # (L + 1, T, d)

    def lens_logits(self, x: np.ndarray) -> np.ndarray:
        """(..., V) float32: the final norm (of x as (1, n, d), the (B, T, d) it takes) and unembedding of x (..., d)."""
        self.check_decoder()
        return self.arch32.logits(self.arch32.final(x.reshape(1, -1, x.shape[-1]))).reshape(*x.shape[:-1], -1)

    @tokenized("turn token ids back into text")
    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(map(int, ids)), skip_special_tokens=False)

    @tokenized("name its tokens")
    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [self.tokenizer.id_to_token(int(i)) or "" for i in ids]
