"""Trained attention, run in NumPy: load the learned weights and trace the forward pass.

No torch here: ``attn heads`` and ``attn matrix --proj trained`` run this path. The model is
the one ``train.py`` trains (a pre-LayerNorm causal transformer, GPT-2 style; Vaswani
et al. 2017 for the attention, Radford et al. 2019 for the layer-norm placement):

    x_0       = W_in e(w_t) + b_in + PE(t)           e = the model's frozen word vector
    a         = LN_1(x_l)
    Q, K, V   = a W_q + b_q, a W_k + b_k, a W_v + b_v   split into h heads of d_k = d / h
    A_head    = softmax(Q K^T / sqrt(d_k) + M)       M = 0 on and below the diagonal, -inf above
    x_l'      = x_l + concat_heads(A V) W_o + b_o
    x_{l+1}   = x_l' + W_2 gelu(W_1 LN_2(x_l') + b_1) + b_2
    logits    = LN_f(x_L) W_out + b_out              over the output vocabulary

Shapes: T tokens, d model width (= word-vector dim), h heads, d_k = d / h, L layers.

Stored under ``<model>/attention/``: ``config.json`` (sizes, training record), ``weights.npz``
(torch's parameter names, float32, read with ``allow_pickle=False``), ``output_vocab.txt`` and
``heldout.txt`` (held-out sentences, one per line, for ``attn heads``); their names, shapes and
checks are in ``checkpoint.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from attncli.attention.projection import Projected
from attncli.errors import BadInput
from attncli.numeric import layer_norm, softmax
from attncli.tinylm.checkpoint import (
    CONFIG, FORMAT, FORMAT_VERSION, HELDOUT, MAX_CONFIG_BYTES, OUTPUT_VOCAB, SUBDIR, WEIGHTS, config_problem,
    expected_shapes, read_lines, vectors_sha256,
)
from attncli.vectors import store
from attncli.vectors.model import load_vectors
from attncli.vectors.safeio import FileProblem, load_npz, read_text



def sinusoidal_positions(T: int, d: int) -> np.ndarray:
    """(T, d) float32: PE[t, 2i] = sin(t / 10000^(2i/d)), PE[t, 2i+1] = cos(t / 10000^(2i/d))."""
    pos = np.arange(T, dtype=np.float64)[:, None]  # (T, 1)
    freq = 10000.0 ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # (ceil(d/2),)
    angle = pos * freq[None, :]  # (T, ceil(d/2))
    pe = np.zeros((T, d), dtype=np.float64)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d // 2])
    return pe.astype(np.float32)


def input_vectors(vectors, words: Sequence[str]) -> np.ndarray:
    """(n, d) float32 word vectors; a word the model cannot embed (no subwords) gets zeros, as in training."""
    out = np.zeros((len(words), vectors.dim), dtype=np.float32)
    for i, w in enumerate(words):
        if vectors.can_embed(w):
            out[i] = vectors.vector(w)
    return out


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """gelu(x) ~ 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel 2016)."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def causal_mask(T: int, S: int | None = None) -> np.ndarray:
    """(T, S) bool, True where query i may attend key j (j <= i)."""
    S = T if S is None else S
    return np.tril(np.ones((T, S), dtype=bool))


@dataclass
class LayerTrace:
    """One layer's attention for one token sequence."""

    x: np.ndarray  # (T, d) the residual stream entering the layer
    q: np.ndarray  # (h, T, d_k)
    k: np.ndarray  # (h, T, d_k)
    v: np.ndarray  # (h, T, d_k)
    scores: np.ndarray  # (h, T, T) Q K^T / sqrt(d_k); -inf where masked
    weights: np.ndarray  # (h, T, T) softmax rows; exactly 0 where masked
    context: np.ndarray  # (h, T, d_k) weights @ V per head
    output: np.ndarray  # (T, d) concat_heads(context) W_o + b_o (added to the residual stream)


