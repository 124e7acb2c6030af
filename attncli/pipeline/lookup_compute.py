"""``attn lookup`` as one request, one compute, one result: :class:`LookupRequest` -> :func:`compute` ->
:class:`LookupBatch`, the lookups of its queries (one, or --queries' lines), each a LookupView
(attncli.views.lookup_view: the result protocol), made one at a time as they are read::

    from attncli.pipeline.lookup_compute import LookupRequest, compute
    for line, view in compute(LookupRequest("colour")).views():
        view.document()["answer"]

    request -> check -> the dictionary, the queries -> the word vectors or the encoder (unless given)
            -> every query checked -> each lookup (attncli.lookup.dictionary) -> its view

Nothing heavy at the top: the sentence encoder (attn's forward passes) loads only with --encoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Iterator, Optional

from attncli.errors import BadInput
from attncli.lookup import dictionary as core
from attncli.lookup.params import DEFAULT_TEMPERATURE, NGRAM_WEIGHT, encoder_ngram_weight
from attncli.rules.option_conflicts import TableRequest
from attncli.env.paths import data_dir
from attncli.pipeline.running import Progress, quiet
from attncli.io.textio import clip
from attncli.vectors.model import load_vectors
from attncli.views.lookup_view import LookupView
from attncli.views.result import Result


@dataclass(frozen=True)
class LookupRequest(TableRequest):
    """Everything ``attn lookup`` needs (its options, by their parameter names); its refusals are its
    own (no row of the table reads attn lookup's options)."""

    query: Optional[str] = None  # the key to look up (None: --queries)
    dict_path: Optional[str] = None  # --dict: a JSON file, or - for stdin (None: the shipped car.json)
    model: Optional[str] = None  # the word-vector model (None: the default)
    encoder: Optional[str] = None  # a pretrained sentence encoder instead
    allow_missing_weights: bool = False
    temperature: float = DEFAULT_TEMPERATURE
    top_k: Optional[int] = None
    ngram_weight: Optional[float] = None  # None: the model's (or the encoder's) own
    exact: bool = True
    queries: Optional[str] = None  # --queries: one query a line, a file or - for stdin
    rows: int = 20
    explain: bool = False

    POSITIONALS: ClassVar[tuple[str, ...]] = ("query",)

    def check(self) -> None:
        """The refusals that need no model (BadInput, exit 2), in the order the command reads them."""
        core.check_temperature(self.temperature)
        if self.top_k is not None and self.top_k <= 0:
            raise BadInput(f"--top-k must be at least 1, got {self.top_k}")
        if self.rows < 0:
            raise BadInput(f"--rows must be 0 (all) or more, got {self.rows}")
        if (self.query is None) == (self.queries is None):
            raise BadInput("give a QUERY or --queries FILE (one query per line), not both" if self.query is not None
                           else "give a QUERY to look up (e.g. attn lookup colour), or --queries FILE")
        if self.queries == "-" and self.dict_path == "-":
            raise BadInput("--queries - and --dict - cannot both read stdin: put one of them in a file")
        if self.encoder is not None and self.model is not None:
            raise BadInput("--model (word vectors) and --encoder (a sentence encoder) are two ways to compare keys: "
                           "give one")
        if self.allow_missing_weights and self.encoder is None:
            raise BadInput("--allow-missing-weights needs --encoder NAME_OR_PATH (a pretrained sentence encoder)")
        core.check_ngram_weight(self.weight)

    @property
    def weight(self) -> float:
        """lambda of the n-gram overlap: the request's, else the encoder's own, else the default."""
        if self.ngram_weight is not None:
            return self.ngram_weight
        return encoder_ngram_weight(self.encoder) if self.encoder is not None else NGRAM_WEIGHT


class LookupBatch(Result):
    """The lookups of a request's queries, each made when :meth:`views` reaches it (a bad line of
    --queries was refused before any). The command line prints each view as it comes; as one result,
    the views one after the other, and the document of the query (--queries: {"results": [...]})."""

    title = "attn lookup"

    def __init__(self, request: LookupRequest, dictionary: dict[str, Any], batch: list[tuple[int, str]], vectors: Any,
                 index: Any, progress: Progress) -> None:
        self.request, self.dictionary, self.batch = request, dictionary, batch
        self.vectors, self.index, self.progress = vectors, index, progress

    def renderables(self, width: Optional[int]) -> list:
        return [part for _, view in self.views() for part in view.renderables(width)]

    def document(self) -> dict[str, Any]:
        docs = [view.document() for _, view in self.views()]
        return {"results": docs} if self.request.queries is not None else docs[0]

    def command_line(self) -> str:
        return next(self.views())[1].command_line()

    def views(self) -> Iterator[tuple[int, LookupView]]:
        """(line of --queries, 0 for the query) and its view, in order; the first exact answer with keys
        that have no vector says so once (progress.warn)."""
        r, index, noted = self.request, self.index, False
        for line, q in self.batch:
            try:
                result = core.lookup(q, self.dictionary, self.vectors, temperature=r.temperature, top_k=r.top_k,
                                     exact=r.exact, index=index)
            except BadInput as exc:
                if line:
                    raise BadInput(f"--queries line {line}: {exc}") from None
                raise
            if result.exact and index.vectorless_keys and not noted:  # said once, on stderr
                noted = True
                names = ", ".join(clip(k) for k in index.vectorless_keys[:5]) + \
                    (" ..." if len(index.vectorless_keys) > 5 else "")
                self.progress.warn(f"{len(index.vectorless_keys)} key(s) have no word vector in model '{index.name}' "
                                   f"({names}): an exact key answers like a dict, and their cosine is shown as 0")
            yield line, LookupView(result, index if r.explain else None, rows=r.rows, heading=r.queries is not None,
                                   dictionary=self.dictionary if r.dict_path == "-" else None, dict_path=r.dict_path,
                                   model=r.model, encoder=r.encoder, allow_missing_weights=r.allow_missing_weights,
                                   ngram_weight=r.ngram_weight, exact=r.exact,
                                   compact=True if r.queries is not None else None)


def compute(request: LookupRequest, model: Any = None, *, progress: Optional[Progress] = None) -> LookupBatch:
    """The lookups ``request`` asks for, with ``model`` (the word vectors, or with --encoder the encoder,
    already loaded; None: loaded here)."""
    request.check()
    dictionary = core.read_dictionary(request.dict_path if request.dict_path is not None else data_dir() / "car.json")
    batch = core.read_queries(request.queries) if request.queries is not None else [(0, request.query)]
    if request.query is not None and not request.query.strip():  # before a model is loaded
        raise BadInput("the query is empty: give a word or phrase to look up")
    if request.encoder is not None:
        vectors = None
        if model is None:
            from attncli.lookup.encoder import load_encoder  # the model's forward passes: --encoder only

            model = load_encoder(request.encoder, allow_missing_weights=request.allow_missing_weights)
        from attncli.lookup.encoder import EncoderIndex

        index = EncoderIndex(model, list(dictionary), ngram_weight=request.weight)
    else:
        vectors = model if model is not None else load_vectors(request.model)
        index = core.KeyIndex(vectors, list(dictionary), ngram_weight=request.weight)
    if request.queries is not None:  # every query checked before any answer is printed: no partial output on a bad line
        for line, q in batch:
            try:
                index.check_query(q, allow_no_vector=core.exact_key(q, dictionary, index, exact=request.exact))
            except BadInput as exc:
                raise BadInput(f"--queries line {line}: {exc}") from None
    return LookupBatch(request, dictionary, batch, vectors, index, quiet(progress))
