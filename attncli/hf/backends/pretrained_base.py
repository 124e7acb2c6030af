"""``Pretrained``, what the numpy and torch backends share: encoding a text (limits, pairs,
truncation), reading its words, pooling sentence embeddings and the checks every call makes.

The backends (``numpy_backend``, ``torch_backend``, ``seq2seq``) subclass it with how they tokenize
and run the model; ``loader.load`` picks one.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from attncli.errors import BadInput, RuntimeFailure
from attncli.io.textio import visible
from attncli.hf.checks import config_defaults
from attncli.hf.checks.config_check import read_optional_json
from attncli.hf.text.encoding import Encoding, check_text, from_tokenizers, tokenizer_errors, too_long
from attncli.hf.text.token_text import decoder_steps, token_texts
from attncli.hf.methods.backward import DecoderTape
from attncli.hf.methods.backward_encoder import EncoderTape
from attncli.model.interface import refusal, require

ROBERTA_TYPES = {"roberta", "xlm-roberta", "camembert"}
EMBED_BATCH = 32  # texts per forward pass in embed(), fewer when long:
EMBED_BUDGET = 2**23  # attention weights (B h T T) per batch, 64 MB in float64
NO_LIMIT = 10**9


def max_positions(config: dict[str, Any], path: Path) -> int:
    """The most tokens one input may hold: the position table (RoBERTa's starts at padding_idx + 1),
    or the tokenizer's model_max_length when smaller."""
    n = config.get("max_position_embeddings") or config.get("n_positions") or config.get("n_ctx")
    if not n:  # absent: transformers' default for the family (config_defaults), where attn knows it
        defaults = config_defaults.DEFAULTS.get(config["model_type"], {})
        n = defaults.get("max_position_embeddings") or defaults.get("n_positions")
    if n and config["model_type"] in ROBERTA_TYPES | {"mpnet"}:  # MPNet's positions also start at padding_idx + 1
        n = int(n) - int(config.get("pad_token_id") if config.get("pad_token_id") is not None else 1) - 1
    tok_limit = _json(path / "tokenizer_config.json").get("model_max_length")
    if isinstance(tok_limit, int) and 0 < tok_limit < 10**7:
        n = min(int(n), tok_limit) if n else tok_limit
    return int(n) if n else NO_LIMIT


def _json(path: Path) -> dict[str, Any]:
    """An optional JSON file of the model directory, through the checked door: {} when absent,
    damage (exit 1) when it is a FIFO, a device, too large, too deep or not JSON."""
    return read_optional_json(path)


POOLINGS = ("cls", "max", "mean", "mean_sqrt_len")  # sentence-transformers' order when several are on


def pool(hidden: np.ndarray, mask: np.ndarray, modes: Sequence[str] = ("mean",)) -> np.ndarray:
    """(B, d * P): sentence-transformers' Pooling of a last hidden state, one part per distinct mode
    (P of them) in POOLINGS order, concatenated.

    hidden (B, T, d), mask (B, T) bool with at least one True per row (padding False):
    cls  = hidden[:, 0]                     the first token ([CLS] / <s>)
    max  = max over the real tokens
    mean = sum over the real tokens / their number
    mean_sqrt_len = sum over the real tokens / sqrt(their number)
    """
    modes = check_pooling(modes)
    m = mask[..., None].astype(hidden.dtype)  # (B, T, 1)
    total = (hidden * m).sum(axis=1)  # (B, d)
    count = np.maximum(m.sum(axis=1), 1e-9)  # (B, 1)
    parts = {
        "cls": lambda: hidden[:, 0],
        "max": lambda: np.where(mask[..., None], hidden, -1e9).max(axis=1),
        "mean": lambda: total / count,
        "mean_sqrt_len": lambda: total / np.sqrt(count),
    }
    return np.concatenate([parts[mode]() for mode in modes], axis=-1)


def check_pooling(modes: str | Sequence[str]) -> tuple[str, ...]:
    """The distinct ``modes`` in POOLINGS order (one mode may be given as a string); BadInput for
    an unknown mode or none."""
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    unknown = [m for m in modes if m not in POOLINGS]
    if unknown or not modes:
        raise BadInput(f"pooling must be one or more of {', '.join(POOLINGS)}, not {', '.join(unknown) or 'none'}")
    return tuple(m for m in POOLINGS if m in modes)


def masked_scores(q: np.ndarray, k: np.ndarray, scale: float, causal: bool) -> np.ndarray:
    """(h, T, T) q k^T * scale from q, k (h, T, d_head); -inf above the diagonal if ``causal``."""
    scores = (q @ k.swapaxes(-1, -2)) * scale  # (h, T, T)
    if causal:
        T = scores.shape[-1]
        scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
    return scores


def length_batches(lengths: list[int], heads: int, most: int = EMBED_BATCH, budget: int = EMBED_BUDGET) -> list[list[int]]:
    """Consecutive runs of the (sorted) ``lengths``: at most ``most`` each, and B h T^2 within
    ``budget`` (a text over it alone)."""
    batches: list[list[int]] = []
    for j, T in enumerate(lengths):
        if batches and len(batches[-1]) < most and (len(batches[-1]) + 1) * heads * T * T <= budget:
            batches[-1].append(j)
        else:
            batches.append([j])
    return batches


class Pretrained:
    """A loaded model (see the package docstring for the whole API). Subclasses provide
    ``_tokenize``, ``_last_hidden``, ``attentions``, ``qk``, ``scores``, ``value_vectors``,
    ``logits_and_attentions``, ``decode`` and ``token_strings``."""

    backend = ""
    traced = False  # has a traced pass (trace.py): the NumPy backend always, torch for the families it maps
    layers: int
    heads: int
    is_decoder: bool
    use_type_ids: bool  # the model is fed the tokenizer's token_type_ids

    def __init__(self, name: str, path: Path, config: dict[str, Any]):
        self.name = name
        self.path = Path(path)
        self.config = config
        self.model_type: str = config["model_type"]
        self.max_positions = max_positions(config, self.path)

    def __repr__(self) -> str:
        return (f"<Pretrained {self.name!r} {self.model_type} backend={self.backend} "
                f"layers={self.layers} heads={self.heads}>")

    @cached_property
    def has_pairs(self) -> bool:
        """The tokenizer has a sentence-pair format: a pair gets more special tokens than one text
        (BERT's [SEP] between, RoBERTa's </s></s>). False for decoders."""
        if self.is_decoder:
            return False
        one = sum(self._tokenize(["a"], None).special_tokens_mask)
        two = sum(self._tokenize(["a", "b"], None).special_tokens_mask)
        return two > one

    def encode(self, text: str, pair: str | None = None, *, truncate: bool = False, special: bool = True) -> Encoding:
        """``text`` (and ``pair``, as one input) tokenized by the model's own tokenizer, with the special
        tokens it adds (a Llama's <s>, BERT's [CLS] ... [SEP]) unless ``special`` is False (a text
        that already holds them, e.g. a rendered chat template)."""
        texts = [check_text(text)] + ([check_text(pair, "pair")] if pair is not None else [])
        if pair is not None and not self.has_pairs:
            kind = "a decoder, it reads one text" if self.is_decoder else "its tokenizer has no pair format"
            raise BadInput(f"model '{self.name}' takes no sentence pairs ({kind}): drop --pair")
        enc = self._tokenize(texts, None, special)
        truncated = False
        if len(enc.ids) > self.max_positions:
            if not truncate:
                raise too_long(len(enc.ids), self.max_positions, pair is not None)
            enc, truncated = self._tokenize(texts, self.max_positions, special), True
        if len(enc.ids) == 0:
            raise BadInput("the text gives no tokens: give the model something to read")
        return from_tokenizers(enc, texts, use_type_ids=self.use_type_ids, truncated=truncated, decoder=self.decoder_steps)

    def token_texts(self, ids: Sequence[int]) -> list[str]:
        """Each id's text (attncli.hf.text.token_text): " an" for "Ġan", a special token its own piece."""
        ids = [int(i) for i in ids]
        return token_texts(self.token_strings(ids), [i in self.special_ids for i in ids], self.decoder_steps)

    @cached_property
    def decoder_steps(self) -> list[dict[str, Any]]:
        """The tokenizer's decoder, step by step (attncli.hf.text.token_text): each token's text comes from it."""
        with tokenizer_errors(self.name, "describe its decoder"):
            return decoder_steps(getattr(self, "tokenizer", None))

    @cached_property
    def embed_limit(self) -> int:
        """Tokens per text for ``embed``: sentence-transformers' max_seq_length if the model has one."""
        st = _json(self.path / "sentence_bert_config.json").get("max_seq_length")
        return min(self.max_positions, st) if isinstance(st, int) and st > 0 else self.max_positions

    def embed(self, texts: Sequence[str], pooling: Sequence[str] = ("mean",)) -> np.ndarray:
        """(n, d * len(pooling)) float64: per text the ``pool`` of the last hidden state over its
        tokens (special tokens included, padding not), by default the mean, as sentence-transformers'
        mean pooling; not normalised."""
        if isinstance(texts, str):
            raise BadInput("embed() takes a list of texts, not one string")
        pooling = check_pooling(pooling)  # a bad mode fails before the forward pass
        encs = [self._tokenize([check_text(t)], self.embed_limit) for t in texts]
        if any(len(e.ids) == 0 for e in encs):
            raise BadInput("a text to embed gives no tokens")
        out: list[np.ndarray | None] = [None] * len(encs)
        order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
        for batch in length_batches([len(encs[i].ids) for i in order], self.heads):
            rows = [order[j] for j in batch]
            ids, type_ids, mask = self.padded([encs[i] for i in rows])  # (B, T) each
            hidden = self._last_hidden(ids, type_ids, mask).astype(np.float64)  # (B, T, d)
            pooled = pool(hidden, mask, pooling)  # (B, d * P)
            for row, i in enumerate(rows):
                out[i] = pooled[row]
        if not out:
            return np.zeros((0, self.hidden_size * len(pooling)), dtype=np.float64)
        return np.stack(out)  # (n, d)

    @property
    def pad_id(self) -> int:
        """The id padding is filled with: config.json's pad_token_id, else 0 (masked either way)."""
        pad = self.config.get("pad_token_id")
        return int(pad) if isinstance(pad, int) and not isinstance(pad, bool) and pad >= 0 else 0

    def padded(self, encs: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(B, T) ids, type ids and mask of encodings (each with ``ids`` and ``type_ids``), padded on
        the right with ``pad_id`` to the longest, T; the mask is False on padding."""
        T = max(len(e.ids) for e in encs)
        ids = np.full((len(encs), T), self.pad_id, dtype=np.int64)  # (B, T)
        type_ids = np.zeros((len(encs), T), dtype=np.int64)
        mask = np.zeros((len(encs), T), dtype=bool)
        for row, e in enumerate(encs):
            n = len(e.ids)
            ids[row, :n] = e.ids
            if self.use_type_ids:
                type_ids[row, :n] = e.type_ids
            mask[row, :n] = True
        return ids, type_ids, mask

    @property
    def hidden_size(self) -> int:
        c = self.config
        return int(c.get("hidden_size") or c.get("n_embd") or c.get("dim") or c.get("d_model") or 0)

    PROBE = "time flies like an arrow, and the cat sat on the mat"

    def check_tokenizer(self) -> None:
        """RuntimeFailure when the tokenizer knows none of a plain English sentence's words (every
        piece the unknown token, or no piece at all): what transformers builds for a model
        directory without tokenizer.json whose slow tokenizer's files are missing too."""
        enc = self._tokenize([self.PROBE], None)
        pieces = {i for i, s in zip(enc.ids, enc.special_tokens_mask) if not s}
        if len(pieces) <= 1:
            what = "gives no token" if not pieces else f"gives only {visible(self.token_strings(list(pieces))[0])!r}"
            raise RuntimeFailure(f"model '{visible(self.name)}': its tokenizer {what} for {self.PROBE!r}: the "
                                 "directory lacks the tokenizer's files (tokenizer.json, written by the tokenizer's "
                                 "save_pretrained)")

    @property
    def kv_heads(self) -> int:
        """Key-value heads: fewer than ``heads`` under grouped-query attention (Llama 3, Mistral,
        Qwen2, ...), where query head i reads key-value head ``kv_head(i)``; else ``heads``."""
        kv = self.config.get("num_key_value_heads")
        ok = isinstance(kv, int) and not isinstance(kv, bool) and 0 < kv <= self.heads and self.heads % kv == 0
        return int(kv) if ok else self.heads

    def kv_head(self, head: int) -> int:
        """The key-value head query head ``head`` reads (``head`` itself without grouped-query attention)."""
        return head // (self.heads // self.kv_heads)

    def check_decoder(self) -> None:
        if not self.is_decoder:
            raise BadInput(f"model '{self.name}' ({self.model_type}) is not a decoder: it predicts no next token")

    def check_layer(self, layer: int) -> None:
        if not isinstance(layer, (int, np.integer)) or not 0 <= layer < self.layers:
            raise BadInput(f"layer {layer} is out of range: model '{self.name}' has layers 0..{self.layers - 1}")

    def check_ids(self, ids: Sequence[int]) -> np.ndarray:
        arr = np.asarray(list(ids), dtype=np.int64)
        vocab = int(self.config.get("vocab_size") or 0)
        if arr.ndim != 1 or arr.size == 0:
            raise BadInput("give at least one token id")
        if arr.size > self.max_positions:
            raise BadInput(f"{arr.size} tokens is more than the model's limit of {self.max_positions}")
        if vocab and (arr.min() < 0 or arr.max() >= vocab):
            raise BadInput(f"token ids must lie in 0..{vocab - 1}")
        return arr

    # the model interface (attncli.model.interface) -------------------------------------------
    @cached_property
    def _reasons(self) -> dict[str, str]:
        """Capability -> "" when the model has it, else why not (hf/backends/capabilities.py)."""
        raise NotImplementedError

    @property
    def can(self) -> frozenset[str]:
        return frozenset(cap for cap, why in self._reasons.items() if not why)

    def why_not(self, capability: str) -> str:
        return self._reasons.get(capability, "lacks it")

    @property
    def vocab_size(self) -> int:
        """V, config.json's vocab_size (0 when it gives none)."""
        v = self.config.get("vocab_size")
        return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0

    @property
    def special_ids(self) -> frozenset[int]:
        """The ids config.json names for bos, eos and pad."""
        c = self.config
        return frozenset(int(c[k]) for k in ("bos_token_id", "eos_token_id", "pad_token_id")
                         if isinstance(c.get(k), int))

    def pieces(self, text: str) -> list[int]:
        return list(self._tokenize([check_text(text)], None, special=False).ids)

    def vocab_id(self, word: str) -> int | None:
        """The id of vocabulary entry ``word`` (a tokenizers.Tokenizer, or a transformers tokenizer on
        the torch backend), None when there is none; a tokenizer that fails is a damaged model."""
        tok = self.tokenizer
        with tokenizer_errors(str(self.name), "look up a token"):
            if hasattr(tok, "token_to_id"):
                return tok.token_to_id(word)
            found = tok.get_vocab().get(word) if hasattr(tok, "get_vocab") else None
        return None if found is None else int(found)

    # what a backend lacks: the one refusal (overridden where the backend has it)
    def trace_batch(self, encs: Sequence[Any], keep: Any = None, **kwargs: Any) -> list[Any]:
        raise BadInput(refusal(self, "batch", "a batched traced pass"))

    def rerun(self, ids: Sequence[int], layer: int, resid: np.ndarray, per_batch: Sequence[Any],
              position: int) -> np.ndarray:
        raise BadInput(refusal(self, "rerun", "a batch of resumed passes"))

    def float32_pass(self) -> Any:
        raise BadInput(refusal(self, "rerun", "a float32 batch of resumed passes"))

    def unembed(self, x: np.ndarray) -> np.ndarray:
        raise BadInput(refusal(self, "unembed", "unembedding"))

    def unembedding(self) -> np.ndarray:
        raise BadInput(refusal(self, "dla", "the unembedding matrix"))

    def unembedding_bias(self) -> np.ndarray | None:
        if "dla" not in self.can:
            raise BadInput(refusal(self, "dla", "the unembedding's bias"))
        return None  # the LM heads of attn's NumPy decoders (GPT-2, the Llama family) have no bias

    def final_norm_parts(self) -> tuple[str, np.ndarray, np.ndarray | None, float]:
        raise BadInput(refusal(self, "dla", "the final norm's parts"))

    def output_weight(self, layer: int) -> np.ndarray:
        raise BadInput(refusal(self, "output_weight", "a head's output weight"))

    def output_norm_parts(self, layer: int) -> tuple[str, np.ndarray, np.ndarray | None, float, Any] | None:
        raise BadInput(refusal(self, "dla", "the norm on a layer's attention output"))

    def tape(self, dtype: Any = np.float64, weights: list[dict[str, Any]] | None = None,
             unembedding: np.ndarray | None = None) -> DecoderTape | EncoderTape:
        """"tape": the recorder of attn's NumPy pass, hf/methods/backward.py's (GPT-2, the Llama family) or
        hf/methods/backward_encoder.py's (BERT's family with its MLM head); refused by name elsewhere (the
        torch backend, encoders without the head). ``weights``, ``unembedding``: a decoder tape's widened
        weights and unembedding (V, d), reused."""
        require(self, "tape", "gradients on a recorded forward pass")
        if not self.is_decoder:
            return EncoderTape(self, dtype)
        return DecoderTape(self, dtype, weights, unembedding)

    def site_gradients(self, ids: Sequence[int], position: int, d_metric: Any = None
                       ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
        """"grad": (each site's value, d metric / d each site (empty when ``d_metric`` is None), the
        logits at ``position``), float64, from the tape's pass of ``ids`` and its backward."""
        require(self, "grad", "gradients of a metric")
        tape = self.tape(np.float64)
        tape.forward(list(ids))
        row = tape.logits(position)
        values = {"embed": tape.embed}
        for l, t in enumerate(tape.layers):  # a post-LN encoder keeps its sublayers' outputs: normed between them
            values[f"blocks.{l}.resid_pre"] = t["x"]
            values[f"blocks.{l}.attn.z"] = t["z"]
            values[f"blocks.{l}.attn.out"] = t["attn_out"] if tape.post_ln else t["mid"] - t["x"]
            values[f"blocks.{l}.mlp.out"] = t["mlp_out"] if tape.post_ln else t["post"] - t["mid"]
        grads = {} if d_metric is None else tape.backward(position, d_metric(row))
        return values, grads, row

    # backend-specific ----------------------------------------------------------------------
    def _tokenize(self, texts: list[str], max_length: int | None, special: bool = True) -> Any:
        """A ``tokenizers.Encoding`` of one text or a pair, cut to ``max_length`` tokens if given,
        with the tokenizer's special tokens if ``special``."""
        raise NotImplementedError

    def _last_hidden(self, ids: np.ndarray, type_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        raise NotImplementedError
