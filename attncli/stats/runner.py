"""A corpus's head statistics: chunks of texts planned in order, computed here, in local worker
processes or as Ray tasks, each chunk's sums written as a shard, then merged.

With an output folder, a chunk whose shard is already there (same model, settings and texts) is
not computed again, and a chunk never overlaps a shard already in the folder: a run stopped at
any point and started again counts every text once. What a worker does with a chunk (the model
loaded once, the patterns read through one seam) is ``chunk_work.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from attncli.io import faultpoints
from attncli.env import runtime
from attncli.errors import AttnError, BadInput, RuntimeFailure
from attncli.io.messages import warn
from attncli.stats.accumulate import STATS_VERSION, Accumulator, Settings
from attncli.stats.chunk_work import ChunkWork, ModelSpec, bounded, identity, load_work
from attncli.stats.cluster import ray_results
from attncli.stats.shards import (Damaged, Identity, from_document, inconsistent, mismatch, read_shard, shard_files,
                                  texts_digest, write_shard)

SHARD_TEXTS = 64  # texts per shard by default


# --- planning the chunks ---------------------------------------------------------------------------

@dataclass
class Plan:
    """What a run covers: the shards it found done and the chunks it computes."""
    done: list[dict[str, Any]] = field(default_factory=list)
    texts: int = 0
    tokens: int = 0
    stopped_at_shard: Optional[int] = None


def existing_shards(out: Path, ident: Identity, read: Callable[[Path], dict[str, Any]] = read_shard,
                    version: int = STATS_VERSION) -> dict[int, dict[str, Any]]:
    """The usable shards of an output folder by start; a damaged one is named and left to be
    computed again; one of another model or settings is BadInput. ``read``: a shard file's checked
    document, or Damaged (the statistics' by default; --pairs has its own, and its own definitions
    ``version``)."""
    found: dict[int, dict[str, Any]] = {}
    for path in shard_files([out]):
        try:
            doc = read(path)
            why = inconsistent(doc, ident)
            if why is not None:
                raise Damaged(why)
        except Damaged as exc:
            warn(f"shard {path} is damaged ({exc}): its texts are computed again")
            continue
        why = mismatch(doc, ident, version)
        if why is not None:
            raise BadInput(f"the output folder {str(out)!r} holds shards of another run: {path.name}: {why}; "
                           "use another --out (or empty it)")
        found[doc["start"]] = doc
    return found


def chunks(texts: Iterator[str], plan: Plan, *, shard_texts: int, max_texts: Optional[int],
           max_tokens: Optional[int], existing: dict[int, dict[str, Any]], count_tokens: Callable[[str], int]
           ) -> Iterator[tuple[int, list[str]]]:
    """(start, texts) of each chunk to compute, in corpus order; shards already in ``existing``
    (their texts read again and checked) go to ``plan.done`` instead."""
    starts = sorted(existing)
    pos, tokens = 0, 0
    it = iter(texts)
    while max_texts is None or pos < max_texts:
        if pos in existing:
            doc = existing[pos]
            covered = [t for _, t in zip(range(doc["end"] - pos), it)]
            if len(covered) < doc["end"] - pos or texts_digest(covered) != doc["texts_sha256"]:
                raise BadInput(f"the shard of texts {pos}-{doc['end'] - 1} in the output folder covers other texts "
                               "than the corpus's: the corpus changed; use another --out")
            if (max_texts is not None and doc["end"] > max_texts) or (max_tokens is not None
                                                                      and tokens + doc["tokens"] > max_tokens):
                plan.stopped_at_shard = pos
                return
            plan.done.append(doc)
            pos, tokens = doc["end"], tokens + doc["tokens"]
            plan.texts, plan.tokens = pos, tokens
            continue
        limit = pos + shard_texts
        if max_texts is not None:
            limit = min(limit, max_texts)
        later = [s for s in starts if pos < s < limit]
        limit = later[0] if later else limit
        chunk: list[str] = []
        stop = False
        while pos + len(chunk) < limit:
            text = next(it, None)
            if text is None:
                stop = True
                break
            if max_tokens is not None:
                n = count_tokens(text)
                if tokens + n > max_tokens:
                    stop = True
                    break
                tokens += n
            chunk.append(text)
        if chunk:
            yield pos, chunk
            pos += len(chunk)
            plan.texts, plan.tokens = pos, tokens
        if stop or not chunk:
            return


# --- running them ----------------------------------------------------------------------------------

_WORK: Optional[Any] = None  # what the worker computes chunks with (a ChunkWork, or the loader's)
_JOB: Optional[tuple[Callable[..., Any], tuple]] = None  # (loader, its arguments)


def _init_process(loader: Callable[..., Any], args: tuple, threads: int, owns_allocator: bool) -> None:
    global _JOB
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the pool
    runtime.choose_threads(threads)  # the workers are the parallelism: their own passes on the parent's --threads or 1
    if owns_allocator:
        runtime.own_allocator()  # a worker of the attn command line is the command line's, as its parent
    _JOB = (loader, args)


def process_chunk(start: int, texts: list[str]) -> dict[str, Any]:
    """A chunk in a worker process; the model is loaded by the first (a failure there is the
    task's, reported to the parent: in the pool's initializer it would restart the worker forever)."""
    global _WORK
    if _WORK is None:
        assert _JOB is not None
        loader, args = _JOB
        _WORK = loader(*args)
    return _WORK.compute(start, texts)


def local_pool(workers: int, *args: Any, loader: Callable[..., Any] = load_work):
    """``workers`` spawned processes, each computing chunks with ``loader(*args)`` (made once, by
    its first chunk; a module-level function, so that it pickles): ``load_work``'s ChunkWork for
    the statistics, or any object with ``compute(start, texts) -> shard document``."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # each worker imports attn afresh and loads the model once
    return ctx.Pool(workers, initializer=_init_process,
                    initargs=(loader, args, runtime.threads or 1, runtime.owns_allocator))


