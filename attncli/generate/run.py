"""The generation loop: one token at a time, with what the model attended to when it chose it.

At step k the text so far is x_0 .. x_{T-1}; one causal pass gives the logits of the last
position, the next token x_T is picked from them, and the step records the attention row of
that last position (query T-1) over keys 0..T-1: what the model looked at when it chose x_T.
Row T-1 of a causal model depends only on x_0 .. x_{T-1}, so it equals row T-1 of one pass
over the finished text, ``Generation.weights`` (tested).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from attncli.attention.logit_lens import first_top_layer
from attncli.errors import BadInput
from attncli.generate import sampling
from attncli.generate.decoder_protocol import Decoder, Encoded
from attncli.generate.step_view import View, choose_view, view_matrix

MAX_NEW = 1000  # -n: at most this many new tokens (and never past the model's context)
MAX_SEED = 2**32 - 1
CANDIDATES = 5  # the runners-up each step shows


@dataclass
class Settings:
    n: int = 20
    temperature: float = 1.0
    top_k: int | None = 50
    seed: int | None = None
    greedy: bool = False
    layer: int | None = None
    head: int | None = None
    rollout: bool = False
    ignore_eos: bool = False

    def check(self) -> None:
        """Every option range that does not need the model."""
        if not 1 <= self.n <= MAX_NEW:
            raise BadInput(f"-n must be between 1 and {MAX_NEW:,} new tokens (got {self.n}); "
                           "the model's context may allow fewer")
        if not self.greedy:  # --greedy takes the argmax: temperature and top-k are not used (--temperature 0 is fine)
            sampling.check_sampling(self.temperature, self.top_k)
        elif not math.isfinite(self.temperature):  # unused, but never a NaN or an infinity in the settings shown
            raise BadInput(f"--temperature must be a finite number (got {self.temperature})")
        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            raise BadInput(f"--seed must be between 0 and 2^32-1 (got {self.seed})")
        if self.layer is not None and self.layer < 0:
            raise BadInput(f"--layer must be 0 or more (got {self.layer})")
        if self.head is not None and self.head < 0:
            raise BadInput(f"--head must be 0 or more (got {self.head})")
        if self.rollout and (self.layer is not None or self.head is not None):
            raise BadInput("--rollout combines every layer and head: leave out --layer and --head")


@dataclass
class Step:
    index: int | None  # the new token's position in Generation.tokens; None for the end of the text
    query: int  # the position whose output chose it (the token before it)
    id: int
    token: str
    prob: float  # the model's p(token | text so far), softmax at temperature 1 over the whole vocabulary
    sample_prob: float | None  # its probability in the distribution it was drawn from; None under --greedy
    candidates: list[tuple[str, float]]  # the model's most probable tokens, with p
    attention: np.ndarray  # (query + 1,) the view's row of the query over keys 0..query
    eos: bool = False
    text: str = ""  # the token's text as views draw it, its leading space kept (decoder.token_text)
    candidate_texts: list[str] = field(default_factory=list)  # the same per candidate


@dataclass
class Generation:
    decoder: Decoder
    prompt: str
    encoded: Encoded
    settings: Settings
    view: View
    seed: int | None
    steps: list[Step] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    ids: list[int | None] = field(default_factory=list)  # per token, its id (None: a prompt word the model cannot write)
    weights: np.ndarray | None = None  # (T, T) the view over the finished text, one pass
    stopped: str = "length"  # "length" (-n reached) or "eos" (the model ended the text)

    @property
    def prompt_length(self) -> int:
        return len(self.encoded.tokens)

    @property
    def generated(self) -> list[int]:
        return list(range(self.prompt_length, len(self.tokens)))

    def text(self, start: int = 0, end: int | None = None) -> str:
        """The text of tokens start..end-1 (the tokenizer's own decoding for a pretrained model)."""
        return self.decoder.text(self.tokens[start:end], self.ids[start:end])


def check_context(decoder: Decoder, prompt_tokens: int, n: int) -> None:
    room = decoder.context - prompt_tokens
    if room < 1:
        raise BadInput(f"the prompt is {prompt_tokens} tokens long, and model '{decoder.name}' reads at most "
                       f"{decoder.context} (its context): shorten the prompt to at most {decoder.context - 1} tokens")
    if n > room:
        raise BadInput(f"-n {n} goes past the context of model '{decoder.name}': the prompt is {prompt_tokens} tokens "
                       f"and the model reads at most {decoder.context}, so -n can be at most {room}")


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


def generate(decoder: Decoder, prompt: str, settings: Settings,
             on_step: Callable[[Generation, Step], None] | None = None,
             on_start: Callable[[Generation], None] | None = None) -> Generation:
    """Write up to ``settings.n`` tokens after ``prompt``; ``on_step`` sees each step as it is made."""
    gen = start(decoder, prompt, settings)
    if on_start is not None:
        on_start(gen)
    for step in steps(gen):
        if on_step is not None:
            on_step(gen, step)
    return gen


def start(decoder: Decoder, prompt: str, settings: Settings) -> Generation:
    """The generation before its first step: the settings checked, the view chosen, the prompt
    encoded and checked against the context, the seed drawn."""
    settings.check()
    view = choose_view(decoder.layers, decoder.heads, settings.layer, settings.head, settings.rollout, decoder.name)
    encoded = decoder.encode(prompt)
    check_context(decoder, len(encoded.tokens), settings.n)
    seed = None if settings.greedy else (settings.seed if settings.seed is not None else fresh_seed())
    return Generation(decoder, prompt, encoded, settings, view, seed, tokens=list(encoded.tokens),
                      ids=list(encoded.ids))


def steps(gen: Generation) -> Iterator[Step]:
    """Each step of ``gen`` as it is made (up to ``settings.n``, or the end of the text); once the last
    is taken, ``gen.weights`` is the view over the finished text."""
    decoder, settings = gen.decoder, gen.settings
    rng = np.random.default_rng(gen.seed) if gen.seed is not None else None
    inputs = list(gen.encoded.inputs)
    ends = frozenset(decoder.eos_ids)  # any of them ends the text
    banned = tuple(decoder.banned) + (tuple(decoder.eos_ids) if settings.ignore_eos else ())
    for _ in range(settings.n):
        logits, weights = decoder.forward(inputs)  # (V,), L x (h, T, T)
        p_model = sampling.softmax(logits)  # (V,)
        if settings.greedy:
            chosen, sample_prob = sampling.greedy_choice(logits, banned), None
        else:
            p = sampling.sampling_distribution(logits, temperature=settings.temperature, top_k=settings.top_k, banned=banned)
            chosen = sampling.sample(p, rng)
            sample_prob = float(p[chosen])
        T = len(inputs)
        eos = chosen in ends
        step = Step(
            index=None if eos else T, query=T - 1, id=chosen, token=decoder.token(chosen),
            prob=float(p_model[chosen]), sample_prob=sample_prob,
            candidates=[(decoder.token(i), p) for i, p in sampling.top_candidates(p_model, CANDIDATES)],
            attention=view_matrix(weights, gen.view)[T - 1].copy(), eos=eos, text=decoder.token_text(chosen),
            candidate_texts=[decoder.token_text(i) for i, _ in sampling.top_candidates(p_model, CANDIDATES)],
        )
        gen.steps.append(step)
        if not eos:
            gen.tokens.append(step.token)
            gen.ids.append(chosen)
            inputs.append(decoder.input_of(chosen))
        yield step
        if eos:
            gen.stopped = "eos"
            break
    gen.weights = view_matrix(decoder.forward(inputs)[1], gen.view)  # (T, T) one pass over the finished text


def lens_layers(gen: Generation) -> list[int | None]:
    """Per generated token, the logit lens's verdict (attncli.attention.logit_lens): the first layer
    from which it is the top prediction at the position that chose it, in that layer and every
    later one (0 = the embeddings already); None when even the last layer ranks another token
    first (a sampled token). Tokens the decoder never writes (``banned``, e.g. the built-in LM's
    <unk>) are passed over, as generation passes over them. One causal pass over the finished
    text (earlier positions do not change as tokens are added)."""
    banned = set(gen.decoder.banned)
    inputs = list(gen.encoded.inputs) + [gen.decoder.input_of(s.id) for s in gen.steps]
    lens = gen.decoder.lens(inputs, 1 + len(banned))  # top_ids (L + 1, T, k)
    layers = []
    for s in gen.steps:
        top = [next(int(i) for i in ids if int(i) not in banned) for ids in lens.top_ids[:, s.query]]  # (L + 1,)
        layers.append(first_top_layer(np.asarray(top), s.id))
    return layers


def step_document(step: Step) -> dict[str, Any]:
    return {
        "index": step.index, "query": step.query, "token": step.token, "id": step.id, "prob": step.prob,
        "sample_prob": step.sample_prob,
        "candidates": [{"token": t, "prob": p} for t, p in step.candidates],
        "attention": [float(x) for x in step.attention], "eos": step.eos,
    }


def header_document(gen: Generation) -> dict[str, Any]:
    d, s = gen.decoder, gen.settings
    return {
        "model": {"name": d.name, "kind": d.kind, "layers": d.layers, "heads": d.heads, "context": d.context,
                  "vocab_size": d.vocab_size},
        "prompt": gen.prompt,
        "prompt_tokens": list(gen.encoded.tokens),
        "prompt_mapping": {"tokens": gen.encoded.mapping, "notes": list(gen.encoded.notes)},
        "settings": {"n": s.n, "greedy": s.greedy, "temperature": None if s.greedy else s.temperature,
                     "top_k": None if s.greedy else (s.top_k or None), "seed": gen.seed, "ignore_eos": s.ignore_eos},
        "view": {"layer": None if gen.view.rollout else gen.view.layer, "head": gen.view.head,
                 "rollout": gen.view.rollout, "label": gen.view.label(d.heads, d.layers)},
    }


def document(gen: Generation) -> dict[str, Any]:
    """The ``--json`` document: header, tokens, generated indices, steps and the final (T, T) weights."""
    doc = header_document(gen)
    doc.update({
        "tokens": list(gen.tokens),
        "generated": gen.generated,
        "text": gen.text(),
        "generated_text": gen.text(gen.prompt_length),
        "stopped": gen.stopped,
        "steps": [step_document(s) for s in gen.steps],
        "weights": [[float(x) for x in row] for row in gen.weights],
    })
    return doc
