"""Train W_q, W_k, W_v end to end: a small causal transformer language model on Brown, with torch.

torch is imported only inside the functions that need it. The model is the one ``model.py``
runs in NumPy (see its docstring for the equations): a pre-LayerNorm causal transformer whose
width is the word-vector dimension, torch's own ``nn.MultiheadAttention``, sinusoidal
positions, next-word prediction over the output vocabulary of ``data.py``.

The word vectors are frozen: the learned weights then belong to the stored vectors, so the
NumPy path re-creates the model's input exactly from the model itself (no (V, d) embedding
table to store), any word the vectors can embed (fastText subwords) is a valid input, and a
2-core CPU trains ~0.3M parameters instead of ~4M. A learned linear map W_in in front lets the
model rescale and rotate the frozen vectors.

Shapes: B sentences in a batch, T tokens, d width, V_out output vocabulary size.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from attncli.lm import data as lm_data, model as trained

from attncli.vectors import store
from attncli.errors import BadInput, RuntimeFailure


# Upper bounds of the options (TrainConfig.check_options): far above any useful value, low
# enough that no option overflows torch or NumPy or exhausts memory on its own.
MAX_LAYERS = 64
MAX_HEADS = 1_024
MAX_EPOCHS = 10_000
MAX_VOCAB_SIZE = 10_000_000
MAX_LEN = trained.MAX_LEN_TRAINED  # --max-len's bound: a stored max_len_trained is checked against it
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


@dataclass
class TrainResult:
    source: str
    name: str
    path: str
    attention: dict[str, Any] = field(default_factory=dict)


def _model_class():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d: int, h: int, d_ff: int, dropout: float):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.attn = nn.MultiheadAttention(d, h, dropout=dropout, batch_first=True)
            self.ln2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(approximate="tanh"), nn.Linear(d_ff, d))
            self.drop = nn.Dropout(dropout)

        def forward(self, x, mask, need_weights: bool = False):
            a = self.ln1(x)  # (B, T, d)
            y, w = self.attn(a, a, a, attn_mask=mask, need_weights=need_weights,
                             average_attn_weights=False, is_causal=not need_weights)  # (B, T, d), (B, h, T, T)
            x = x + self.drop(y)
            x = x + self.drop(self.mlp(self.ln2(x)))
            return x, w

    class CausalLM(nn.Module):
        """Frozen word vectors -> W_in + positions -> L blocks -> LN -> logits over V_out."""

        def __init__(self, table, d: int, layers: int, heads: int, d_ff: int, n_out: int, dropout: float, max_len: int):
            super().__init__()
            self.register_buffer("table", torch.as_tensor(table), persistent=False)  # (U, d) frozen
            self.register_buffer("pe", torch.as_tensor(trained.sinusoidal_positions(max_len, d)), persistent=False)
            self.input = nn.Linear(table.shape[1], d)
            self.blocks = nn.ModuleList(Block(d, heads, d_ff, dropout) for _ in range(layers))
            self.final_ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, n_out)
            self.drop = nn.Dropout(dropout)

        def forward(self, ids, need_weights: bool = False):
            T = ids.shape[1]
            x = self.drop(self.input(self.table[ids]) + self.pe[:T])  # (B, T, d)
            mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)  # (T, T)
            all_w = []
            for block in self.blocks:
                x, w = block(x, mask, need_weights)
                all_w.append(w)
            logits = self.head(self.final_ln(x))  # (B, T, V_out)
            return (logits, all_w) if need_weights else logits

    return CausalLM


def build_model(table: np.ndarray, cfg: TrainConfig, n_out: int, max_len: int):
    d = table.shape[1]
    return _model_class()(table, d, cfg.layers, cfg.heads, cfg.d_ff_mult * d, n_out, cfg.dropout, max_len)


def model_from_weights(table: np.ndarray, config: dict[str, Any], weights: dict[str, np.ndarray], max_len: int = 512):
    """A torch model carrying stored weights (the tests' reference for the NumPy path)."""
    import torch

    cfg = TrainConfig(layers=config["layers"], heads=config["heads"], d_ff_mult=config["d_ff"] // config["d_model"])
    model = build_model(table, cfg, config["output_vocab_size"], max_len)
    model.load_state_dict({k: torch.as_tensor(v) for k, v in weights.items()}, strict=True)
    return model.eval()


def auto_threads() -> int:
    """The cores not already busy (by the 1-minute load average), at least 1.

    On a shared machine this matters: with both cores busy elsewhere, 2 torch threads ran a
    training step 3x slower than 1 thread (they wait on each other at every operation).
    """
    cores = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cores
    return max(1, min(cores, int(cores - busy + 0.5)))


def _encode(sentences, token_index, vocab):
    """Per sentence: input ids into the token table (n,) and target output ids (n,)."""
    return [(np.array([token_index[w] for w in s], dtype=np.int64), vocab.targets(s)) for s in sentences]


def _batches(encoded, batch_tokens: int, rng: np.random.Generator | None):
    """Sentences grouped by length (little padding), about ``batch_tokens`` tokens per batch."""
    order = np.argsort([len(x) for x, _ in encoded], kind="stable")
    batches, cur, longest = [], [], 0
    for i in order:
        longest = max(longest, len(encoded[i][0]))
        if cur and longest * (len(cur) + 1) > batch_tokens:
            batches.append(cur)
            cur, longest = [], len(encoded[i][0])
        cur.append(i)
    if cur:
        batches.append(cur)
    if rng is not None:
        rng.shuffle(batches)
    return batches


def _pad(encoded, batch):
    import torch

    T = max(len(encoded[i][0]) for i in batch)
    ids = np.zeros((len(batch), T), dtype=np.int64)  # (B, T)
    tgt = np.full((len(batch), T), -100, dtype=np.int64)  # (B, T); -100 = padding, ignored
    for r, i in enumerate(batch):
        x, y = encoded[i]
        ids[r, : len(x)] = x
        tgt[r, : len(y)] = y
    return torch.from_numpy(ids), torch.from_numpy(tgt)


def evaluate(model, encoded, batch_tokens: int) -> tuple[float, int]:
    """Total negative log-likelihood (nats) and number of targets over ``encoded``."""
    import torch
    import torch.nn.functional as F

    model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for batch in _batches(encoded, batch_tokens, None):
            ids, tgt = _pad(encoded, batch)
            logits = model(ids)  # (B, T, V_out)
            total += float(F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=-100, reduction="sum"))
            n += int((tgt != -100).sum())
    return total, n


def _lr_at(cfg: TrainConfig, step: int, progress: float) -> float:
    """Linear warm-up, then cosine decay to 10% over ``progress`` in [0, 1] (steps or time, whichever is further)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def _diverged(cfg: TrainConfig, what: str) -> RuntimeFailure:
    """The error of a training run whose loss went to NaN or infinity (nothing is stored)."""
    return RuntimeFailure(
        f"training diverged: {what} (--lr {cfg.lr:g}); nothing was saved: try a lower --lr, "
        f"e.g. --lr {cfg.lr / 10:g} (the default is 3e-3)"
    )


def _fit(model, train_set, cfg: TrainConfig, rng: np.random.Generator, on_progress) -> dict[str, Any]:
    """The training loop: AdamW, warm-up + cosine schedule over steps or time, gradient clipping."""
    import torch
    import torch.nn.functional as F

    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.98))
    total_steps = len(_batches(train_set, cfg.batch_tokens, None)) * cfg.epochs
    budget = cfg.max_minutes * 60.0
    start = time.perf_counter()
    step, seen_tokens, stopped_early, loss_avg = 0, 0, False, None
    for epoch in range(cfg.epochs):
        model.train()
        for batch in _batches(train_set, cfg.batch_tokens, rng):
            elapsed = time.perf_counter() - start
            if elapsed > budget:
                stopped_early = True
                break
            for group in opt.param_groups:
                group["lr"] = _lr_at(cfg, step, max(step / total_steps, elapsed / budget))
            ids, tgt = _pad(train_set, batch)  # (B, T), (B, T)
            logits = model(ids)  # (B, T, V_out)
            loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=-100)
            loss_now = float(loss.detach())
            if not math.isfinite(loss_now):
                raise _diverged(cfg, f"the training loss became {loss_now} at step {step + 1}")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            seen_tokens += int((tgt != -100).sum())
            loss_avg = loss_now if loss_avg is None else 0.95 * loss_avg + 0.05 * loss_now
            if on_progress:
                on_progress(step=step, total=total_steps, epoch=epoch + 1, loss=loss_avg,
                            tokens_per_s=seen_tokens / max(time.perf_counter() - start, 1e-9))
        if stopped_early:
            break
    if step == 0:
        raise BadInput("--max-minutes left no time for a single training step: give it more time")
    return {"steps": step, "seen_tokens": seen_tokens, "stopped_early": stopped_early,
            "seconds": time.perf_counter() - start, "parameters": int(sum(p.numel() for p in params))}


INSTALL_TORCH = ("pip install 'attncli[torch]' (torch's CPU build first: "
                 "pip install torch --index-url https://download.pytorch.org/whl/cpu)")


def require_torch() -> None:
    """BadInput (exit 2) naming the extra when torch is not installed: said before the corpus is read."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise BadInput(f"training attention needs torch, which is not installed: {INSTALL_TORCH}")


def train(
    source: str | None,
    name: str | None,
    cfg: TrainConfig,
    *,
    on_progress: Callable[..., None] | None = None,
    documents=None,
) -> TrainResult:
    """Train attention over the vectors of model ``source`` and store it as model ``name``."""
    from attncli.vectors.model import load_vectors

    require_torch()

    from_env = source is None and bool(os.environ.get("ATTN_MODEL"))
    source = store.default_model_name() if source is None else source
    try:
        src_dir = _source_dir(source)
    except BadInput as exc:
        if from_env:
            raise BadInput(f"{exc} (the name comes from the ATTN_MODEL environment variable)") from None
        raise
    name = _destination(source, name)
    store.check_writable(name)  # before the corpus is read and the training starts
    if (store.paths.models_dir() / name / trained.SUBDIR / trained.CONFIG).exists():
        from attncli.messages import info

        info(f"model '{name}' already has trained attention: this training replaces it when it finishes "
             "(an interrupted or failed training keeps it)")
    meta = store.read_meta(src_dir)
    cfg.check(int(meta["dim"]))
    vectors = load_vectors(source)
    rng = np.random.default_rng(cfg.seed)
    split = lm_data.split_documents(documents if documents is not None else lm_data.brown_documents(),
                                    heldout_fraction=cfg.heldout, seed=cfg.seed, max_len=cfg.max_len,
                                    limit_sentences=cfg.limit_sentences)
    vocab = lm_data.OutputVocab.from_sentences(split.train, cfg.vocab_size)
    longest = max((len(s) for s in split.train + split.heldout), default=1)
    cfg.check_size(int(meta["dim"]), len(vocab), longest)
    tokens = sorted({w for s in split.train + split.heldout for w in s})
    token_index = {w: i for i, w in enumerate(tokens)}
    table = trained.input_vectors(vectors, tokens)  # (U, d)
    train_set = _encode(split.train, token_index, vocab)
    held_set = _encode(split.heldout, token_index, vocab)
    import torch  # after the checks: a bad option is reported without the 2-3 s torch import

    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads or auto_threads())
    model = build_model(table, cfg, len(vocab), cfg.max_len)
    fit = _fit(model, train_set, cfg, rng, on_progress)
    n_train_targets = sum(len(y) for _, y in train_set)

    nll, n_held = evaluate(model, held_set, cfg.batch_tokens)
    if not math.isfinite(nll) or nll / max(n_held, 1) > 700:  # exp(> 709) overflows a float
        raise _diverged(cfg, f"the held-out loss is {nll / max(n_held, 1):.4g} nats per word")
    record = {
        "perplexity": lm_data.perplexity(nll, n_held),
        **lm_data.baselines(split, vocab),
        "heldout_targets": n_held,
        "train_targets": n_train_targets,
        "train_sentences": len(split.train),
        "heldout_sentences": len(split.heldout),
        "train_documents": split.train_docs,
        "heldout_documents": split.heldout_docs,
        "output_vocab_size": len(vocab),
        "heldout_unk_rate": float(np.mean(np.concatenate([y for _, y in held_set]) == vocab.unk)) if held_set else 0.0,
        "layers": cfg.layers,
        "heads": cfg.heads,
        "d_model": int(table.shape[1]),
        "parameters": fit["parameters"],
        "epochs_done": round(fit["seen_tokens"] / max(n_train_targets, 1), 3),
        "steps": fit["steps"],
        "train_seconds": round(fit["seconds"], 1),
        "stopped_early": fit["stopped_early"],
        "threads": torch.get_num_threads(),
        "corpus": "brown",
        "split": f"by document, seed {cfg.seed}, {cfg.heldout:g} held out",
        "baselines": "unigram: add-one; bigram: interpolated Kneser-Ney, same split and output vocabulary",
        "input": "frozen word vectors of the model",
        "config": asdict(cfg),
    }
    weights = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    config = {
        "format": trained.FORMAT,
        "format_version": trained.FORMAT_VERSION,
        "d_model": int(table.shape[1]),
        "layers": cfg.layers,
        "heads": cfg.heads,
        "d_ff": cfg.d_ff_mult * int(table.shape[1]),
        "output_vocab_size": len(vocab),
        "positions": "sinusoidal",
        "norm": "pre-layernorm",
        "activation": "gelu_tanh",
        "layer_norm_eps": 1e-5,
        "max_len_trained": cfg.max_len,
        "vectors_model": source,
        "vectors_dim": int(meta["dim"]),
        "vectors_vocab_size": int(meta["vocab_size"]),
        "vectors_sha256": trained.vectors_sha256(src_dir),
        "training": record,
    }
    keep = rng.permutation(len(split.heldout))[: cfg.heldout_keep]
    heldout_text = [" ".join(split.heldout[i]) for i in sorted(keep)]
    summary = _summary(record)
    path = save(name, src_dir, config, weights, vocab.words, heldout_text, dict(meta, attention=summary))
    return TrainResult(source, name, str(path), summary)


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    keys = ["perplexity", "bigram_perplexity", "unigram_perplexity", "bigram_discount", "heldout_targets",
            "train_targets", "output_vocab_size", "heldout_unk_rate", "layers", "heads", "d_model", "parameters",
            "epochs_done", "steps", "train_seconds", "stopped_early", "threads", "corpus", "split", "baselines", "input"]
    return {k: record[k] for k in keys}


