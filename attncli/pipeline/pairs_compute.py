"""``--pairs FILE`` for ``attn ablate``, ``patch``, ``attribute`` and ``circuit``: the single-pair
computation (attncli.causal.pair_sums) run over every pair of a JSONL file, in chunks planned,
resumed and run (here, in ``--workers`` processes, or on ``--ray``) by ``attn stats``'s runner
(attncli.stats.runner, attncli.stats.cluster), each chunk's sums a shard (attncli.pipeline.pairs_shards),
the mean over the pairs made from the added sums::

    from attncli.pipeline.pairs_compute import PairsRun, compute_pairs
    doc = compute_pairs(PairsRun("pairs.jsonl", kind="patch", site="head"))   # the --json document
    doc["grid"]                # (layers, heads): the fraction of the mean clean - corrupt difference restored
    doc["mean"]["grid"]        # (layers, heads): the mean of each pair's own restored fraction

    pairs file -> check every pair (tokens, target) -> the chunks (stats.runner.chunks: a chunk
    whose shard is in --out is read, not computed) -> each chunk's sums -> added -> the document
"""

from __future__ import annotations

import hashlib
import json
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, Optional, Union

import numpy as np

from attncli.io import faultpoints
from attncli.causal.pair_sums import PairSums, PairsJob, check_pairs, encoded, pair_values
from attncli.causal.circuit import check_faithfulness
from attncli.causal.pairs_circuit import find_pairs_circuit
from attncli.causal.pairs_file import Pair, read_pairs
from attncli.errors import BadInput, RuntimeFailure
from attncli.io.fileio import FileProblem
from attncli.hf.methods.edges import edge_mask
from attncli.hf.loader import load
from attncli.stats.chunk_work import ModelSpec, bounded
from attncli.stats.cluster import host_port, ray_results
from attncli.stats.runner import Plan, chunks, existing_shards, local_pool, pool_get, process_chunk
from attncli.stats.shards import Identity, model_fingerprint, shard_folder, texts_digest, write_shard
from attncli.pipeline.pairs_document import pairs_document
from attncli.pipeline.pairs_shards import (PAIRS_VERSION, MergedPairs, added, merge_pair_shards, read_pairs_shard,
                                          to_document)
from attncli.tinylm.traced import load_builtin

SHARD_PAIRS = 64  # pairs per shard by default
LIMITS = {"shard_pairs": (1, 100_000), "workers": (1, 256)}


@dataclass(frozen=True)
class PairsRun:
    """What a --pairs run asks for: the file, the job (attncli.causal.pair_sums.PairsJob's fields),
    the model, where the shards go and how the chunks run."""
    pairs: Union[str, Path]
    kind: str
    site: str = "resid"
    qk_fix: bool = True
    steps: int = 1
    faithfulness: float = 0.9  # circuit: the fraction of the mean difference its circuit keeps (not in the shards)
    transformer: Optional[str] = None  # None: attn's built-in LM (ablate, patch)
    backend: str = "auto"
    allow_missing_weights: bool = False
    out: Optional[Union[str, Path]] = None
    shard_pairs: int = SHARD_PAIRS
    workers: int = 1
    ray: Optional[str] = None

    @property
    def job(self) -> PairsJob:
        return PairsJob(self.kind, self.site, self.qk_fix, self.steps)

    def check(self) -> None:
        self.job.check()
        check_faithfulness(self.faithfulness)
        for name, (lo, hi) in LIMITS.items():
            if not lo <= getattr(self, name) <= hi:
                raise BadInput(f"--{name.replace('_', '-')} must be between {lo:,} and {hi:,} (got {getattr(self, name)})")
        if self.ray is not None:
            host_port(self.ray)
        if self.kind in ("attribute", "circuit") and not self.transformer:
            raise BadInput("give the model with --transformer NAME (a hub id or a directory: GPT-2 or the Llama family)")

    @property
    def spec(self) -> ModelSpec:
        return ModelSpec(self.transformer or "", "numpy" if self.kind == "circuit" else self.backend,
                         self.allow_missing_weights)


def load_pairs_model(spec: ModelSpec):
    """The model of a run: the checkpoint ``spec.name`` names, or attn's built-in LM (name "")."""
    if not spec.name:
        return load_builtin()
    return load(spec.name, backend=spec.backend, allow_missing_weights=spec.allow_missing_weights)


def fingerprint(model: Any) -> str:
    """The model's identity: its files' (attncli.stats.shards.model_fingerprint) where it has a
    folder, else (the built-in LM) a digest of its logits on a fixed text, which every weight moves."""
    if model.backend != "builtin":  # a checkpoint, read from its folder
        try:
            return model_fingerprint(model.path)
        except FileProblem as exc:
            raise RuntimeFailure(f"model '{model.name}': a file cannot be read to fingerprint it: {exc}") from None
    logits = model.trace(list(model.encode("the cat sat on the mat").ids), "logits")["logits"]
    return hashlib.sha256(np.ascontiguousarray(logits, dtype=np.float64).tobytes()).hexdigest()


def identity(model: Any, job: PairsJob, tokens: Optional[int], contrast: bool) -> Identity:
    """The model and the settings every shard of the run shares: the job, the token count of a
    grid over positions, the metric (log p, or a logit difference when the pairs have contrasts)."""
    return Identity({"name": str(model.name), "fingerprint": fingerprint(model), "model_type": model.model_type,
                     "layers": int(model.layers), "heads": int(model.heads), "causal": bool(model.is_decoder)},
                    {**job.settings(), "tokens": tokens, "metric": "logit_diff" if contrast else "log_prob"})


