"""Never silently wrong: weights a model did not use or did not find, weights of the wrong shape, and
NaN or infinity in a weight or an activation, on both backends.

``report_unused`` turns transformers' loading info (or the numpy path's own comparison of the
safetensors names with what its forward pass reads) into an error that names the tensors (exit 1),
or, with ``allow`` (``--allow-missing-weights``), a warning on stderr. ``check_shapes`` compares the
safetensors header with the shapes the config implies. ``check_finite`` refuses an array holding
NaN or infinity with "damaged model: NaN in <where>". ``check_weight_names``: a NumPy family's
tensors (hf.formats.weights.Weights) against what its forward pass reads.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from attncli.io import messages
from attncli.errors import RuntimeFailure
from attncli.io.textio import visible

ALLOW = "--allow-missing-weights"
SHOWN = 4  # tensor names listed in a message, then "and N more"


def _short(name: str, limit: int = 80) -> str:
    """A stranger's tensor name cut for a message (a header may name a tensor with 5,000 characters)."""
    return name if len(name) <= limit else f"{name[:limit - 3]}... ({len(name):,} characters)"


def _names(keys: Iterable[str]) -> str:
    keys = sorted(keys)
    shown = ", ".join(_short(visible(k)) for k in keys[:SHOWN])
    return shown + (f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else "")


def report_unused(name: str, *, missing: Iterable[str] = (), unexpected: Iterable[str] = (),
                  allow: bool = False, can_allow: bool = True) -> None:
    """RuntimeFailure naming the tensors the checkpoint lacks (they would be random) or holds but
    the model does not use (its attention would be computed without them); with ``allow`` (and
    ``can_allow``: the backend can run without them) a warning instead. (A tensor of another
    shape is damage, never allowed: check_shapes.)"""
    missing, unexpected = set(missing), set(unexpected)
    problems = []
    if missing:
        problems.append(f"{len(missing)} weight(s) the model needs are not in the checkpoint "
                        f"({_names(missing)}: they would be random)")
    if unexpected:
        problems.append(f"{len(unexpected)} weight(s) in the checkpoint are not used by the model "
                        f"({_names(unexpected)}: its attention would be computed without them)")
    if not problems:
        return
    text = f"model '{visible(name)}': " + "; ".join(problems)
    if allow and can_allow:
        messages.warn(text + f"; going on as {ALLOW} asks: the attention shown is not the trained model's")
        return
    hint = (f" ({ALLOW} runs it anyway, with a warning)" if can_allow else
            f" (attn's NumPy path cannot run without them; --backend torch {ALLOW} runs them random, with a warning)")
    raise RuntimeFailure(f"{text}: attn will not show attention that is silently wrong{hint}")


def check_shapes(actual: Mapping[str, Sequence[int]], expected: Mapping[str, tuple[int | None, ...]]) -> None:
    """Each expected tensor present in ``actual`` has the shape the config implies (None: a size
    the config does not state); RuntimeFailure "damaged model: <tensor>: shape (a, b), but
    config.json implies (c, d)" otherwise (a position table shorter than max_position_embeddings)."""
    for tensor, shape in expected.items():
        got = actual.get(tensor)
        if got is None:
            continue
        got = tuple(got)
        if len(got) != len(shape) or any(want is not None and want != n for want, n in zip(shape, got)):
            implied = "(" + ", ".join("any" if n is None else str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"
            raise RuntimeFailure(f"damaged model: {visible(tensor)}: shape {got}, but config.json implies {implied}")


def check_finite(array: Any, where: str) -> None:
    """RuntimeFailure "damaged model: NaN in <where>" when ``array`` holds NaN or infinity."""
    a = np.asarray(array)
    if a.dtype.kind not in "fc" or np.isfinite(a).all():
        return
    kind = "NaN" if np.isnan(a).any() else "infinity"
    raise RuntimeFailure(f"damaged model: {kind} in {where}")


def check_activations(layer: int, x: np.ndarray) -> None:
    """A layer's output holds no NaN or infinity (weights that overflow, or NaN that came in through
    a row the load-time checks did not read); its attention is checked chunk by chunk where it is
    computed (chunked_attention.attend)."""
    check_finite(x, f"layer {layer}'s output")


def check_weight_names(name: str, module: Any, weights: Any, config: dict[str, Any], allow: bool) -> None:
    """The base model's tensors in the file are the ones this forward pass reads, in the shapes
    config.json implies: a missing one is an error (the numpy path cannot make one up), an unused
    one an error or, with ``allow``, a warning; a task head's (cls.*, lm_head) is never counted."""
    present = weights.base_shapes()
    wanted = module.expected(config)
    check_shapes(present, wanted)
    missing = [n for n in wanted if n not in present and n not in module.OPTIONAL]
    unused = [n for n in present if n not in wanted
              and not any(n == ok or n.startswith(ok) or n.endswith("." + ok) for ok in module.UNUSED_OK)]
    report_unused(name, missing=missing, unexpected=unused, allow=allow, can_allow=not missing)
    weights.check_finite(list(wanted))
