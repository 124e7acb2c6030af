"""Exports (--svg, --html, --png, attn explore's x): laid out for the file, offline, written whole.

The drawings are read back from the files themselves: the SVG's <text> elements placed on their
character grid, the PNG's pixels decoded by tests/_chromium.read_png. Numbers are compared with
``--json``'s, colours with the viridis table of attncli.views.render.
"""

from __future__ import annotations

import errno
import html as htmllib
import json
import os
import re
import stat

import numpy as np
import pytest
from typer.testing import CliRunner

from attncli.cli.main import app
from attncli.vectors import store

# long words, so that a terminal-width layout would have to abbreviate the headers
WORDS = "the international photosynthesis extraordinarily flies like an arrow".split()
SENTENCE = "the international photosynthesis extraordinarily flies like an arrow"
DIM = 10
CHAR_W, LINE_H, BASELINE = 12.2, 24.4, 20  # rich's SVG: 20 px characters, 0.61 wide, lines 1.22 high


@pytest.fixture
def tiny(attn_home):
    rng = np.random.default_rng(1)
    store.save_vectors("tiny", WORDS, rng.standard_normal((len(WORDS), DIM)).astype(np.float32) * 3)
    return "tiny"


def run(*args, env=None):
    return CliRunner().invoke(app, list(args), env=env)


def svg_cells(svg: str) -> list[tuple[int, int, str]]:
    """(line, column, text) of every <text> of the terminal in ``svg`` (the title excluded)."""
    found = []
    for attrs, body in re.findall(r"<text ([^>]*)>([^<]*)</text>", svg):
        if "-title" in attrs:
            continue
        x = float(re.search(r'\bx="([\d.]+)"', attrs).group(1))
        y = float(re.search(r'\by="([\d.]+)"', attrs).group(1))
        found.append((round((y - BASELINE) / LINE_H), round(x / CHAR_W), htmllib.unescape(body).replace("\xa0", " ")))
    return found


def svg_lines(svg: str) -> list[str]:
    """The terminal's lines as drawn in ``svg``."""
    cells = svg_cells(svg)
    lines = [[] for _ in range(max(line for line, _, _ in cells) + 1)]
    for line, col, text in cells:
        row = lines[line]
        row.extend(" " * (col + len(text) - len(row)))
        row[col:col + len(text)] = text
    return ["".join(row).rstrip() for row in lines]


def html_lines(page: str) -> list[str]:
    """The lines of a static rich HTML export (its <pre>, tags dropped)."""
    pre = re.search(r"<code[^>]*>(.*)</code>", page, re.S).group(1)
    return htmllib.unescape(re.sub(r"<[^>]+>", "", pre)).splitlines()


def table_rows(lines: list[str], labels: list[str]) -> dict[str, list[str]]:
    """For each row label, the numbers on the first line that starts with it."""
    rows = {}
    for label in labels:
        line = next(s for s in lines if s.startswith(label + " "))
        rows[label] = line[len(label):].split()
    return rows


def needs_pillow() -> None:
    """Skip without Pillow (the png extra), but fail under CI (the test extra installs it)."""
    try:
        import PIL.ImageDraw  # noqa: F401
    except ImportError as exc:
        message = f"no Pillow ({exc}): the png extra"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def assert_offline(text: str) -> None:
    """Nothing in an export points at the network: no URL but the SVG namespace, no url() but a
    fragment of the same file, no @font-face / @import."""
    for url in re.findall(r"""(?:https?:)?//[^\s"'<>)]+""", text):
        assert url == "http://www.w3.org/2000/svg", url
    for target in re.findall(r"url\(\s*['\"]?([^)'\"]*)", text):
        assert target.startswith("#"), target
    assert "@font-face" not in text and "@import" not in text


# --- 1. laid out for the file ---------------------------------------------------------------------


