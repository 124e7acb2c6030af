"""The options of ``attn train-attention`` (``TrainConfig``) and their bounds, checked before
the corpus is read and before torch is imported: a mistyped number is a BadInput naming the
option, never an overflow in torch or NumPy or a machine out of memory."""

from __future__ import annotations

from dataclasses import dataclass

from attncli.errors import BadInput
from attncli.tinylm.checkpoint import MAX_LEN_TRAINED

# Upper bounds of the options (TrainConfig.check_options): far above any useful value, low
# enough that no option overflows torch or NumPy or exhausts memory on its own.
MAX_LAYERS = 64
MAX_HEADS = 1_024
MAX_EPOCHS = 10_000
MAX_VOCAB_SIZE = 10_000_000
MAX_LEN = MAX_LEN_TRAINED  # --max-len's bound: a stored max_len_trained is checked against it
MAX_BATCH_TOKENS = 10_000_000
MAX_LR = 10.0
MAX_MINUTES = 7 * 24 * 60  # 7 days
MAX_LIMIT_SENTENCES = 10**9
MAX_THREADS = 1_024
# Memory guards once the data is known (TrainConfig.check_size).
MAX_PARAMETERS = 100_000_000  # ~1.6 GB with AdamW's two moments and the gradients
MAX_BATCH_CELLS = 2**28  # float32 logits + attention weights of one batch: 1 GiB per copy


@dataclass
class TrainConfig:
    layers: int = 2
    heads: int = 4
    epochs: int = 5
    max_minutes: float = 12.0
    seed: int = 0
    vocab_size: int = 5000
    max_len: int = 80
    batch_tokens: int = 2048
    lr: float = 3e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    dropout: float = 0.0
    d_ff_mult: int = 4
    heldout: float = 0.1
    limit_sentences: int | None = None
    threads: int | None = None
    heldout_keep: int = 300  # held-out sentences stored for 'attn heads'

    def check_options(self) -> None:
        """BadInput (exit 2) naming the option for a value out of range; needs no model, imports no torch.

        The upper bounds are far above any useful value; they keep a mistyped number from
        overflowing torch or NumPy or exhausting memory (``MAX_*`` below).
        """
        if self.layers < 1:
            raise BadInput(f"--layers must be at least 1 (got {self.layers})")
        if self.heads < 1:
            raise BadInput(f"--heads must be at least 1 (got {self.heads})")
        for name, value, low in [("--epochs", self.epochs, 1), ("--vocab-size", self.vocab_size, 2),
                                 ("--max-len", self.max_len, 2), ("--batch-tokens", self.batch_tokens, 16)]:
            if value < low:
                raise BadInput(f"{name} must be at least {low} (got {value})")
        optional = [("--limit-sentences", self.limit_sentences, 2, MAX_LIMIT_SENTENCES),
                    ("--threads", self.threads, 1, MAX_THREADS)]
        for name, value, low, high in optional:
            if value is not None and value < low:
                raise BadInput(f"{name} must be at least {low} (got {value})")
        bounded = [("--layers", self.layers, 1, MAX_LAYERS), ("--heads", self.heads, 1, MAX_HEADS),
                   ("--epochs", self.epochs, 1, MAX_EPOCHS), ("--vocab-size", self.vocab_size, 2, MAX_VOCAB_SIZE),
                   ("--max-len", self.max_len, 2, MAX_LEN), ("--batch-tokens", self.batch_tokens, 16, MAX_BATCH_TOKENS)]
        for name, value, low, high in bounded + [o for o in optional if o[1] is not None]:
            if value > high:
                raise BadInput(f"{name} must be in [{low}, {high:,}] (got {value})")
        if not 0 <= self.seed < 2**32:
            raise BadInput(f"--seed must be in [0, 2^32) (got {self.seed})")
        if self.max_minutes <= 0:
            raise BadInput(f"--max-minutes must be positive (got {self.max_minutes})")
        if not 0 < self.max_minutes <= MAX_MINUTES:  # also NaN and infinity
            raise BadInput(f"--max-minutes must be a number in (0, {MAX_MINUTES}] (7 days) (got {self.max_minutes})")
        if not 0 <= self.dropout < 1:
            raise BadInput(f"--dropout must be in [0, 1) (got {self.dropout})")
        if not 0 < self.heldout < 1:
            raise BadInput(f"--heldout must be between 0 and 1 (got {self.heldout})")
        if self.lr <= 0:
            raise BadInput(f"--lr must be positive (got {self.lr})")
        if not 0 < self.lr <= MAX_LR:  # also NaN and infinity
            raise BadInput(f"--lr must be a number in (0, {MAX_LR:g}] (got {self.lr}); the default is 3e-3")

    def check(self, d: int) -> None:
        """``check_options`` plus what depends on the width ``d`` of the word vectors."""
        self.check_options()
        if d % self.heads:
            divisors = ", ".join(str(h) for h in range(1, d + 1) if d % h == 0)
            raise BadInput(f"--heads {self.heads} does not divide the width {d} (the word-vector dimension): use one of {divisors}")

    def check_size(self, d: int, n_out: int, longest: int) -> None:
        """BadInput if the model or a batch would not fit in memory (once the data's sizes are known).

        ``n_out`` is the output vocabulary's size, ``longest`` the longest sentence (tokens).
        """
        d_ff = self.d_ff_mult * d
        params = d * d + self.layers * (4 * d * d + 2 * d * d_ff) + d * n_out  # W_in, blocks, head (biases aside)
        if params > MAX_PARAMETERS:
            raise BadInput(
                f"--layers {self.layers} at width {d} with an output vocabulary of {n_out:,} words makes "
                f"{params:,} parameters (at most {MAX_PARAMETERS:,}): lower --layers or --vocab-size"
            )
        T = min(longest, self.max_len)
        cells = max(self.batch_tokens, T) * (n_out + self.layers * self.heads * T)  # logits + attention weights
        if cells > MAX_BATCH_CELLS:
            raise BadInput(
                f"--batch-tokens {self.batch_tokens} is too large for this model: a batch would hold about "
                f"{cells:,} logits and attention weights (at most {MAX_BATCH_CELLS:,}): lower --batch-tokens "
                "(or --vocab-size, --layers, --heads)"
            )
