"""Train W_q, W_k, W_v end to end: a small causal transformer language model on Brown, with torch.

torch is imported only inside the functions that need it. This file reads the data, runs the
loop and stores the result; the torch model is ``torch_model.py``, the loop ``training_loop.py``,
the options and their bounds ``train_config.py``. The model is the one ``model.py`` runs in NumPy (see its docstring for the equations): a pre-LayerNorm causal transformer whose
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from attncli.env import extras
from attncli.io import messages
from attncli.errors import BadInput
from attncli.tinylm import checkpoint, data as lm_data
from attncli.tinylm.model import input_vectors
from attncli.tinylm.torch_model import build_model
from attncli.tinylm.train_config import TrainConfig
from attncli.tinylm.training_loop import auto_threads, diverged, encode, evaluate, fit
from attncli.vectors import store
from attncli.vectors.model import load_vectors


@dataclass
class TrainResult:
    source: str
    name: str
    path: str
    attention: dict[str, Any] = field(default_factory=dict)


def require_torch() -> None:
    """BadInput (exit 2) naming the extra when torch is not installed: said before the corpus is read."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise BadInput(f"training attention needs torch, which is not installed: "
                       f"{extras.install_command('torch')} ({extras.TORCH_CPU})")


def train(
    source: str | None,
    name: str | None,
    cfg: TrainConfig,
    *,
    on_progress: Callable[..., None] | None = None,
    documents=None,
) -> TrainResult:
    """Train attention over the vectors of model ``source`` and store it as model ``name``."""
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
    if (store.paths.models_dir() / name / checkpoint.SUBDIR / checkpoint.CONFIG).exists():
        messages.info(f"model '{name}' already has trained attention: this training replaces it when it finishes "
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
    table = input_vectors(vectors, tokens)  # (U, d)
    train_set = encode(split.train, token_index, vocab)
    held_set = encode(split.heldout, token_index, vocab)
    import torch  # after the checks: a bad option is reported without the 2-3 s torch import

    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads or auto_threads())
    model = build_model(table, cfg, len(vocab), cfg.max_len)
    run = fit(model, train_set, cfg, rng, on_progress)
    n_train_targets = sum(len(y) for _, y in train_set)

    nll, n_held = evaluate(model, held_set, cfg.batch_tokens)
    if not math.isfinite(nll) or nll / max(n_held, 1) > 700:  # exp(> 709) overflows a float
        raise diverged(cfg, f"the held-out loss is {nll / max(n_held, 1):.4g} nats per word")
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
        "parameters": run["parameters"],
        "epochs_done": round(run["seen_tokens"] / max(n_train_targets, 1), 3),
        "steps": run["steps"],
        "train_seconds": round(run["seconds"], 1),
        "stopped_early": run["stopped_early"],
        "threads": torch.get_num_threads(),
        "corpus": "brown",
        "split": f"by document, seed {cfg.seed}, {cfg.heldout:g} held out",
        "baselines": "unigram: add-one; bigram: interpolated Kneser-Ney, same split and output vocabulary",
        "input": "frozen word vectors of the model",
        "config": asdict(cfg),
    }
    weights = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    config = {
        "format": checkpoint.FORMAT,
        "format_version": checkpoint.FORMAT_VERSION,
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
        "vectors_sha256": checkpoint.vectors_sha256(src_dir),
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
        att = tmp / checkpoint.SUBDIR
        if att.exists():
            shutil.rmtree(att)
        att.mkdir()
        with open(att / checkpoint.WEIGHTS, "wb") as fh:
            np.savez(fh, **weights)
            fh.flush()
            os.fsync(fh.fileno())
        (att / checkpoint.OUTPUT_VOCAB).write_text("\n".join(output_words) + "\n", encoding="utf-8")
        (att / checkpoint.HELDOUT).write_text("\n".join(heldout_lines) + "\n", encoding="utf-8")
        store.write_json(att / checkpoint.CONFIG, config)
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