@pytest.mark.parametrize("columns", ["40", None])
def test_word_vector_export_holds_every_column_whole_with_three_decimals(tiny, tmp_path, columns):
    svg, page = tmp_path / "m.svg", tmp_path / "m.html"
    env = {"COLUMNS": columns} if columns else {"COLUMNS": None}
    doc = json.loads(run("matrix", SENTENCE, "--model", tiny, "--json").stdout)
    result = run("matrix", SENTENCE, "--model", tiny, "--svg", str(svg), "--html", str(page), env=env)
    assert result.exit_code == 0, result.stderr
    weights = np.array(doc["weights"])  # (T, T)
    tokens = doc["tokens"]
    labels = [f"{i} {t}" for i, t in enumerate(tokens)]
    for lines in (svg_lines(svg.read_text()), html_lines(page.read_text())):
        text = "\n".join(lines)
        assert "…" not in text and "page 1/" not in text and "left out" not in text
        header = next(s for s in lines if s.split() == tokens)  # every column header, whole, on one line
        assert header
        rows = table_rows(lines, labels)
        assert [[float(x) for x in rows[label]] for label in labels] == \
            [[float(f"{w:.3f}") for w in row] for row in weights]
        assert all(re.fullmatch(r"\d\.\d{3}", x) for label in labels for x in rows[label])


def test_width_lays_the_export_out_for_that_many_columns(tiny, tmp_path):
    svg = tmp_path / "m.svg"
    result = run("matrix", SENTENCE, "--model", tiny, "--svg", str(svg), "--width", "40")
    assert result.exit_code == 0, result.stderr
    lines = svg_lines(svg.read_text())
    assert max(len(s) for s in lines) <= 40
    assert "page 1/" in "\n".join(lines)  # a 40-column terminal's pages


def test_width_without_an_export_is_bad_input(tiny):
    result = run("matrix", SENTENCE, "--model", tiny, "--width", "60")
    assert result.exit_code == 2 and "--width lays out the --svg / --html / --png files" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("width", ["0", "19", "4001"])
def test_width_out_of_range_is_bad_input(tiny, tmp_path, width):
    result = run("matrix", SENTENCE, "--model", tiny, "--svg", str(tmp_path / "m.svg"), "--width", width)
    assert result.exit_code == 2 and "--width must be between 20 and 4000" in result.stderr
    assert not (tmp_path / "m.svg").exists()


def test_seed_pair_export_from_40_columns_holds_every_token_in_full(minilm_dir, tmp_path):
    """The figure of issue 21: all-MiniLM-L6-v2, layer 2, every head, from a 40-column terminal."""
    svg = tmp_path / "pair.svg"
    args = ["matrix", "time flies like an arrow", "--pair", "fruit flies like a banana", "--transformer",
            str(minilm_dir), "--layer", "2"]
    doc = json.loads(run(*args, "--json").stdout)
    result = run(*args, "--svg", str(svg), env={"COLUMNS": "40"})
    assert result.exit_code == 0, result.stderr
    lines = svg_lines(svg.read_text())
    tokens = doc["tokens"]
    assert len(tokens) == 13 and tokens.count("flies") == 2
    headers = [s for s in lines if s.split() == tokens]
    heads = np.array(doc["head_weights"])  # (h, T, T)
    assert len(headers) == len(heads) + 1  # each head and the mean: all 13 columns, whole, on one line
    text = "\n".join(lines)
    assert "…" not in text and "page 1/" not in text
    # head 5's table: every number as --json has it, to three decimals
    start = lines.index(next(s for s in lines if s.endswith("layer 2 head 5 · weights")))
    rows = [lines[start + 2 + i] for i in range(len(tokens))]
    got = np.array([[float(x) for x in row.split()[-len(tokens):]] for row in rows])
    np.testing.assert_array_equal(got, np.round(heads[5], 3))


def test_model_view_export_draws_every_head_of_a_layer_side_by_side(minilm_dir, tmp_path):
    svg = tmp_path / "mv.svg"
    result = run("matrix", "time flies like an arrow", "--transformer", str(minilm_dir), "--model-view",
                 "--layers", "0-1", "--svg", str(svg), env={"COLUMNS": "40"})
    assert result.exit_code == 0, result.stderr
    lines = svg_lines(svg.read_text())
    for layer in (0, 1):
        at = lines.index(f"layer {layer}")
        assert [int(h) for h in re.findall(r"(?:^|  )\s?(\d+) ", lines[at + 1])] == list(range(12)), lines[at + 1]