def _pair_of(key: str) -> Pair:
    return Pair(*json.loads(key))


def _key(pair: Pair) -> str:
    """A pair as the runner's text: its line, its four strings and any token ids (what a shard's digest covers)."""
    return json.dumps([pair.line, pair.clean, pair.corrupt, pair.target, pair.contrast, *pair.ids()], ensure_ascii=False)


class PairsWork:
    """A loaded model and the job: a chunk of pairs -> its shard document."""

    def __init__(self, model: Any, job: PairsJob, ident: Identity):
        self.model, self.job, self.ident = model, job, ident

    def compute(self, start: int, texts: list[str]) -> dict[str, Any]:
        sums = PairSums()
        for values in pair_values(self.model, self.job, [_pair_of(key) for key in texts]):  # attribute: batched
            sums.add(values)
        return to_document(sums, self.ident, start, start + len(texts), texts_digest(texts))


def load_pairs_work(spec: ModelSpec, job: PairsJob, ident: Identity) -> PairsWork:
    """A worker's PairsWork, its model checked to be the one the run started on."""
    model = load_pairs_model(spec)
    if fingerprint(model) != ident.model["fingerprint"]:
        raise RuntimeFailure(f"the model a worker loaded ({spec.name or 'the built-in LM'}) is not the one the run "
                             "started on (another copy or version on that machine)")
    return PairsWork(model, job, ident)


@dataclass
class PairsOutcome:
    sums: PairSums
    ident: Identity
    ranges: list[tuple[int, int]]
    computed: int
    ran: dict[str, Any]


def run_pairs(model: Any, pairs: list[Pair], run: PairsRun, *, on_shard: Optional[Callable[[int], None]] = None
              ) -> PairsOutcome:
    """The sums over ``pairs`` (checked by ``check_pairs`` first), chunk by chunk as ``attn stats``
    runs a corpus: a shard per chunk in ``run.out``, the ones already there read instead."""
    job = run.job
    tokens = check_pairs(model, pairs, job)
    ident = identity(model, job, tokens, pairs[0].has_contrast)
    out = None if run.out is None else Path(run.out)
    existing = existing_shards(out, ident, read=read_pairs_shard, version=PAIRS_VERSION) if out is not None else {}
    plan = Plan()
    todo = chunks(iter([_key(p) for p in pairs]), plan, shard_texts=run.shard_pairs, max_texts=None,
                  max_tokens=None, existing=existing, count_tokens=lambda t: 0)
    ran: dict[str, Any] = {"on": "ray" if run.ray else "processes" if run.workers > 1 else "here",
                           "workers": run.workers}
    spec = run.spec

    def results() -> Iterator[dict[str, Any]]:
        if run.ray is not None:
            yield from ray_results(run.ray, todo, spec, job, ident, run.workers, ran, loader=load_pairs_work)
        elif run.workers > 1:
            pool = local_pool(run.workers, spec, job, ident, loader=load_pairs_work)
            try:
                yield from bounded(todo, lambda s, t: pool.apply_async(process_chunk, (s, t)), pool_get, 2 * run.workers)
            finally:
                pool.terminate()
                pool.join()
        else:
            work = PairsWork(model, job, ident)
            yield from bounded(todo, lambda s, t: (s, t), lambda st: work.compute(*st), 1)

    docs: list[dict[str, Any]] = []
    computed = 0
    for doc in results():
        docs += plan.done
        plan.done.clear()
        if out is not None:
            write_shard(out, doc)
            faultpoints.pause_at("pairs-shard-written")
        computed += 1
        docs.append(doc)
        if on_shard is not None:
            on_shard(doc["end"] - doc["start"])
    docs += plan.done
    return PairsOutcome(added(docs), ident, sorted((d["start"], d["end"]) for d in docs), computed, ran)


Stage = Callable[[str], ContextManager[Any]]


def compute_pairs(run: PairsRun, model: Any = None, *, stage: Optional[Stage] = None) -> dict[str, Any]:
    """The --json document of ``run`` (attncli.pipeline.pairs_document)."""
    run.check()
    pairs = read_pairs(run.pairs)
    if run.out is not None:
        shard_folder(Path(run.out))
    if model is None:
        model = load_pairs_model(run.spec)
    around = stage or (lambda message: nullcontext())
    with around(f"{run.kind} over {len(pairs):,} pairs"):
        outcome = run_pairs(model, pairs, run)
    circuit = None
    if run.kind == "circuit":  # the circuit of the merged mean scores, every pair patched at each step
        sums = outcome.sums
        steps = int(np.ceil(np.log2(int(edge_mask(model.layers, model.heads).sum()) + 1)))  # the search's, at most
        with around(f"the circuit over {len(pairs):,} pairs: up to {steps} steps x {len(pairs):,} edge-patched passes"):
            circuit = find_pairs_circuit(model, [encoded(model, p, run.job) for p in pairs], sums.mean("scores"),
                                         float(sums.mean("clean")), float(sums.mean("corrupt")),
                                         faithfulness=run.faithfulness)
    return pairs_document(model, run, outcome.sums, outcome.ident, outcome.ranges, computed=outcome.computed,
                          ran=outcome.ran, circuit=circuit)


def merge_pairs(folders: list[Path], *, skip_damaged: bool = False) -> MergedPairs:
    """The shards of several --pairs runs (folders or files) added up exactly; a damaged one stops
    the merge (RuntimeFailure naming it) unless ``skip_damaged`` (then ``.damaged`` counts it)."""
    return merge_pair_shards(folders, skip_damaged=skip_damaged)
