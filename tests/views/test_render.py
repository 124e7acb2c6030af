"""Heatmap rendering into a StringIO console of fixed width: numbers, masks, titles, fitting, colour."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from rich.console import Console

from attncli.views.render import BLACK, MASKED, WHITE, Heatmap, contrast_ratio, palette, render_heatmap, render_matrix

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def console(width=80, color=False):
    return Console(file=io.StringIO(), width=width, force_terminal=color, color_system="truecolor" if color else None,
                   no_color=not color, legacy_windows=False)


def text_of(c) -> str:
    return c.file.getvalue()


def causal_heatmap(n=4, labels=None):
    rng = np.random.default_rng(0)
    w = np.tril(rng.random((n, n)))
    w /= w.sum(axis=1, keepdims=True)
    labels = labels or [f"tok{i}" for i in range(n)]
    return Heatmap(w, labels, labels, "scaled · mask: causal · projection: identity", masked=~np.tril(np.ones((n, n), bool)))


def test_every_cell_shows_its_number_and_masked_cells_a_dot():
    hm = causal_heatmap()
    c = console()
    render_heatmap(c, hm)
    out = text_of(c)
    for i in range(4):
        for j in range(4):
            if j <= i:
                assert f"{hm.values[i, j]:.3f}" in out
    body = [line for line in out.splitlines() if line.startswith("tok")]
    assert len(body) == 4
    assert [line.count(MASKED) for line in body] == [3, 2, 1, 0]
    assert "masked (weight exactly 0)" in out
    assert "scaled · mask: causal · projection: identity" in out


def test_plain_output_has_no_escape_codes_and_colour_output_has_backgrounds():
    plain = console()
    render_heatmap(plain, causal_heatmap())
    assert "\x1b[" not in text_of(plain)

    coloured = console(color=True)
    render_heatmap(coloured, causal_heatmap())
    out = text_of(coloured)
    assert re.search(r"\x1b\[[0-9;]*48;2;", out)  # truecolor backgrounds
    # the masked cells carry no background colour
    for line in out.splitlines():
        for m in re.finditer(r"(\x1b\[[0-9;]*m)\s*" + MASKED, line):
            assert "48;" not in m.group(1)
    # removing the escapes leaves the same text as the plain rendering
    assert ANSI.sub("", out).split() == text_of(plain).split()


def test_palette_is_viridis_dark_to_bright_with_readable_text():
    low, low_fg = palette(0.0)
    high, high_fg = palette(1.0)
    assert (low, high) == ("#440154", "#fde725")
    assert (low_fg, high_fg) == (WHITE, BLACK)
    assert contrast_ratio(BLACK, WHITE) == pytest.approx(21.0)
    for t in np.linspace(0, 1, 201):  # WCAG AA for normal text (4.5:1) on every shade of the scale
        bg, fg = palette(t)
        assert contrast_ratio(bg, fg) >= 4.5, (t, bg, fg)
        assert contrast_ratio(bg, fg) >= contrast_ratio(bg, WHITE if fg == BLACK else BLACK)
    lum = [sum(int(palette(t)[0][i : i + 2], 16) for i in (1, 3, 5)) for t in np.linspace(0, 1, 11)]
    assert lum == sorted(lum)  # sequential: brightness grows with the value


@pytest.mark.parametrize("width", [40, 60, 100])
def test_wide_matrices_fit_the_width_in_pages_and_say_what_was_left_out(width):
    rng = np.random.default_rng(1)
    n = 60
    labels = [f"word{i}" for i in range(n)]
    hm = Heatmap(rng.random((n, n)), labels, labels, "title")
    c = console(width)
    render_heatmap(c, hm, max_pages=2)
    out = text_of(c)
    table_lines = [line for line in out.splitlines() if line.startswith("word") or line.startswith(" ")]
    assert all(len(line) <= width for line in table_lines)
    assert "page 1/2" in out and "page 2/2" in out
    assert "left out" in out and "columns 0-" in out


def test_fewer_decimals_before_paging():
    labels = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]
    hm = Heatmap(np.full((10, 10), 0.1234), labels, labels, "t")
    c = console(70)  # 10 x '0.123' + padding needs 72 columns, 10 x '0.12' fits
    render_heatmap(c, hm)
    out = text_of(c)
    table = out.split("colour:")[0]
    assert "0.12 " in table and "0.123" not in table and "page" not in out


def test_rows_beyond_the_limit_are_left_out_and_said():
    n = 100
    labels = [str(i) for i in range(n)]
    hm = Heatmap(np.eye(n), labels, labels, "t", rows=(10, 20), cols=(0, 5))
    c = console(80)
    render_heatmap(c, hm)
    out = text_of(c)
    assert "rows 10-19 of 0-99 shown" in out and "columns 0-4 of 0-99 shown" in out


def test_long_headers_are_abbreviated_and_said():
    labels = ["internationalization", "b", "c"]
    hm = Heatmap(np.eye(3) * 0.5, labels, labels, "t", decimals=(3,))
    c = console(20)
    render_heatmap(c, hm)
    out = text_of(c)
    assert "…" in out and "abbreviated" in out


def _matrix_result(tmp_home, **kw):
    from attncli.vectors import store
    from attncli.attention.masks import MaskSpec
    from attncli.attention.matrix import MatrixRequest, compute

    words = "time flies like an arrow".split()
    store.save_vectors("r", words, np.random.default_rng(0).standard_normal((5, 8)))
    mask = kw.pop("mask", MaskSpec())
    return compute(MatrixRequest(text="time flies like an arrow", model="r", mask=mask, **kw))


def test_multihead_view_shows_each_head_and_the_mean(attn_home):
    res = _matrix_result(attn_home, variant="multihead", heads=2)
    c = console(100)
    render_matrix(c, res)
    out = text_of(c)
    assert "head 0 of 0-1" in out and "head 1 of 0-1" in out and "mean of 2 heads" in out  # 0-based, as --head
    assert "head 2" not in out
    assert "multi-head" in out and "projection: identity" in out


def test_empty_rows_are_announced(attn_home):
    from attncli.attention.masks import MaskSpec

    res = _matrix_result(attn_home, context="time flies like an arrow arrow arrow arrow", mask=MaskSpec(window=1))
    assert not res.attention.empty_rows  # every query has a key within 1 position
    res = _matrix_result(attn_home, mask=MaskSpec(causal=True, window=1, pad_to=9))
    c = console(100)
    render_matrix(c, res)
    assert res.attention.empty_rows == [6, 7, 8]  # row 6 sees keys 5 and 6 only: both pads
    assert "row 6 (<pad>) has every key masked" in text_of(c)


def test_svg_export_through_a_recording_console(attn_home):
    res = _matrix_result(attn_home)
    c = Console(record=True, file=io.StringIO(), width=90)
    render_matrix(c, res)
    svg = c.export_svg(title="t")
    assert svg.lstrip().startswith("<svg") and "arrow" in svg


# -- the small things a newcomer read ------------------------------------------------------------


def test_one_row_left_is_named_as_one_row():
    labels = [str(i) for i in range(13)]
    for rows, cols, said in (((2, 3), None, "row 2 of 0-12 shown"), ((2, 5), None, "rows 2-4 of 0-12 shown"),
                             (None, (7, 8), "column 7 of 0-12 shown")):
        c = console(120)
        render_heatmap(c, Heatmap(np.eye(13), labels, labels, "t", rows=rows, cols=cols))
        out = " ".join(text_of(c).split())
        assert said in out and "2-2" not in out and "7-7" not in out, out
    c = console(34)  # pages of columns: the last holds one
    words = ["time", "flies", "like", "an", "arrow"]
    render_heatmap(c, Heatmap(np.tril(np.full((5, 5), 0.2)), words, words, "t", decimals=(2,)))
    out = " ".join(text_of(c).split())
    assert "(column 4, page 2/2)" in out and "4-4" not in out, out


def test_a_difference_that_rounds_to_zero_is_0_000_not_minus_0_000():
    from attncli.views.render import number

    assert [number(x, 3) for x in (-1e-9, -0.0, 0.0, -0.0004, -0.0005001, 1e-9)] == \
        ["0.000", "0.000", "0.000", "0.000", "-0.001", "0.000"]
    c = console(80)
    render_heatmap(c, Heatmap(np.array([[-1e-9, 0.362], [-0.2, 1e-9]]), ["a", "b"], ["a", "b"], "delta",
                              diverging=True, decimals=(3,)))
    out = text_of(c)
    assert "-0.000" not in out and "0.000" in out and "-0.200" in out


def test_the_cursor_brackets_hug_the_number_in_a_wide_column():
    """A column wider than its numbers (a long header): '[0.313]' at the number, never '[ 0.313]'."""
    labels = ["time", "internationalization"]
    c = console(120)
    hm = Heatmap(np.array([[0.687, 0.313], [0.5, 0.5]]), labels, labels, "t", decimals=(3,), cursor=(0, 1))
    render_heatmap(c, hm)
    lines = text_of(c).splitlines()
    row = next(line for line in lines if "[" in line)
    assert "[0.313]" in row and "[ " not in row, row
    plain = lines[lines.index(row) + 1]  # the next row: the bracketed cell ends where its cells end
    assert len(row.rstrip()) == len(plain.rstrip()), (row, plain)
