"""``attn generate`` as one request, one compute, one result: :class:`GenerateRequest` -> :func:`compute`
-> :class:`GenerateResult`, whose :meth:`~GenerateResult.steps` writes the text a token at a time (the
command line draws each step as it comes), then holds the whole generation (attncli.generate.run)::

    from attncli.pipeline.generate_compute import GenerateRequest, compute
    result = compute(GenerateRequest("the cat", n=3, greedy=True))
    for step in result.steps():
        step.token
    result.document()["text"]

    request -> check -> the decoder (the built-in LM, or --transformer; unless given) -> the prompt
            encoded, checked against the context -> each step (generate.run.steps) -> the document

Shapes: ``T`` tokens of the prompt and the text written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Iterator, Optional

import numpy as np

from attncli.errors import BadInput
from attncli.generate import run
from attncli.generate.decoders import load_decoder
from attncli.rules.option_conflicts import TableRequest
from attncli.pipeline.running import Progress, model_for
from attncli.io.textio import token_label
from attncli.views.render import Heatmap, heatmap_renderables
from attncli.views.result import Result, attn_command, shown


@dataclass(frozen=True)
class GenerateRequest(TableRequest):
    """Everything ``attn generate`` needs (its options, by their parameter names); its refusals are its
    own and the sampling settings' (attncli.generate.run.Settings)."""

    prompt: str
    n: int = 20
    temperature: float = 1.0
    top_k: int = 50
    seed: Optional[int] = None
    greedy: bool = False
    ignore_eos: bool = False
    model: Optional[str] = None  # the word-vector model whose built-in LM writes (None: the default)
    transformer: Optional[str] = None  # a pretrained causal model instead
    allow_missing_weights: bool = False
    layer: Optional[int] = None
    head: Optional[int] = None
    rollout: bool = False
    top: Optional[int] = None  # each row's K strongest keys instead of the whole row
    lens: bool = False  # the logit lens of each generated token (lens_layers)
    chat: bool = False
    backend: str = "auto"
    device: Optional[str] = None
    dtype: Optional[str] = None
    device_map: Optional[str] = None
    max_memory: Optional[str] = None

    POSITIONALS: ClassVar[tuple[str, ...]] = ("prompt",)

    @property
    def settings(self) -> run.Settings:
        return run.Settings(n=self.n, temperature=self.temperature, top_k=self.top_k, seed=self.seed,
                            greedy=self.greedy, layer=self.layer, head=self.head, rollout=self.rollout,
                            ignore_eos=self.ignore_eos)

    def check(self) -> None:
        """The refusals that need no model (BadInput, exit 2), in the order the command reads them."""
        if self.top is not None and self.top < 1:
            raise BadInput(f"--top must be at least 1 (got {self.top})")
        self.settings.check()
        if not self.prompt.strip():
            raise BadInput('the prompt is empty: give a few words to continue, e.g. attn generate "the cat"')
        if self.allow_missing_weights and self.transformer is None:
            raise BadInput("--allow-missing-weights needs --transformer NAME_OR_PATH (a pretrained model)")

    def options(self) -> list[tuple[str, Any]]:
        return [("-n", self.n if self.n != 20 else None), ("--greedy", self.greedy),
                ("--temperature", None if self.greedy or self.temperature == 1.0 else self.temperature),
                ("--top-k", None if self.greedy or self.top_k == 50 else self.top_k), ("--seed", self.seed),
                ("--ignore-eos", self.ignore_eos), ("--model", self.model), ("--transformer", self.transformer),
                ("--allow-missing-weights", self.allow_missing_weights), ("--layer", self.layer),
                ("--head", self.head), ("--rollout", self.rollout), ("--top", self.top), ("--lens", self.lens),
                ("--chat", self.chat), ("--backend", None if self.backend == "auto" else self.backend),
                ("--device", self.device), ("--dtype", self.dtype), ("--device-map", self.device_map),
                ("--max-memory", self.max_memory)]


class GenerateResult(Result):
    """The generation ``request`` asks for: :meth:`steps` makes it (once), then the result protocol
    draws the whole text's attention and gives the --json document."""

    title = "attn generate"

    def __init__(self, request: GenerateRequest, gen: run.Generation) -> None:
        self.request, self.gen = request, gen
        self._lens: Optional[list] = None
        self._done = False

    def steps(self) -> Iterator[run.Step]:
        """Each step as it is made (the model runs here); after the last, the generation is whole."""
        if self._done:
            yield from self.gen.steps
            return
        yield from run.steps(self.gen)
        self._done = True

    def finish(self) -> run.Generation:
        for _ in self.steps():
            pass
        return self.gen

    def lens_layers(self) -> list:
        """Per generated token, the first layer from which it was the top prediction (--lens)."""
        if self._lens is None:
            self._lens = run.lens_layers(self.finish())
        return self._lens

    def document(self) -> dict[str, Any]:
        doc = run.document(self.finish())
        return {**doc, "lens_layers": self.lens_layers()} if self.request.lens else doc

    def command_line(self) -> str:
        seed = [("--seed", self.gen.seed)] if self.request.seed is None and self.gen.seed is not None else []
        return attn_command("generate", [self.request.prompt], [*self.request.options(), *seed])

    def renderables(self, width: Optional[int]) -> list:
        gen = self.finish()
        P = gen.prompt_length
        return [shown(f"text: {gen.text(0, P)} | {gen.text(P)}"), *heatmap_renderables(end_heatmap(gen), width)]


def labels(gen: run.Generation) -> list[str]:
    """Each token of the text as drawn: its text (␣ for a space, attncli.io.textio.token_label)."""
    return [token_label(gen.decoder.token_text(i)) if i is not None else gen.decoder.label(t)
            for t, i in zip(gen.tokens, gen.ids)]


def end_heatmap(gen: run.Generation) -> Heatmap:
    """The (T, T) view of the finished text, generated rows marked "+", the boundary ruled."""
    P, T = gen.prompt_length, len(gen.tokens)
    view = gen.view.label(gen.decoder.heads, gen.decoder.layers)
    where = f"rows 0-{P - 1} prompt, {P}-{T - 1} (+) generated" if T > P else "the prompt only"
    marked = [("+" if i >= P else "") + t for i, t in enumerate(labels(gen))]
    return Heatmap(gen.weights, [f"{i} {t}" for i, t in enumerate(marked)], marked,
                   f"prompt + generated text · {view}", masked=~np.tri(T, dtype=bool),
                   divider_after=P - 1 if T > P else None, notes=(f"{where}; the rule marks the boundary",) if T > P else (),
                   more="--top K lists each row's strongest keys, --json has every weight")


def compute(request: GenerateRequest, model: Any = None, *, progress: Optional[Progress] = None) -> GenerateResult:
    """The generation of ``request`` by ``model`` (a decoder, attncli.generate.decoder_protocol; Later or
    None: loaded here), checked and started: the prompt encoded, the seed drawn; its steps run when
    the result's :meth:`~GenerateResult.steps` asks for them."""
    request.check()
    decoder = model_for(model, request.transformer, lambda: load_decoder(
        request.model, request.transformer, allow_missing_weights=request.allow_missing_weights, chat=request.chat,
        backend=request.backend, device=request.device, dtype=request.dtype, device_map=request.device_map,
        max_memory=request.max_memory))
    return GenerateResult(request, run.start(decoder, request.prompt, request.settings))