class TrainedAttention:
    """The learned weights of one model, with a NumPy forward pass."""

    def __init__(self, model: str, directory: Path, config: dict[str, Any], weights: dict[str, np.ndarray], vectors=None):
        self.model = model
        self.directory = directory
        self.config = config
        self.w = weights
        self._vectors = vectors

    layers = property(lambda self: int(self.config["layers"]))
    heads = property(lambda self: int(self.config["heads"]))
    d_model = property(lambda self: int(self.config["d_model"]))
    d_k = property(lambda self: self.d_model // self.heads)
    eps = property(lambda self: float(self.config["layer_norm_eps"]))

    @property
    def vectors(self):
        if self._vectors is None:
            vectors = load_vectors(self.model, directory=self.directory.parent)  # the same version
            if vectors.dim != self.d_model:
                raise store.CorruptModel(
                    f"the trained attention of model '{self.model}' at {self.directory} is damaged: it is "
                    f"{self.d_model} wide but the model's vectors have {vectors.dim} dims; retrain it with 'attn train-attention'"
                )
            self._vectors = vectors
        return self._vectors

    @cached_property
    def output_words(self) -> list[str]:
        return read_lines(self.directory / OUTPUT_VOCAB)

    def heldout_sentences(self) -> list[list[str]]:
        """The held-out sentences stored with the weights (never seen in training), split at any
        run of whitespace: a stranger's file with two spaces in a row gives no empty word."""
        return [line.split() for line in read_lines(self.directory / HELDOUT) if line.strip()]

    def _p(self, name: str) -> np.ndarray:
        return self.w[name]

    def embed(self, tokens: Sequence[str]) -> np.ndarray:
        """(T, d) the first layer's input: W_in e(w_t) + b_in + PE(t)."""
        if not tokens:
            raise BadInput("no tokens to run the trained attention on")
        return self.embed_vectors(input_vectors(self.vectors, tokens))

    def embed_vectors(self, e: np.ndarray) -> np.ndarray:
        """(T, d) the first layer's input from raw word vectors e (T, d): W_in e + b_in + PE(t)."""
        x = np.asarray(e, dtype=np.float32) @ self._p("input.weight").T + self._p("input.bias")  # (T, d)
        return (x + sinusoidal_positions(x.shape[-2], self.d_model)).astype(np.float32)

    def layer_input(self, x: np.ndarray, layer: int) -> np.ndarray:
        """(T, d) the residual stream entering ``layer``, from the embedded input ``x`` (causal, as trained)."""
        self._check_layer(layer)
        for lay in range(layer):
            _, x = self._layer(x, lay, True)
        return x

    def project(self, x: np.ndarray, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Q, K, V of layer ``layer`` for its residual input ``x`` (T, d), each (h, T, d_k).

        Leading batch axes pass through: x (B, T, d) gives (B, h, T, d_k).
        """
        self._check_layer(layer)
        pre = f"blocks.{layer}."
        a = layer_norm(x, self._p(pre + "ln1.weight"), self._p(pre + "ln1.bias"), self.eps)  # (T, d)
        qkv = a @ self._p(pre + "attn.in_proj_weight").T + self._p(pre + "attn.in_proj_bias")  # (T, 3d)
        q, k, v = (
            m.reshape(*m.shape[:-1], self.heads, self.d_k).swapaxes(-3, -2)  # (h, T, d_k)
            for m in np.split(qkv, 3, axis=-1)  # 3 x (T, d)
        )
        return q, k, v

    def attend(self, q, k, v, *, causal: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Scaled dot-product attention per head: scores, weights (h, T, S), context (h, T, d_k)."""
        scores = q @ k.swapaxes(-1, -2) / np.sqrt(self.d_k)  # (h, T, S)
        if causal:
            scores = np.where(causal_mask(q.shape[-2], k.shape[-2]), scores, -np.inf)
        weights = softmax(scores)  # (h, T, S); masked -> 0
        return scores, weights, weights @ v  # (h, T, d_k)

    def trace(self, tokens_or_x, *, causal: bool = True) -> list[LayerTrace]:
        """Run every layer; ``tokens_or_x`` is a token list or the embedded input (T, d)."""
        x = self._input(tokens_or_x)
        out = []
        for layer in range(self.layers):
            trace, x = self._layer(x, layer, causal)
            out.append(trace)
        return out

    def attention(self, tokens_or_x, layer: int, head: int | None = None, *, causal: bool = True) -> np.ndarray:
        """Attention weights of ``layer``: (T, T) for one head, (h, T, T) for all."""
        self._check_layer(layer)
        if head is not None and not 0 <= head < self.heads:
            raise BadInput(f"--head {head} is out of range: model '{self.model}' has heads 0..{self.heads - 1}")
        x = self._input(tokens_or_x)
        for lay in range(layer):
            _, x = self._layer(x, lay, causal)
        q, k, v = self.project(x, layer)  # 3 x (h, T, d_k)
        weights = self.attend(q, k, v, causal=causal)[1]  # (h, T, T)
        return weights if head is None else weights[head]

    def batch_weights(self, sentences: list[list[str]], batch: int = 32) -> list[list[np.ndarray]]:
        """Per sentence, per layer, the weights (h, T, T); sentences run padded in batches of similar length.

        Padding goes at the end, where the causal mask keeps it out of every real query's view,
        so each sentence's weights are those of ``trace(sentence)``. Batching keeps the
        matrix products large enough to be efficient.
        """
        out: list[list[np.ndarray]] = [[] for _ in sentences]
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        for start in range(0, len(order), batch):
            group = order[start : start + batch]
            T = len(sentences[group[-1]])
            e = np.zeros((len(group), T, self.d_model), dtype=np.float32)  # (B, T, d)
            for r, i in enumerate(group):
                e[r, : len(sentences[i])] = input_vectors(self.vectors, sentences[i])
            x = self.embed_vectors(e)  # (B, T, d)
            for layer in range(self.layers):
                trace, x = self._layer(x, layer, True)
                for r, i in enumerate(group):
                    n = len(sentences[i])
                    out[i].append(trace.weights[r, :, :n, :n])  # (h, n, n)
        return out

    def logits(self, tokens_or_x) -> np.ndarray:
        """(T, V_out) next-word logits over ``output_words``."""
        x = self._input(tokens_or_x)
        for layer in range(self.layers):
            _, x = self._layer(x, layer, True)
        x = layer_norm(x, self._p("final_ln.weight"), self._p("final_ln.bias"), self.eps)
        return x @ self._p("head.weight").T + self._p("head.bias")  # (T, V_out)

    def logits_and_attentions(self, tokens_or_x) -> tuple[np.ndarray, list[np.ndarray]]:
        """One causal pass: next-word logits (T, V_out) and every layer's weights, L x (h, T, T)."""
        x = self._input(tokens_or_x)
        weights = []
        for layer in range(self.layers):
            trace, x = self._layer(x, layer, True)
            weights.append(trace.weights)
        x = layer_norm(x, self._p("final_ln.weight"), self._p("final_ln.bias"), self.eps)
        return x @ self._p("head.weight").T + self._p("head.bias"), weights  # (T, V_out), L x (h, T, T)

    def residual_stream(self, tokens_or_x) -> np.ndarray:
        """(L + 1, T, d) the causal pass's residual stream: x_0 and the output of every layer,
        before the final norm (what the logit lens reads)."""
        x = self._input(tokens_or_x)
        stream = [x]
        for layer in range(self.layers):
            _, x = self._layer(x, layer, True)
            stream.append(x)
        return np.stack(stream)  # (L + 1, T, d)

    def lens_logits(self, x: np.ndarray) -> np.ndarray:
        """(..., V_out) the final norm and output head applied to residual vectors x (..., d)."""
        x = layer_norm(x, self._p("final_ln.weight"), self._p("final_ln.bias"), self.eps)
        return x @ self._p("head.weight").T + self._p("head.bias")

    def _input(self, tokens_or_x) -> np.ndarray:
        if isinstance(tokens_or_x, np.ndarray):
            if tokens_or_x.ndim != 2 or tokens_or_x.shape[1] != self.d_model:
                raise BadInput(f"input must be (T, {self.d_model}), got {tokens_or_x.shape}")
            return tokens_or_x.astype(np.float32)
        return self.embed(list(tokens_or_x))

    def _layer(self, x: np.ndarray, layer: int, causal: bool) -> tuple[LayerTrace, np.ndarray]:
        pre = f"blocks.{layer}."
        q, k, v = self.project(x, layer)
        scores, weights, context = self.attend(q, k, v, causal=causal)
        merged = context.swapaxes(-3, -2).reshape(x.shape)  # (T, d)
        output = merged @ self._p(pre + "attn.out_proj.weight").T + self._p(pre + "attn.out_proj.bias")  # (T, d)
        h = x + output
        a = layer_norm(h, self._p(pre + "ln2.weight"), self._p(pre + "ln2.bias"), self.eps)
        hidden = gelu_tanh(a @ self._p(pre + "mlp.0.weight").T + self._p(pre + "mlp.0.bias"))  # (T, d_ff)
        h = h + hidden @ self._p(pre + "mlp.2.weight").T + self._p(pre + "mlp.2.bias")  # (T, d)
        return LayerTrace(x, q, k, v, scores, weights, context, output), h.astype(np.float32)

    def _check_layer(self, layer: int) -> None:
        if not 0 <= layer < self.layers:
            raise BadInput(f"--layer {layer} is out of range: model '{self.model}' has layers 0..{self.layers - 1}")


def projection(inp) -> Any:
    """``attn matrix --proj trained``: Q, K, V of one learned layer (``options``: layer, head).

    ``inp`` is an ``attncli.attention.projection.ProjectionInput``. The model's own input map and positions
    are used (the matrix's positional encoding is not: the weights were trained with these), on
    the raw word vectors ``words_q`` / ``words_kv`` (pad rows 0). Earlier layers run causally, as
    in training. Without a head: every head, concatenated (T, d) with heads fixed, W_o and b_o
    (the layer's attention output, as torch's ``out_proj`` computes it); with ``head``: that head
    alone (T, d_k).
    """
    att = load_trained(inp.model.name, model_directory=inp.model.path)  # the version the vectors came from
    if inp.model.dim != att.d_model:
        raise store.CorruptModel(f"model '{att.model}': vectors of dim {inp.model.dim} but attention of width {att.d_model}; retrain it")
    if inp.d_k is not None:
        raise BadInput("--d-k does not apply to --proj trained: the learned layer fixes d_k")
    layer = int(inp.options.get("layer") or 0)
    head = inp.options.get("head")
    att._check_layer(layer)
    if head is not None and not 0 <= int(head) < att.heads:
        raise BadInput(f"--head {head} is out of range: model '{att.model}' has heads 0..{att.heads - 1}")
    q = att.project(att.layer_input(att.embed_vectors(inp.words_q), layer), layer)[0]  # (h, T, d_k)
    _, k, v = att.project(att.layer_input(att.embed_vectors(inp.words_kv), layer), layer)  # 2 x (h, S, d_k)
    where = f"trained ({att.model}, layer {layer} of {att.layers}"
    positions = f"the trained model's own ({att.config.get('positions', 'sinusoidal')})"
    if head is not None:
        h = int(head)
        return Projected(q=q[h], k=k[h], v=v[h], label=f"{where}, head {h} of {att.heads})", heads=1,
                         positions=positions)
    T, S = q.shape[1], k.shape[1]
    return Projected(
        q=q.transpose(1, 0, 2).reshape(T, att.d_model),  # (T, d): head i = columns i*d_k .. (i+1)*d_k
        k=k.transpose(1, 0, 2).reshape(S, att.d_model),  # (S, d)
        v=v.transpose(1, 0, 2).reshape(S, att.d_model),  # (S, d)
        label=f"{where}, {att.heads} heads)",
        w_o=att.w[f"blocks.{layer}.attn.out_proj.weight"].T,  # (d, d): y = concat(heads) @ W_o + b_o
        b_o=att.w[f"blocks.{layer}.attn.out_proj.bias"],  # (d,)
        heads=att.heads,
        positions=positions,
    )


def load_trained(model: str | None = None, *, model_directory: Path | None = None) -> TrainedAttention:
    """The trained attention stored with word-vector model ``model`` (None: the default model).

    The name is resolved once and every file (config, weights, the vectors' checksum, later the
    vectors themselves) is read from that version directory. Hostile files (not regular, a
    header declaring a huge shape, a config field of the wrong type or an absurd size) are a
    CorruptModel before any large allocation.
    """
    if model_directory is None:
        return store.read_one_version(model or None, lambda d: load_trained(model, model_directory=d))
    model = model or store.default_model_name()
    directory = model_directory / SUBDIR
    shown = store.shown_path(model_directory) / SUBDIR
    if not (directory / CONFIG).exists() and not (directory / CONFIG).is_symlink():
        raise BadInput(
            f"model '{model}' has no trained attention: train it with "
            f"'attn train-attention --model {model} --name NEW' (see 'attn train-attention --help')"
        )
    damaged = f"the trained attention of model '{model}' at {shown} is damaged"
    try:
        config = json.loads(read_text(directory / CONFIG, MAX_CONFIG_BYTES))
    except FileProblem as exc:
        raise store.CorruptModel(f"{damaged} (config.json: {exc}): retrain it with 'attn train-attention'") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise store.CorruptModel(f"{damaged} ({exc}): retrain it with 'attn train-attention'") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise store.CorruptModel(f"{damaged}: config.json is not an attn attention description; retrain it")
    version = config.get("format_version", 0)
    if isinstance(version, int) and version > FORMAT_VERSION:  # before the fields: a newer format may change them
        raise store.CorruptModel(f"the trained attention of model '{model}' was written by a newer attn: upgrade attn")
    problem = config_problem(config)
    if problem is not None:
        raise store.CorruptModel(f"{damaged}: in its config.json, {problem}; retrain it with 'attn train-attention'")
    shapes = expected_shapes(config)
    try:
        weights = load_npz(directory / WEIGHTS, shapes)
    except FileProblem as exc:
        raise store.CorruptModel(f"{damaged} (weights.npz: {exc}): retrain it with 'attn train-attention'") from None
    expected_sha = config.get("vectors_sha256")
    if expected_sha and expected_sha != vectors_sha256(model_directory):
        raise store.CorruptModel(
            f"the trained attention of model '{model}' was trained on other word vectors than the model "
            f"now holds: retrain it with 'attn train-attention --model {model}'"
        )
    for name, shape in shapes.items():
        if weights[name].shape != shape:
            raise store.CorruptModel(f"{damaged}: {name} has shape {weights[name].shape}, expected {shape}; retrain it")
        if not np.isfinite(weights[name]).all():
            raise store.CorruptModel(f"{damaged}: {name} holds NaN or infinite values; retrain it")
    vectors = load_vectors(model, directory=model_directory)  # now, from this version (memory-mapped)
    if vectors.dim != int(config["d_model"]):
        raise store.CorruptModel(
            f"{damaged}: it is {config['d_model']} wide but the model's vectors have {vectors.dim} dims; "
            "retrain it with 'attn train-attention'"
        )
    return TrainedAttention(model, directory, config, weights, vectors)


