"""``attn lens`` as one request, one compute, one result: :class:`LensRequest` ->
:func:`compute` -> :class:`LensResult` (the result protocol of attncli.views.result, drawn by
attncli.views.lens). The command line and ``attn explore`` (key L) build the same request, and the
lens document is built here only. Shapes: ``L`` layers, ``T`` positions, ``k`` tokens per cell.

    >>> LensRequest("time flies", transformer="gpt2", top_k=3).command_line()
    "attn lens 'time flies' --transformer gpt2 --top-k 3"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from attncli.errors import BadInput
from attncli.rules.option_conflicts import TableRequest
from attncli.generate.decoders import load_decoder
from attncli.generate.hf_decoder import PretrainedLM
from attncli.views.lens import LensView
from attncli.views.result import attn_command

MAX_TOP_K = 20
ROWS = "lens[l][t]: after l layers (0 = the embeddings) at position t, the top_k next tokens, best first"


@dataclass
class LensRequest(TableRequest):
    """Everything ``attn lens`` needs (its options, by their parameter names)."""

    text: str
    transformer: Optional[str] = None  # a pretrained decoder (None: the built-in LM of ``model``)
    model: Optional[str] = None  # a word-vector model's built-in LM (None: the default model)
    top_k: int = 1  # next tokens per layer and position
    token: Optional[str] = None  # follow this token's rank and probability through the layers

    table_path: ClassVar[str] = "lens"

    def check(self) -> None:
        """The refusals that need no model (bad input: exit 2)."""
        if not 1 <= self.top_k <= MAX_TOP_K:
            raise BadInput(f"--top-k must be between 1 and {MAX_TOP_K} (got {self.top_k})")
        super().check()  # how the options go together: the table's rows of attn lens

    def options(self) -> list[tuple[str, Any]]:
        return [("--transformer", self.transformer), ("--model", self.model),
                ("--top-k", self.top_k if self.top_k != 1 else None), ("--token", self.token)]

    def command_line(self) -> str:
        return attn_command("lens", self.positionals(), self.options())


class LensResult(LensView):
    """The lens of :func:`compute`: its document, drawn by attncli.views.lens; the request says its
    command line."""

    def __init__(self, request: LensRequest, doc: dict[str, Any], model: Any = None) -> None:
        super().__init__(doc, title=f"attn lens: {request.text[:60]}", command="lens", positionals=[request.text],
                         options=request.options())
        self.request = request
        self.model = model  # the pretrained model it ran on (None: the built-in LM): its layers and heads, for an app
        self.is_pretrained = request.transformer is not None  # a pretrained model's (explore asks)


def compute(request: LensRequest, model: Any = None) -> LensResult:
    """The lens ``request`` asks for: of ``model`` (a pretrained model already loaded, attncli.hf.load),
    else of the model the request names, loaded here."""
    request.check()
    if model is not None:
        decoder = PretrainedLM(model, use_cache=False, command="attn lens")
    else:
        decoder = load_decoder(request.model, request.transformer, command="attn lens")
    enc = decoder.encode(request.text)
    if len(enc.inputs) > decoder.context:
        raise BadInput(f"the text is {len(enc.inputs)} tokens, more than the model's {decoder.context}")
    follow = None
    if request.token is not None:
        follow = decoder.token_id(request.token)
        if follow is None:
            raise BadInput(f"--token {request.token!r} is not one token of the model's vocabulary")
    lens = decoder.lens(enc.inputs, request.top_k, follow)  # top_ids, top_probs: (L + 1, T, k)
    n_layers = lens.top_ids.shape[0]
    label = lambda i: decoder.label(decoder.token(int(i)))  # noqa: E731
    text = lambda i: decoder.token_text(int(i))  # noqa: E731 - " John": what the view draws
    cells = [[[{"token": label(i), "id": int(i), "prob": round(float(p), 6), "text": text(i)}
               for i, p in zip(lens.top_ids[l, t], lens.top_probs[l, t])] for t in range(len(enc.tokens))]
             for l in range(n_layers)]
    doc: dict[str, Any] = {
        "model": decoder.name, "kind": decoder.kind, "tokens": [decoder.label(t) for t in enc.tokens],
        "token_texts": [t if i is None else text(i) for t, i in zip(enc.tokens, enc.ids)],
        "layers": n_layers - 1, "top_k": request.top_k, "rows": ROWS, "lens": cells, "follow": None,
    }
    if follow is not None:
        doc["follow"] = {"token": label(follow), "id": int(follow), "text": text(follow),
                         "rank": lens.follow_rank.astype(int).tolist(),  # (L + 1, T)
                         "prob": [[round(float(p), 6) for p in row] for row in lens.follow_prob]}
    return LensResult(request, doc, getattr(decoder, "model", None))