# --- 2. offline -----------------------------------------------------------------------------------


def test_every_export_is_offline(tiny, tmp_path):
    svg, page = tmp_path / "m.svg", tmp_path / "m.html"
    result = run("matrix", SENTENCE, "--model", tiny, "--svg", str(svg), "--html", str(page))
    assert result.exit_code == 0, result.stderr
    for path in (svg, page):
        assert_offline(path.read_text())
    assert "monospace" in svg.read_text() and "Fira Code" not in svg.read_text()


def test_the_offline_check_sees_rich_s_remote_font():
    from rich.console import Console
    import io

    console = Console(record=True, file=io.StringIO())
    console.print("x")
    with pytest.raises(AssertionError):
        assert_offline(console.export_svg())


# --- 3. PNG ---------------------------------------------------------------------------------------


def test_png_is_the_svg_s_picture_with_each_cell_in_its_viridis_colour(tiny, tmp_path):
    needs_pillow()
    from _chromium import read_png

    from attncli.views.render import palette

    svg, png = tmp_path / "m.svg", tmp_path / "m.png"
    doc = json.loads(run("matrix", SENTENCE, "--model", tiny, "--json").stdout)
    result = run("matrix", SENTENCE, "--model", tiny, "--svg", str(svg), "--png", str(png))
    assert result.exit_code == 0, result.stderr
    width, height, rows = read_png(png.read_bytes())
    box = re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg.read_text())
    assert (width, height) == (round(float(box.group(1))), round(float(box.group(2))))
    ox, oy = (float(v) for v in re.search(r'<g transform="translate\(([\d.]+), ([\d.]+)\)" clip-path',
                                          svg.read_text()).groups())
    weights = np.array(doc["weights"])  # (T, T)
    lo, hi = weights.min(), weights.max()
    texts = [f"{w:.3f}" for w in weights.ravel()]
    checked = 0
    for (i, j), w in np.ndenumerate(weights):
        if texts.count(f"{w:.3f}") != 1:
            continue  # a number drawn once, so its place in the SVG is its cell's
        line, col, text = next(c for c in svg_cells(svg.read_text()) if c[2].strip() == f"{w:.3f}")
        x = round(ox + (col + 0.5) * CHAR_W)  # the cell's leading space: background, no glyph
        y = round(oy + line * LINE_H + BASELINE - 10)
        expected = palette((w - lo) / (hi - lo))[0]
        want = [int(expected[k:k + 2], 16) for k in (1, 3, 5)]
        got = list(rows[y][3 * x:3 * x + 3])
        assert max(abs(a - b) for a, b in zip(got, want)) <= 2, (i, j, got, want)
        checked += 1
    assert checked >= 5


def test_a_png_too_big_is_bad_input_and_writes_nothing(tiny, tmp_path, monkeypatch):
    needs_pillow()
    import attncli.views.export as export_module

    monkeypatch.setattr(export_module, "MAX_PIXELS", 100_000)
    png = tmp_path / "m.png"
    result = run("matrix", SENTENCE, "--model", tiny, "--png", str(png), env={"COLUMNS": "400"})
    assert result.exit_code == 2 and "--png: the picture would be" in result.stderr
    assert "pixels, more than 100,000: draw less" in result.stderr and not png.exists()


def test_png_without_the_extra_names_it(tiny, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "PIL.ImageDraw", None)  # import PIL.ImageDraw -> ImportError
    result = run("matrix", SENTENCE, "--model", tiny, "--png", str(tmp_path / "m.png"))
    assert result.exit_code == 2
    assert "pip install -e '.[png]'" in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "attn-home"]


# --- 5. written whole or not at all, with open()'s mode ---------------------------------------------


