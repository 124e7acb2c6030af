"""What ``attn ablate``, ``attn patch`` and ``attn dla`` ask for: one frozen request per command,
built the same way by the command line, ``attn explore``'s G and D keys and the Python API, and
handed to :func:`attncli.pipeline.compute_causal` (request -> result).

Every field is a parameter of the command, by its name; :meth:`CausalRequest.check` refuses what
needs no model through the one table of attncli.rules.option_conflicts (its "causal" rows), and
:meth:`CausalRequest.options` says the request back as the command's options.

    >>> from attncli.causal.causal_request import AblateRequest
    >>> AblateRequest("time flies like an", transformer="gpt2", mode="mean").check()
    >>> AblateRequest("time flies like an", transformer="gpt2", reference="refs.txt").check()
    Traceback (most recent call last):
    ...
    attncli.errors.BadInput: --reference is the texts of --mode mean: add --mode mean, or drop --reference
    >>> AblateRequest(" ", transformer="gpt2").check()
    Traceback (most recent call last):
    ...
    attncli.errors.BadInput: the text is empty: give the text the model reads, e.g. "time flies like an"
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional, Union

from attncli.rules.option_conflicts import TableRequest


@dataclass(frozen=True)
class CausalRequest(TableRequest):
    """The options every causal test shares (the model, the target, where the pass runs); its
    refusals are the table's "causal" rows."""

    text: str  # the text the model reads (patch: the clean text)
    transformer: Optional[str] = None  # a hub id or a directory
    target: Optional[str] = None  # the token measured (None: --target-id, or the top prediction's)
    target_id: Optional[int] = None
    contrast: Optional[str] = None  # logit(target) - logit(contrast) instead of log p(target)
    contrast_id: Optional[int] = None
    backend: str = "auto"
    device: Optional[str] = None  # --device / --dtype / --device-map / --max-memory: the torch backend's
    dtype: Optional[str] = None
    device_map: Optional[str] = None
    max_memory: Optional[str] = None
    allow_missing_weights: bool = False

    command: ClassVar[str] = ""  # ablate, patch or dla
    OWN: ClassVar[tuple[tuple[str, Any], ...]] = ()  # (field, default): the command's own options, --help's order
    table_path: ClassVar[str] = "causal"

    def options(self) -> list[tuple[str, Any]]:
        """(flag, value) of each option that says this request (None or False: left out), in the
        command line's order; a default is left out."""
        return [("--transformer", self.transformer), ("--target", self.target), ("--target-id", self.target_id),
                ("--contrast", self.contrast), ("--contrast-id", self.contrast_id), *own_options(self),
                ("--backend", None if self.backend == "auto" else self.backend), ("--device", self.device),
                ("--dtype", self.dtype), ("--allow-missing-weights", self.allow_missing_weights)]

    @property
    def title(self) -> str:
        return f"attn {self.command}: {self.text[:60]}"


@dataclass(frozen=True)
class AblateRequest(CausalRequest):
    """``attn ablate``: each head knocked out, the change in the target's measure (layers x heads)."""

    mode: str = "zero"  # zero: the head's output set to 0; mean: to its mean over ``reference``
    reference: Optional[Union[str, Path]] = None  # a file of texts, one a line (--mode mean)
    position: Optional[int] = None  # ablate at this token position only (None: every one)

    command: ClassVar[str] = "ablate"
    OWN: ClassVar[tuple[tuple[str, Any], ...]] = (("mode", "zero"), ("reference", None), ("position", None))


@dataclass(frozen=True)
class PatchRequest(CausalRequest):
    """``attn patch``: clean activations copied into the corrupted run, the fraction restored."""

    corrupt: str = ""  # the corrupted text (as many tokens as ``text``, the clean one)
    site: str = "resid"  # resid, attn, mlp (per position) or head

    command: ClassVar[str] = "patch"
    OWN: ClassVar[tuple[tuple[str, Any], ...]] = (("site", "resid"),)
    POSITIONALS: ClassVar[tuple[str, ...]] = ("text", "corrupt")


@dataclass(frozen=True)
class DlaRequest(CausalRequest):
    """``attn dla``: each head's and MLP's direct part of the target's logit."""

    command: ClassVar[str] = "dla"


REQUESTS = {"ablate": AblateRequest, "patch": PatchRequest, "dla": DlaRequest}


def own_options(request: Any) -> list[tuple[str, Any]]:
    """(flag, value) of each of the command's own options (its class's ``OWN``), None for a default:
    a causal test's and attn attribute's and attn circuit's."""
    return [("--" + name.replace("_", "-"), None if getattr(request, name) == default else getattr(request, name))
            for name, default in request.OWN]
