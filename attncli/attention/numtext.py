"""Large matrices as JSON text, numbers formatted like printf's ``%.6g``, without a Python call per number.

``"%.6g" % x`` costs about 0.2 us per number, so the two 4,096 x 4,096 matrices of ``attn matrix
--json`` (33.5 million numbers) took about 7 s to write. :func:`row_text` formats a block of rows
with NumPy array operations instead and gives byte-for-byte the same text:

1. e = floor(log10|x|) and the 6-digit integer m = round(|x| * 10^(5 - e)), 100000 <= m <= 999999
   (m = 1000000 carries into the next decade, as printf's rounding does).
2. Every number becomes a 16-byte cell: a template from a lookup table keyed by (e, number of
   significant digits after dropping trailing zeros, sign) holds the separator, sign, "0.00"
   prefix, decimal point and "e-05" suffix; the digit bytes of m, masked to those shown, are
   shifted in after the head. Unused bytes are 0 and one ``bytes.translate`` deletes them all.
3. Exactness: the product |x| * 10^(5 - e) is within about 1e-9 of the exact decimal value, so
   rounding it gives printf's digits except when it lies within 1e-7 of a rounding tie, or e was
   misjudged next to a power of ten, or |e| > 300 (subnormals): those few numbers are formatted
   by Python's own ``"%.6g"``. tests/attention/test_numtext.py compares the two on millions of values.
"""

from __future__ import annotations

import numpy as np

E_LO, E_HI = -300, 300  # decimal exponents handled by the array path
CELL = 16  # bytes per number: 2 little-endian uint64 words
_ZERO = (E_HI - E_LO + 1) * 7 * 2  # the keys of 0 and -0, then of a masked cell ("null")
_NULL = _ZERO + 2
_TIE = 0.5 - 1e-7  # |scaled - round(scaled)| above this goes to Python's formatting
_BYTES = [0xFF << (8 * i) for i in range(8)]


def _cell(e: int, nd: int, neg: bool) -> tuple[bytes, bytes, int, int]:
    """(head, suffix, low, high) of the text of a number with decimal exponent e, nd significant digits.

    The text is head + body + suffix. The body comes from the word D of the six digit bytes:
    (D & low) | ((D & high) << 8) keeps the digits shown and opens a gap for the decimal point,
    which the head/suffix template fills (it is the same for every number with this key).
    """
    head = b"," + (b"-" if neg else b"")
    low = high = 0
    point = None  # byte of the body holding the decimal point
    suffix = b""
    if -4 <= e <= 5:  # %g's fixed notation: precision 5 - e
        if e >= 0:
            kept = max(nd, e + 1)  # the integer digits stay, zeros included
            low = sum(_BYTES[: e + 1 if kept > e + 1 else kept])
            if kept > e + 1:
                point, high = e + 1, sum(_BYTES[e + 1:kept])
            blen = kept + (1 if point is not None else 0)
        else:
            head += b"0." + b"0" * (-e - 1)
            low, blen = sum(_BYTES[:nd]), nd
    else:  # exponent notation, at least two exponent digits
        low = _BYTES[0]
        if nd > 1:
            point, high = 1, sum(_BYTES[1:nd])
        blen = nd + (1 if nd > 1 else 0)
        suffix = b"e" + (b"-" if e < 0 else b"+") + b"%02d" % abs(e)
    text = bytearray(CELL)  # the template: head, the point, suffix; 0 where the body's digits go
    text[:len(head)] = head
    if point is not None:
        text[len(head) + point] = ord(".")
    text[len(head) + blen:len(head) + blen + len(suffix)] = suffix
    assert len(head) + blen + len(suffix) <= CELL
    return bytes(text), len(head), low, high


class _Tables:
    def __init__(self) -> None:
        rows = [(b"", 1, 0, 0)] * _ZERO  # key ((e - E_LO) * 7 + nd) * 2 + neg; nd = 0 is never used
        for e in range(E_LO, E_HI + 1):
            for nd in range(1, 7):
                for neg in (False, True):
                    rows[((e - E_LO) * 7 + nd) * 2 + neg] = _cell(e, nd, neg)
        for neg in (False, True):  # 0 and -0
            text = (b",-0" if neg else b",0").ljust(CELL, b"\0")
            rows.append((text, 1, 0, 0))
        rows.append((b",null".ljust(CELL, b"\0"), 1, 0, 0))
        k = len(rows)
        self.by_key = np.zeros((k, 6), np.uint64)  # (K, 6): template words 0-1, low, high, 8 * len(head), 64 - that
        templates = np.frombuffer(b"".join(r[0].ljust(CELL, b"\0") for r in rows), "<u8").reshape(k, 2)
        self.by_key[:, :2] = templates
        self.by_key[:, 2] = np.array([r[2] for r in rows], np.uint64)
        self.by_key[:, 3] = np.array([r[3] for r in rows], np.uint64)
        self.by_key[:, 4] = np.array([8 * r[1] for r in rows], np.uint64)
        self.by_key[:, 5] = 64 - self.by_key[:, 4]
        i = np.arange(1000, dtype=np.uint64)
        d0, d1, d2 = i // 100 + 48, i // 10 % 10 + 48, i % 10 + 48  # ASCII digits
        self.hi = d0 | (d1 << np.uint64(8)) | (d2 << np.uint64(16))  # digits 0-2: bytes 0-2 of D
        self.lo = self.hi << np.uint64(24)  # digits 3-5: bytes 3-5
        text = [str(v) for v in range(1000)]
        self.zeros3 = np.array([3 if v == 0 else len(s) - len(s.rstrip("0")) for v, s in enumerate(text)], np.int64)
        self.pow10 = 10.0 ** np.arange(5 - E_HI, 5 - E_LO + 1, dtype=np.float64)  # 10^(5 - e) at E_HI - e


