"""Encoder-decoders (T5, BART, ...) on the torch backend: the attention of their three stacks.

bertviz's three views of one (source, target) pair, ``S`` source tokens and ``T`` decoder tokens:

    encoder  (L_enc, h_enc, S, S)  the encoder's self-attention over the source
    decoder  (L_dec, h_dec, T, T)  the decoder's causal self-attention over its input
    cross    (L_dec, h_dec, T, S)  decoder queries (the target's tokens) over encoder keys (the source's)

The decoder's input is what transformers feeds it when a model is given ``labels``: the target
tokenized by the model's own tokenizer as labels (``text_target=``, with its special tokens: T5's
and BART's final ``</s>``, BART's leading ``<s>``), shifted one place right, the config's
``decoder_start_token_id`` in front and the last label dropped (``shift_tokens_right``; T5's
``_shift_right``). Row t of the decoder and cross views is the query that predicts label t.

Without a target the model reads like an encoder (BERT family): ``attentions`` is the encoder's
self-attention and ``embed`` pools the encoder's last hidden state, so ``attn heads`` and
``attn explore`` read the encoder stack. torch and transformers are imported by the torch backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attncli.errors import BadInput, RuntimeFailure
from attncli.io.textio import visible
from attncli.hf.text.encoding import Encoding, check_text, from_tokenizers, tokenizer_errors, too_long
from attncli.hf.backends.torch_backend import TorchPretrained, first_line
from attncli.hf.checks.weight_check import check_finite

STACKS = ("encoder", "decoder", "cross")
NO_SCORES = ("--show scores / norms read q, k and v of an encoder or decoder (BERT and GPT-2 families); "
             "for an encoder-decoder (T5, BART) they are not implemented: use --show weights")


@dataclass(frozen=True)
class Stack:
    """What the view code reads of a model (``attncli.attention.checkpoint_views.view_meta``, the
    model view and the page), for one stack of an encoder-decoder."""

    name: str
    model_type: str
    backend: str
    stack: str
    layers: int
    heads: int
    is_decoder: bool  # causal: the decoder's self-attention

    @property
    def kv_heads(self) -> int:
        return self.heads

    def kv_head(self, head: int) -> int:
        return head


class Seq2SeqPretrained(TorchPretrained):
    """An encoder-decoder loaded through transformers (eager attention, no code from the model)."""

    encoder_decoder = True

    def __init__(self, name: str, path: Path, config: dict[str, Any], **kwargs: Any):
        super().__init__(name, path, config, **kwargs)
        cfg = self.model.config
        if not all(isinstance(getattr(self.model, part, None), self.torch.nn.Module) for part in ("encoder", "decoder")):
            raise RuntimeFailure(f"damaged model: config.json: is_encoder_decoder is true, but transformers builds a "
                                 f"{type(self.model).__name__} for model_type '{visible(self.model_type)}', "
                                 "which has no encoder and decoder")
        self.is_decoder = False  # without a target it reads as an encoder
        self.decoder_layers = _count(cfg, "num_decoder_layers", "decoder_layers", default=self.layers)
        self.decoder_heads = _count(cfg, "decoder_attention_heads", default=self.heads)
        start = getattr(cfg, "decoder_start_token_id", None)
        vocab = int(getattr(cfg, "vocab_size", 0) or 0)
        if not (isinstance(start, int) and not isinstance(start, bool) and 0 <= start < max(vocab, 1)):
            raise RuntimeFailure(f"damaged model: config.json: decoder_start_token_id {visible(repr(start))} is not a "
                                 f"token id of the vocabulary (0..{vocab - 1}): the decoder has no first input")
        self.decoder_start = start
        self._last: tuple[tuple, dict[str, np.ndarray]] | None = None

    def stack(self, stack: str) -> Stack:
        if stack not in STACKS:
            raise BadInput(f"--stack {visible(stack)}: choose one of {', '.join(STACKS)}")
        layers, heads = (self.layers, self.heads) if stack == "encoder" else (self.decoder_layers, self.decoder_heads)
        return Stack(self.name, self.model_type, self.backend, stack, layers, heads, stack == "decoder")

    def encode_target(self, target: str, *, truncate: bool = False) -> Encoding:
        """The decoder's input (see the module docstring): the labels of ``target`` shifted right."""
        check_text(target, "target")
        if not target.strip():
            raise BadInput("the --target text is empty: give the decoder's text, e.g. --target \"le chat\"")
        kwargs: dict[str, Any] = dict(truncation=True, max_length=self.max_positions) if truncate else {}
        with tokenizer_errors(self.name, "split the target into tokens"):
            batch = self.tokenizer(text_target=target, return_special_tokens_mask=True,
                                   return_offsets_mapping=self.tokenizer.is_fast, **kwargs)
        if not (self.tokenizer.is_fast and batch.encodings):
            raise BadInput(f"model '{visible(self.name)}' has no fast tokenizer (tokenizer.json): the target's "
                           "words cannot be traced")
        labels = from_tokenizers(batch.encodings[0], [target], use_type_ids=False, decoder=self.decoder_steps)
        if len(labels.ids) > self.max_positions:
            raise too_long(len(labels.ids), self.max_positions, False)
        if not labels.ids:
            raise BadInput("the --target text gives no tokens: give the decoder something to read")
        start = self.token_strings([self.decoder_start])[0]
        return Encoding(ids=[self.decoder_start] + labels.ids[:-1], tokens=[start] + labels.tokens[:-1],
                        segments=[None] + labels.segments[:-1], special=[True] + labels.special[:-1],
                        word_ids=[None] + labels.word_ids[:-1], words=labels.words, type_ids=[0] * len(labels.ids),
                        text=target, truncated=bool(truncate and len(batch.encodings[0].overflowing)),
                        texts=[start] + (labels.texts or labels.tokens)[:-1])

    def stack_attentions(self, enc: Encoding, target: Encoding) -> dict[str, np.ndarray]:
        """The three stacks' attentions (module docstring), float64, from one eager forward pass."""
        key = (tuple(enc.ids), tuple(target.ids))
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        torch = self.torch
        ids = torch.tensor([enc.ids], dtype=torch.long, device=self.device)  # (1, S)
        dec = torch.tensor([target.ids], dtype=torch.long, device=self.device)  # (1, T)
        out = self._forward({"input_ids": ids, "attention_mask": torch.ones_like(ids), "decoder_input_ids": dec},
                            output_attentions=True, use_cache=False)
        S, T = len(enc.ids), len(target.ids)
        stacks = {"encoder": self._stack_of(out, "encoder_attentions", (self.layers, self.heads, S, S)),
                  "decoder": self._stack_of(out, "decoder_attentions", (self.decoder_layers, self.decoder_heads, T, T)),
                  "cross": self._stack_of(out, "cross_attentions", (self.decoder_layers, self.decoder_heads, T, S))}
        self._last = (key, stacks)
        return stacks

    def _stack_of(self, out: Any, field: str, shape: tuple[int, int, int, int]) -> np.ndarray:
        tensors = getattr(out, field, None)
        if tensors is None or len(tensors) != shape[0] or any(a is None for a in tensors):
            raise RuntimeFailure(f"model '{visible(self.name)}' returned no {field} for its {shape[0]} layers: its "
                                 "attention implementation cannot return weights")
        stacked = np.stack([a[0].float().cpu().numpy() for a in tensors]).astype(np.float64)  # (L, h, R, C)
        if stacked.shape != shape:
            raise RuntimeFailure(f"model '{visible(self.name)}' returned {field} of shape {stacked.shape}, expected {shape}")
        for layer, weights in enumerate(stacked):
            check_finite(weights, f"layer {layer}'s {field.replace('_', ' ')}")
        return stacked

    def attentions(self, enc: Encoding) -> np.ndarray:
        """(L_enc, h_enc, S, S): the encoder's self-attention alone (no target needed)."""
        if not isinstance(enc, Encoding) or not enc.ids:
            raise BadInput("attentions() takes an Encoding from encode()")
        ids = np.asarray([enc.ids])
        out = self._encoder(ids, np.ones_like(ids, dtype=bool), output_attentions=True)
        S = len(enc.ids)
        return self._stack_of(out, "attentions", (self.layers, self.heads, S, S))

    def _last_hidden(self, ids: np.ndarray, type_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """(B, S, d): the encoder's last hidden state (what ``embed`` pools)."""
        hidden = self._encoder(ids, mask).last_hidden_state.float().cpu().numpy()
        check_finite(hidden, "the encoder's output")
        return hidden

    def _encoder(self, ids: np.ndarray, mask: np.ndarray, **flags: bool) -> Any:
        """The encoder stack alone on ``ids`` (B, S)."""
        with self.torch.inference_mode():
            try:
                return self.model.get_encoder()(**self._inputs(ids, None, mask), **flags)
            except (RuntimeError, ValueError, TypeError, IndexError) as exc:
                raise RuntimeFailure(f"model '{visible(self.name)}' failed to run: {first_line(exc)}") from None

    def scores(self, enc: Encoding, layer: int) -> np.ndarray:
        raise BadInput(NO_SCORES)

    def value_vectors(self, enc: Encoding, layer: int) -> tuple[np.ndarray, np.ndarray]:
        raise BadInput(NO_SCORES)


def _count(cfg: Any, *fields: str, default: int) -> int:
    for field in fields:
        value = getattr(cfg, field, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default