def test_a_full_disk_leaves_the_old_export_whole(tiny, tmp_path, monkeypatch):
    old = tmp_path / "OLD.svg"
    old.write_text("<svg>the good old picture</svg>")
    real_fsync = os.fsync

    def full(fd):
        if not stat.S_ISDIR(os.fstat(fd).st_mode):  # a file's data: the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    result = run("matrix", SENTENCE, "--model", tiny, "--svg", str(old), env={"COLUMNS": "400"})
    assert result.exit_code == 1
    assert "cannot write" in result.stderr and "No space left on device" in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("error:") == 1  # one message (rich may wrap it)
    assert old.read_text() == "<svg>the good old picture</svg>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["OLD.svg", "attn-home"]  # no temp file left


def test_matrix_and_explore_exports_get_open_s_mode(tiny, tmp_path):
    from attncli.attention.matrix import compute
    from attncli.explore.state import ExploreState, export

    old = os.umask(0o022)
    try:
        result = run("matrix", SENTENCE, "--model", tiny, "--svg", str(tmp_path / "m.svg"),
                     "--html", str(tmp_path / "m.html"))
        assert result.exit_code == 0, result.stderr
        state = ExploreState(SENTENCE, model=tiny)
        res = compute(state.request())
        for name in ("e.svg", "e.html", "e.json"):
            export(res, state, name, tmp_path)
    finally:
        os.umask(old)
    for name in ("m.svg", "m.html", "e.svg", "e.html", "e.json"):
        assert oct((tmp_path / name).stat().st_mode & 0o777) == oct(0o644), name


def test_explore_export_is_laid_out_for_the_file(tiny, tmp_path):
    from attncli.attention.matrix import compute
    from attncli.explore.state import ExploreState, export

    state = ExploreState(SENTENCE, model=tiny)
    res = compute(state.request())
    path = export(res, state, "e.svg", tmp_path)
    lines = svg_lines(path.read_text())
    assert any(s.split() == res.tokens for s in lines)
    assert_offline(path.read_text())


def test_explore_exports_a_png(tiny, tmp_path):
    needs_pillow()
    from _chromium import read_png

    from attncli.attention.matrix import compute
    from attncli.explore.state import ExploreState, export

    state = ExploreState(SENTENCE, model=tiny)
    path = export(res := compute(state.request()), state, "e.png", tmp_path)
    width, height, rows = read_png(path.read_bytes())
    assert width > len(res.tokens) * 7 * CHAR_W and height > len(res.tokens) * LINE_H


# files written inside a model directory that is itself swapped in whole (store.writing_model),
# and textual-serve's templates copied into a fresh temporary folder: not output files
BUILT_IN_A_TEMP_DIR = {"vectors/store.py", "tinylm/train.py", "explore/serve.py"}


def test_every_output_file_goes_through_the_one_door():
    """No module writes a file but through attncli.io.fileio (atomic_write / atomic_writer)."""
    from pathlib import Path

    import attncli

    root = Path(attncli.__file__).parent
    around = re.compile(r"""\.write_(text|bytes)\(|\.save_(svg|html|text)\(|\bopen\([^)]*["'][wax]b?["']""")
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "io/fileio.py" or rel in BUILT_IN_A_TEMP_DIR:
            continue
        found += [f"{rel}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1) if around.search(line)]
    assert found == []


def test_a_long_input_is_bounded_in_a_file_and_says_what_is_left_out(tiny, tmp_path):
    from attncli.views.render import FILE_MAX

    page = tmp_path / "m.html"
    sentence = " ".join(WORDS * 20)  # 160 tokens
    result = run("matrix", sentence, "--model", tiny, "--html", str(page), env={"COLUMNS": "40"})
    assert result.exit_code == 0, result.stderr
    lines = html_lines(page.read_text())
    header = next(s for s in lines if s.split()[:len(WORDS)] == WORDS)
    assert len(header.split()) == FILE_MAX  # the first 128 columns, on one line
    assert sum(1 for s in lines if re.match(r"\d+ \S", s)) == FILE_MAX
    assert "left out: rows 0-127 of 0-159 shown; columns 0-127 of 0-159 shown" in " ".join(lines)
