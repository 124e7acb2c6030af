"""What ``attn attribute`` and ``attn circuit`` ask for: one frozen request per command, built the
same way by the command line and the Python API and handed to
:func:`attncli.pipeline.compute_gradients` (request -> result). Both run a checkpoint's pass forward
and backward: attn's NumPy pass and its tape (--backend auto, numpy), or transformers' modules under
torch's autograd (--backend torch: attn attribute's plain AtP on any decoder transformers runs).

:meth:`GradientRequest.check` refuses what needs no model through the one table of
attncli.rules.option_conflicts (its "gradients" rows); :meth:`GradientRequest.options` says the request
back as the command's options.

    >>> from attncli.causal.gradient_request import AttributeRequest, CircuitRequest
    >>> AttributeRequest("the cat sat", transformer="gpt2", corrupt="the dog sat", site="key").check()
    >>> AttributeRequest("the cat sat", transformer="gpt2", corrupt="the dog sat", site="embed").check()
    Traceback (most recent call last):
    ...
    attncli.errors.BadInput: --site 'embed': choose one of resid, attn, mlp, head, key, query
    >>> CircuitRequest("the cat sat", corrupt="the dog sat", steps=4).check()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attncli.errors.BadInput: give the model with --transformer NAME (a hub id or a directory: GPT-2 or the Llama family)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from attncli.causal.causal_request import own_options
from attncli.rules.option_conflicts import TableRequest
from attncli.io.textio import visible


@dataclass(frozen=True)
class GradientRequest(TableRequest):
    """The options attn attribute and attn circuit share: the model, the two texts, the target; its
    refusals are the table's "gradients" rows."""

    text: str  # the clean text
    transformer: Optional[str] = None  # a hub id or a directory (GPT-2, the Llama family; attribute: an MLM encoder)
    corrupt: str = ""  # the corrupted text (as many tokens as ``text``)
    target: Optional[str] = None  # the token measured (None: --target-id, or the top prediction's)
    target_id: Optional[int] = None
    contrast: Optional[str] = None  # logit(target) - logit(contrast) instead of log p(target)
    contrast_id: Optional[int] = None
    backend: str = "auto"  # auto: attn's NumPy pass where it runs the model; torch: torch's autograd (plain AtP)
    allow_missing_weights: bool = False

    command: ClassVar[str] = ""  # attribute or circuit
    OWN: ClassVar[tuple[tuple[str, Any], ...]] = ()  # (field, default): the command's own options, --help's order
    table_path: ClassVar[str] = "gradients"
    POSITIONALS: ClassVar[tuple[str, ...]] = ("text", "corrupt")

    def options(self) -> list[tuple[str, Any]]:
        """(flag, value) of each option that says this request (None or False: left out), in the
        command line's order; a default is left out."""
        return [("--transformer", self.transformer), ("--target", self.target), ("--target-id", self.target_id),
                ("--contrast", self.contrast), ("--contrast-id", self.contrast_id), *own_options(self),
                ("--backend", None if self.backend == "auto" else self.backend),
                ("--allow-missing-weights", self.allow_missing_weights)]

    @property
    def title(self) -> str:
        return f"attn {self.command}: {visible(self.text[:60])}"


@dataclass(frozen=True)
class AttributeRequest(GradientRequest):
    """``attn attribute``: every cell of attn patch's grid estimated from one forward and one backward pass."""

    site: str = "resid"  # resid, attn, mlp (per position), head, or key / query (a head's, per position)
    no_qk_fix: bool = False  # plain AtP: the attention patterns a patch changes linearised
    verify: int = 0  # also patch the K largest cells exactly

    command: ClassVar[str] = "attribute"
    OWN: ClassVar[tuple[tuple[str, Any], ...]] = (("site", "resid"), ("no_qk_fix", False), ("verify", 0))


@dataclass(frozen=True)
class CircuitRequest(GradientRequest):
    """``attn circuit``: every edge scored (EAP, EAP-IG with ``steps`` > 1), the fewest that keep ``faithfulness``."""

    steps: int = 1  # points on the path from the corrupted to the clean embeddings (1: EAP)
    faithfulness: float = 0.9  # the fraction of the metric the circuit keeps

    command: ClassVar[str] = "circuit"
    OWN: ClassVar[tuple[tuple[str, Any], ...]] = (("steps", 1), ("faithfulness", 0.9))
