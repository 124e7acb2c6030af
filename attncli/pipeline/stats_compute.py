"""One compute for head statistics: :func:`compute_stats` turns an ``attn stats`` request
(attncli.stats.stats_request) into its result, :func:`compute_merge` an ``attn stats merge`` request;
both results are :class:`~attncli.views.stats_view.StatsResult` (the protocol of
attncli.views.result), whoever asked: the command line or Python::

    from attncli.pipeline import StatsRequest, compute_stats
    result = compute_stats(StatsRequest("corpus.txt", transformer="gpt2", max_texts=100))
    result.document()["stats"]["induction"]["mean"]   # (layers, heads)

    request -> check (the table's "stats" rows, the bounds) -> --out made -> the corpus
            -> load (unless given) -> the shards (attncli.stats.runner: here, processes or Ray)
            -> the document (attncli.stats.report) -> the result
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, ContextManager, Optional

from attncli.errors import BadInput
from attncli.hf.loader import load
from attncli.model.interface import has
from attncli.stats import corpus as corpus_mod
from attncli.stats.accumulate import Settings
from attncli.stats.report import document, merge_shards
from attncli.stats.stats_request import MergeRequest, StatsRequest
from attncli.stats.runner import ModelSpec, run
from attncli.stats.shards import shard_folder
from attncli.io.textio import visible
from attncli.views.stats_view import StatsResult

Progress = Callable[[str], ContextManager[Any]]  # a message -> a context whose value has advance(texts), or None


def load_stats(request: StatsRequest):
    """The request's model (attncli.hf.load: NumPy or transformers, by ``backend``)."""
    return load(request.transformer, backend=request.backend, allow_missing_weights=request.allow_missing_weights)


def compute_stats(request: StatsRequest, model: Any = None, *, loader: Optional[Callable[[StatsRequest], Any]] = None,
                  progress: Optional[Progress] = None, say: Optional[Callable[[str, str], None]] = None) -> StatsResult:
    """The statistics ``request`` asks for on ``model`` (None: ``loader(request)``'s, once the corpus
    is found; attncli.hf.load's without one). ``progress(message)``:
    a context around the shards, whose value's ``advance(texts)`` is called after each one;
    ``say(kind, message)``: a warning ("warn") or a remark ("info") on the way (None: dropped)."""
    request.check()
    out = None if request.out is None else Path(request.out)
    if out is not None:
        shard_folder(out)  # made when new; a symbolic link followed (attncli.stats.shards)
    source = corpus_mod.describe(request.corpus, request.field)
    texts = corpus_mod.texts(request.corpus, field=request.field, split=request.split)
    if model is None:
        model = (loader or load_stats)(request)
    if request.precision is not None and not has(model, "precision"):
        raise BadInput(f"--precision chooses attn's NumPy pass; {model.name} runs through transformers (its --dtype, "
                       "float32 by default): drop --precision")
    settings = Settings(top_k=request.top_k, probe_every=request.probe_every, probe_length=request.probe_length,
                        seed=request.seed, precision=request.precision or "float32")
    say = say or (lambda kind, message: None)
    workers, ray = request.workers, request.ray
    where = f"on the Ray cluster at {ray}" if ray else f"in {workers} processes" if workers > 1 else "here"
    around = progress or (lambda message: nullcontext())
    with around(f"measuring the {model.layers * model.heads} heads of {model.name} on the {source}, {where}") as shown:
        outcome = run(model, texts, spec=ModelSpec(request.transformer, request.backend, request.allow_missing_weights,
                                                   request.batch_size),
                      settings=settings, out=out, shard_texts=request.shard_texts, max_texts=request.max_texts,
                      max_tokens=request.max_tokens, workers=workers, ray_address=ray,
                      on_shard=None if shown is None else shown.advance)
    if outcome.stopped_at_shard is not None:
        say("warn", f"stopped at text {outcome.stopped_at_shard}: the shard there in --out goes past "
                    "--max-texts/--max-tokens")
    if outcome.acc.texts == 0:
        raise BadInput(f"the corpus ({source}) holds no text to measure")
    if outcome.acc.scored == 0:
        raise BadInput(f"no text of the corpus ({source}) has a token to score (each is one token or less)")
    doc = document(outcome.acc, outcome.ident, outcome.ranges, source=source, shards=outcome.shards,
                   computed=outcome.computed, ran=outcome.ran, out=None if out is None else str(out))
    if has(model, "stacks"):  # T5, BART: the encoder stack's self-attention
        say("info", "an encoder-decoder: these are the encoder stack's heads (its self-attention over each text)")
        doc["stack"] = "encoder"
    return StatsResult(doc, request, title=f"attn stats: {visible(str(model.name))}")


def compute_merge(request: MergeRequest) -> StatsResult:
    """The shards of ``request.folders`` merged exactly (sums and counts), as one result."""
    request.check()
    merged = merge_shards([Path(f) for f in request.folders], skip_damaged=request.skip_damaged)
    doc = document(merged.acc, merged.ident, merged.ranges, source="shards", shards=len(merged.ranges),
                   skipped=merged.skipped, damaged_skipped=merged.damaged)
    return StatsResult(doc, request, title=f"attn stats merge: {visible(str(merged.ident.model['name']))}")