def save(name: str, src_dir: Path, config, weights, output_words, heldout_lines, meta) -> Path:
    """Copy model ``src_dir`` into ``name`` with a new attention/ and ``meta``; one atomic swap."""
    import shutil

    with store.writing_model(name, start_from=src_dir.resolve()) as tmp:
        att = tmp / trained.SUBDIR
        if att.exists():
            shutil.rmtree(att)
        att.mkdir()
        with open(att / trained.WEIGHTS, "wb") as fh:
            np.savez(fh, **weights)
            fh.flush()
            os.fsync(fh.fileno())
        (att / trained.OUTPUT_VOCAB).write_text("\n".join(output_words) + "\n", encoding="utf-8")
        (att / trained.HELDOUT).write_text("\n".join(heldout_lines) + "\n", encoding="utf-8")
        store.write_json(att / trained.CONFIG, config)
        store.write_json(tmp / "meta.json", dict(meta, name=name))
    return store.paths.models_dir() / name


def _source_dir(source: str) -> Path:
    if source == store.BUILTIN and not (store.builtin_dir() / "meta.json").is_file():
        raise BadInput(
            "no word-vector model to start from: the built-in default model is not installed; "
            "train one with 'attn train --name NAME', then 'attn train-attention --model NAME'"
        )
    return store.model_dir(source)


def _destination(source: str, name: str | None) -> str:
    if name is None:
        if source == store.BUILTIN:
            raise BadInput(
                "the built-in model is read-only: give --name NEW to copy its vectors into a new "
                "user model that keeps the trained attention"
            )
        name = source
    return store.check_new_name(name)