_tables: _Tables | None = None


def cells(x: np.ndarray, visible: np.ndarray | None = None) -> np.ndarray:
    """(n,) float64 (finite) -> (n, CELL) uint8: "," + the "%.6g" text of each number, 0 bytes to drop.

    ``visible`` (n,) bool: where False the cell is ",null".
    """
    global _tables
    if _tables is None:
        _tables = _Tables()
    tb = _tables
    x = np.ascontiguousarray(x, dtype=np.float64)
    n = len(x)
    ax = np.abs(x)
    zero = ax == 0
    ax[zero] = 1.0  # formatted as 1, then given the key of "0"
    if visible is not None:
        ax[~visible] = 1.0  # a masked cell may hold anything (NaN, inf): it becomes "null"
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.floor(np.log10(ax)).astype(np.int64)
        np.clip(e, E_LO - 1, E_HI + 1, out=e)
        odd = (e < E_LO) | (e > E_HI)
        scaled = ax * tb.pow10.take(E_HI - e, mode="clip")  # ~ |x| * 10^(5 - e), in [99999.5, 1000000.5) when e is right
        m = np.rint(scaled)
        odd |= np.abs(scaled - m) > _TIE
        odd |= (scaled < 99999.5) | (scaled >= 1000000.5)
    carry = m >= 1000000  # rounds up to the next power of ten: 1.00000 x 10^(e + 1)
    e += carry
    odd |= e > E_HI
    mi = m.astype(np.int64)
    mi[carry] = 100000
    odd &= ~zero
    if visible is not None:
        odd &= visible
    if odd.any():
        e[odd] = 0
        mi[odd] = 100000
    hi = (mi * 4294968) >> 32  # mi // 1000 for 0 <= mi < 10^6
    lo = mi - hi * 1000
    nd = 6 - tb.zeros3.take(lo)  # significant digits, 1..6
    round_thousands = np.flatnonzero(lo == 0)  # rare: the trailing zeros reach into the first three digits
    nd[round_thousands] = 3 - tb.zeros3.take(hi[round_thousands])
    neg = np.signbit(x)
    key = ((e - E_LO) * 7 + nd) * 2 + neg
    key[zero] = _ZERO + neg[zero]
    if visible is not None:
        key[~visible] = _NULL
    parts = tb.by_key.take(key, axis=0)  # (n, 6)
    d = tb.hi.take(hi) | tb.lo.take(lo)  # (n,) the six digit bytes
    body = (d & parts[:, 2]) | ((d & parts[:, 3]) << np.uint64(8))
    out = np.empty((n, 2), np.uint64)
    np.bitwise_or(parts[:, 0], body << parts[:, 4], out=out[:, 0])
    np.bitwise_or(parts[:, 1], body >> parts[:, 5], out=out[:, 1])
    b = out.view(np.uint8).reshape(n, CELL)
    _printf_cells(b, x, np.flatnonzero(odd))
    return b


def _printf_cells(b: np.ndarray, x: np.ndarray, where: np.ndarray) -> None:
    """Python's own ``"%.6g"`` into the cells ``where`` of b (n, CELL): the few numbers the array path can't do exactly."""
    for i in where.tolist():
        text = ("%.6g" % x[i]).encode("ascii")
        b[i] = 0
        b[i, 0] = ord(",")
        b[i, 1:1 + len(text)] = np.frombuffer(text, np.uint8)


def row_text(block: np.ndarray, visible: np.ndarray | None = None) -> bytes:
    """(R, C) float64 -> "\\nx,x,...\\nx,x,...": each row's numbers after a newline, comma-separated.

    ``visible`` (R, C) bool: null where False. Numbers are exactly ``"%.6g" % x``.
    """
    R, C = block.shape
    b = cells(block.reshape(-1), None if visible is None else visible.reshape(-1))  # (R * C, CELL)
    b.reshape(R, C * CELL)[:, 0] = ord("\n")  # each row's first separator marks the row start
    return b.tobytes().translate(None, b"\0")
