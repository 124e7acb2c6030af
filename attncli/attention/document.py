"""The JSON document of ``attn matrix --json``, written row by row.

Keys (stable; docs/matrix.md): tokens, key_tokens, variant, mask {causal, window, padding},
projection, heads, weights (T x S; the head mean when heads > 1), head_weights (h x T x S or
null), scores (T x S, null where masked), output (T x d_v), empty_rows, settings, and only when
they apply head_scores (h x T x S) and explanation.

Numbers carry 6 significant digits (printf's %.6g: a whole number prints without ".0", so a
masked weight is the JSON number 0); NaN and infinity are refused. The text has one matrix
row per line and is streamed, so a 2,048 x 2,048 matrix never sits in memory as one string.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

import numpy as np
from attncli.attention.numtext import row_text

encode_json = json.JSONEncoder(allow_nan=False, ensure_ascii=False).encode


_NUMBER = "%.6g"  # 6 significant digits, C-speed formatting (3x faster than repr + json)
VECTORISED_FROM = 65_536  # numbers in a matrix: from here on, format with array operations (numtext)
_CHUNK = 32_768  # numbers per piece of text on that path
_THREADS = max(1, min(4, os.cpu_count() or 1))  # formatting threads on that path


class Rows:
    """A (R, C) matrix for JSON: numbers with 6 significant digits, null where ``mask`` is False."""

    def __init__(self, a: np.ndarray, mask: np.ndarray | None = None):
        self.a = np.asarray(a, dtype=np.float64)  # (R, C)
        self.mask = None if mask is None or mask.all() else np.asarray(mask, dtype=bool)
        finite = np.isfinite(self.a)  # (R, C); masked cells may hold anything, they print as null
        if not (finite.all() if self.mask is None else (finite | ~self.mask).all()):
            raise ValueError("a matrix holds NaN or infinity: refusing to write invalid JSON")

    def lines(self):
        """Each row as JSON text (Python's own "%.6g", one call per number)."""
        n = self.a.shape[1]
        full = "[" + ",".join([_NUMBER] * n) + "]"
        specs = np.array([_NUMBER, "null"])
        for i, row in enumerate(self.a):
            if self.mask is None or self.mask[i].all():
                yield full % tuple(row.tolist())
            else:
                fmt = "[" + ",".join(specs[(~self.mask[i]).astype(np.intp)].tolist()) + "]"
                yield fmt % tuple(row[self.mask[i]].tolist())

    def text(self, indent: str):
        """The rows as JSON text, each on its own line after ``indent``, in pieces.

        Large matrices go through :mod:`attncli.attention.numtext` (the same text, formatted with
        array operations instead of one Python call per number).
        """
        R, C = self.a.shape
        if R * C < VECTORISED_FROM:
            for n, line in enumerate(self.lines()):
                yield ("\n" if n == 0 else ",\n") + indent + line
            return
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor


        step = max(1, _CHUNK // max(C, 1))
        row_break = ("],\n" + indent + "[").encode("ascii")

        def piece(start: int) -> str:  # "],\n  [x,x,...],\n  [x,..." (the first piece without "],")
            stop = min(start + step, R)
            vis = None if self.mask is None else self.mask[start:stop]
            text = row_text(self.a[start:stop], vis).replace(b"\n", row_break)
            return text[2 if start == 0 else 0:].decode("ascii")

        # NumPy releases the GIL inside its loops: pieces are formatted by a few threads, in order
        with ThreadPoolExecutor(max_workers=_THREADS) as pool:
            pending: deque = deque()
            for start in range(0, R, step):
                pending.append(pool.submit(piece, start))
                if len(pending) > 2 * _THREADS:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        yield "]"


def document(res, explanation: dict | None = None) -> dict[str, Any]:
    """The document with its matrices as :class:`Rows` (see :func:`to_json` for plain lists)."""
    att = res.attention
    req = res.request
    doc: dict[str, Any] = {
        "tokens": res.tokens,
        "key_tokens": res.key_tokens,
        "variant": req.variant,
        "mask": {"causal": req.mask.causal, "window": req.mask.window, "padding": req.mask.pad_to},
        "projection": req.projection,
        "heads": att.heads,
        "weights": Rows(att.weights),
        "head_weights": [Rows(m) for m in att.head_weights] if att.head_weights is not None else None,
        "scores": Rows(att.scores, att.mask),
        "output": Rows(att.output),
        "empty_rows": att.empty_rows,
        "settings": {
            "model": res.model_name,
            "positions": res.positions,
            "projection": res.projected.label,
            "seed": req.seed,
            "d_k": res.d_k,
            "d_v": res.d_v,
            "max_relative": res.params.get("max_relative"),
            "local_window": res.params.get("window"),
        },
    }
    if att.head_scores is not None:
        doc["head_scores"] = [Rows(s, att.mask) for s in att.head_scores]
    if explanation is not None:
        doc["explanation"] = explanation
    return doc


def to_json(res, explanation: dict | None = None) -> dict[str, Any]:
    """The document as plain Python lists and dicts (exactly what ``--json`` prints)."""
    import io

    buf = io.StringIO()
    write_json(res, buf.write, explanation)
    return json.loads(buf.getvalue())


def write_value(value: Any, write: Callable[[str], Any], indent: str) -> None:
    inner = indent + "  "
    if isinstance(value, Rows):
        write("[")
        for piece in value.text(inner):
            write(piece)
        write("\n" + indent + "]")
    elif isinstance(value, list) and value and isinstance(value[0], Rows):
        write("[")
        for n, m in enumerate(value):
            write(("\n" if n == 0 else ",\n") + inner)
            write_value(m, write, inner)
        write("\n" + indent + "]")
    else:
        write(encode_json(value))


def write_json(res, write: Callable[[str], Any], explanation: dict | None = None) -> None:
    """Stream the document to ``write`` (e.g. ``sys.stdout.write``), one matrix row per line."""
    doc = document(res, explanation)
    write("{")
    for n, (key, value) in enumerate(doc.items()):
        write(("\n" if n == 0 else ",\n") + f"  {encode_json(key)}: ")
        write_value(value, write, "  ")
    write("\n}\n")