def pool_get(result) -> dict[str, Any]:
    try:
        return result.get()
    except AttnError:
        raise
    except Exception as exc:  # noqa: BLE001 - a worker's failure, reported in one line
        raise RuntimeFailure(f"a worker process failed: {type(exc).__name__}: {str(exc)[:200]}") from None


@dataclass
class Outcome:
    acc: Accumulator
    ident: Identity
    shards: int
    computed: int
    ranges: list[tuple[int, int]]
    stopped_at_shard: Optional[int] = None
    ran: dict[str, Any] = field(default_factory=dict)  # {"on": "here" | "processes" | "ray", "workers": n}


def run(model, texts: Iterator[str], *, spec: ModelSpec, settings: Settings, out: Optional[Path] = None,
        shard_texts: int = SHARD_TEXTS, max_texts: Optional[int] = None, max_tokens: Optional[int] = None,
        workers: int = 1, ray_address: Optional[str] = None,
        on_shard: Optional[Callable[[int], None]] = None) -> Outcome:
    """The statistics of ``texts`` on ``model`` (see the module docstring). ``on_shard(texts)``
    after each shard is done (computed or found)."""
    ident = identity(model)
    ident = Identity(ident.model, settings.as_dict())
    existing = existing_shards(out, ident) if out is not None else {}
    plan = Plan()
    count = lambda t: len(model.encode(t, truncate=True).ids)  # noqa: E731
    todo = chunks(texts, plan, shard_texts=shard_texts, max_texts=max_texts, max_tokens=max_tokens,
                  existing=existing, count_tokens=count)
    acc = Accumulator(model.layers, model.heads, settings.top_k)
    ranges: list[tuple[int, int]] = []
    computed = 0
    ran: dict[str, Any] = {"on": "ray" if ray_address else "processes" if workers > 1 else "here",
                           "workers": workers}

    def take(doc: dict[str, Any]) -> None:
        acc.merge(from_document(doc))
        ranges.append((doc["start"], doc["end"]))
        if on_shard is not None:
            on_shard(doc["end"] - doc["start"])

    def done_so_far() -> None:  # shards found done, taken as the plan reaches them
        while plan.done:
            take(plan.done.pop(0))

    def results() -> Iterator[dict[str, Any]]:
        if ray_address is not None:
            yield from ray_results(ray_address, todo, spec, settings, ident, workers, ran)
        elif workers > 1:
            pool = local_pool(workers, spec, settings, ident)
            try:
                yield from bounded(todo, lambda s, t: pool.apply_async(process_chunk, (s, t)), pool_get, 2 * workers)
            finally:
                pool.terminate()
                pool.join()
        else:
            work = ChunkWork(model, settings, ident, spec.batch_size)
            yield from bounded(todo, lambda s, t: (s, t), lambda st: work.compute(*st), 1)

    for doc in results():
        done_so_far()
        if out is not None:
            write_shard(out, doc)
            faultpoints.pause_at("stats-shard-written")
        computed += 1
        take(doc)
    done_so_far()
    ranges.sort()
    return Outcome(acc, ident, len(ranges), computed, ranges, plan.stopped_at_shard, ran)
