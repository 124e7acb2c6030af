"""``attn matrix --transformer ... --html``: the interactive page, opened in headless Chromium.

The numbers the page shows (beside the keys when a query is hovered, in the heatmap's cells) are
compared with ``attn matrix --json`` for the same options; every request the page makes is
logged over the DevTools protocol, and only the file itself may be one.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from typer.testing import CliRunner

from attncli.cli.main import app

SENTENCE, PAIR = "time flies like an arrow", "fruit flies like a banana"


def run(*args):
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.stderr
    return result


def reference(model, *args) -> dict:
    return json.loads(run("matrix", SENTENCE, "--pair", PAIR, "--transformer", str(model), *args, "--json").stdout)


def chromium_or_skip() -> str:
    from _chromium import find_chromium

    chromium = find_chromium()
    if chromium is None:
        message = "no Chromium installed (apt-get install chromium) to open the page"
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run installs it, so CI must run this test")
        pytest.skip(message)
    return chromium


def fmt(row) -> list[str]:
    return [f"{w:.3f}" for w in row]


# JavaScript run in the page: events as a user's (bubbling), values read back from the DOM
HOVER = "document.querySelector('.q[data-i=\"{i}\"]').dispatchEvent(new MouseEvent('mouseover', {{bubbles: true}}))"
KEYS = "[...document.querySelectorAll('.k .w')].map(e => e.textContent)"
CELLS = "[...document.querySelectorAll('#matrix tr')].slice(1).map(tr => [...tr.querySelectorAll('td')].map(td => td.textContent))"
ROWS = "[...document.querySelectorAll('#matrix tr th.r')].map(th => th.textContent)"
HEADERS = "[...document.querySelectorAll('#matrix tr:first-child th')].slice(1).map(th => th.textContent)"


def pick(select: str, value: str) -> str:
    return (f"(() => {{ const s = document.getElementById('{select}'); s.value = '{value}'; "
            "s.dispatchEvent(new Event('change', {bubbles: true})); })()")


def hovered(i: int) -> str:
    return f"(() => {{ {HOVER.format(i=i)}; return {KEYS}; }})()"


def test_the_page_shows_what_json_gives_and_requests_nothing(tiny_bert_dir, tmp_path):
    from _chromium import evaluate_in_page
    from test_export import assert_offline

    chromium = chromium_or_skip()
    page = tmp_path / "page.html"
    run("matrix", SENTENCE, "--pair", PAIR, "--transformer", str(tiny_bert_dir), "--html", str(page))
    text = page.read_text()
    assert_offline(text)
    assert "default-src 'none'" in text
    assert not re.search(r"""\s(src|href)\s*=\s*["']""", text)  # nothing to load, not even a local file
    assert text.count("</script>") == 2  # the data's and the code's: the embedded JSON closes nothing

    head_view = reference(tiny_bert_dir, "--layer", "1", "--head", "2")
    words = reference(tiny_bert_dir, "--layer", "0", "--words", "--hide-special")
    block = reference(tiny_bert_dir, "--layer", "0", "--words", "--hide-special", "--filter", "b-a")
    rollout = reference(tiny_bert_dir, "--layer", "1", "--rollout")

    requested: list[str] = []
    steps = [
        "document.getElementById('tab-model').click()",
        "document.querySelectorAll('#modelview [data-layer][data-head]').length",
        "document.querySelector('#modelview [data-layer=\"1\"][data-head=\"2\"]').click()",  # open layer 1 head 2
        "document.body.getAttribute('data-drawn')",
        hovered(3),
        CELLS,
        HEADERS,
        pick("layer", "0"), pick("head", "mean"),
        "document.getElementById('words').click()", "document.getElementById('hide').click()",
        hovered(1),
        pick("filter", "b-a"),
        CELLS,
        pick("filter", "all"), "document.getElementById('words').click()", "document.getElementById('hide').click()",
        pick("layer", "1"), "document.getElementById('rollout').click()",
        hovered(4),
        "document.getElementById('rollout').click()", "document.getElementById('hide').click()", ROWS,
        "document.getElementById('words').click()", ROWS,
    ]
    got = evaluate_in_page(chromium, page.as_uri(), steps, requested)
    thumbs, drawn, keys_13, cells, headers = got[1], got[3], got[4], got[5], got[6]
    keys_words, block_cells, keys_rollout = got[11], got[13], got[19]
    assert requested == [page.as_uri()]  # the file itself, nothing else

    assert thumbs == head_view["layers"] * head_view["heads"]
    assert drawn.startswith("layer 1 head 2")
    assert keys_13 == fmt(head_view["weights"][3])  # hover query 3: where it attends, with its numbers
    assert cells == [fmt(row) for row in head_view["weights"]]
    # a pair's keys are marked A / B, as its rows: the two "flies" columns are told apart
    assert headers == [f"{s.upper()} {t}" if s else t for s, t in zip(head_view["key_segments"], head_view["key_tokens"])]
    assert headers.count("A fl") == 1 and headers.count("B fl") == 1
    assert keys_words == fmt(words["words"]["weights"][1])  # words, special tokens hidden, mean of the heads
    assert block_cells == [fmt(row) for row in block["words"]["weights"]]  # the B-A block
    assert keys_rollout == fmt(rollout["weights"][4])
    # the rows are numbered as attn matrix numbers them: input positions (words: their index among
    # the input's words), kept when --hide-special drops the special tokens
    hidden = reference(tiny_bert_dir, "--layer", "1", "--hide-special")
    mark = lambda s: f"{s.upper()} " if s else ""  # noqa: E731
    assert got[22] == [f"{n} {mark(s)}{t}" for n, s, t in zip(hidden["rows"], hidden["segments"], hidden["tokens"])]
    assert got[22][0].startswith("1 ")
    segs = [head_view["segments"][head_view["rows"].index(g[0])] for g in words["words"]["groups"]]
    assert got[24] == [f"{n} {mark(s)}{t}" for n, s, t in zip(words["words"]["rows"], segs, words["words"]["tokens"])]
    assert got[24][0].startswith("1 ")


def test_script_json_closes_no_script_and_reads_back():
    from attncli.views.page import script_json

    data = {"text": "</script><!-- <script>alert(1)</script> & \u2028 \u2029", "x": [0.5, 1e-7]}
    text = script_json(data)
    assert not re.search(r"[<>&\u2028\u2029]", text)
    assert json.loads(text) == data
    with pytest.raises(ValueError):
        script_json({"w": float("nan")})


def test_a_hostile_sentence_stays_data(tiny_bert_dir, tmp_path):
    page = tmp_path / "page.html"
    run("matrix", "</script><script>alert(1)</script> <!--", "--transformer", str(tiny_bert_dir), "--html", str(page))
    text = page.read_text()
    assert text.count("</script>") == 2 and text.count("<script") == 2
    assert "<!--" not in text
    data = re.search(r'<script type="application/json" id="attn-data">(.*?)</script>', text, re.S).group(1)
    assert json.loads(data)["text"] == "</script><script>alert(1)</script> <!--"


def test_a_page_too_big_is_refused_before_any_work(tiny_bert_dir, tmp_path, monkeypatch):
    import attncli.views.page as page_module

    page = tmp_path / "page.html"
    doc = json.loads(run("matrix", SENTENCE, "--transformer", str(tiny_bert_dir), "--json").stdout)
    T, L, h = len(doc["tokens"]), doc["layers"], doc["heads"]
    weights = L * (h + 2) * T * T * 2 * 2  # (heads, mean, rollout) x (special tokens shown, hidden) x (tokens, words)
    monkeypatch.setattr(page_module, "MAX_NUMBERS", weights - 1)
    result = CliRunner().invoke(app, ["matrix", SENTENCE, "--transformer", str(tiny_bert_dir), "--html", str(page)],
                                env={"COLUMNS": "400"})
    assert result.exit_code == 2
    assert f"--html: the interactive page of {T} tokens would hold {weights:,} weights" in result.stderr
    assert not page.exists() and result.stdout == ""
    monkeypatch.setattr(page_module, "MAX_NUMBERS", weights)
    run("matrix", SENTENCE, "--transformer", str(tiny_bert_dir), "--html", str(page))
    assert page.exists()


def test_explore_s_html_export_is_the_page_and_bounded_alike(tiny_bert_dir, monkeypatch):
    import attncli.views.page as page_module
    from attncli.errors import BadInput
    from attncli.explore.checkpoint_state import compute, export_text
    from attncli.explore.state import ExploreState

    state = ExploreState(SENTENCE, transformer=str(tiny_bert_dir), pair=PAIR, layer=1, head=2)
    res = compute(state, {})
    page = export_text(res, state, ".html")
    data = json.loads(re.search(r'id="attn-data">(.*?)</script>', page, re.S).group(1))
    assert data["start"] == {"layer": 1, "head": 2, "words": False, "hide_special": False, "rollout": False,
                             "filter": "all", "view": "head", "show": "weights"}
    monkeypatch.setattr(page_module, "MAX_NUMBERS", 10)
    with pytest.raises(BadInput, match="--html: the interactive page of"):
        export_text(res, state, ".html")


TITLE = "document.querySelector('#matrix td[data-i=\"{i}\"][data-j=\"{j}\"]').title"


def page_of(model, tmp_path, *args):
    page = tmp_path / "page.html"
    run("matrix", SENTENCE, "--transformer", str(model), *args, "--html", str(page))
    return page


def one(model, *args) -> dict:
    return json.loads(run("matrix", SENTENCE, "--transformer", str(model), *args, "--json").stdout)


def numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"= (-?[\d.]+(?:e-?\d+)?)", text)]


def test_the_norms_view_and_its_tooltip_are_attn_matrix_show_norms(tiny_bert_dir, tmp_path):
    """--show norms --html: the page opens on the layer's ||sum_h alpha f(x)||; a head shows its
    ||alpha f(x)||, and a cell's hover gives alpha, ||f(x_j)|| and their product as --explain does."""
    from _chromium import evaluate_in_page

    chromium = chromium_or_skip()
    page = page_of(tiny_bert_dir, tmp_path, "--show", "norms")
    summed = one(tiny_bert_dir, "--show", "norms", "--layer", "1")
    head = one(tiny_bert_dir, "--show", "norms", "--layer", "0", "--head", "2", "--explain", "1", "2")
    requested: list[str] = []
    got = evaluate_in_page(chromium, page.as_uri(), [
        CELLS, "document.body.getAttribute('data-drawn')",
        pick("layer", "0"), pick("head", "2"), CELLS, TITLE.format(i=1, j=2), hovered(1),
        "document.getElementById('words').disabled", pick("show", "weights"), CELLS,
    ], requested)
    assert requested == [page.as_uri()]
    assert got[0] == [fmt(row) for row in summed["weights"]]
    assert got[1].startswith("layer 1 ||alpha f(x)||, the 4 heads' vectors added")
    assert got[4] == [fmt(row) for row in head["weights"]]
    steps = {s["name"]: s["value"] for s in head["explanation"]["steps"]}
    alpha, size, product = numbers(got[5])
    assert alpha == pytest.approx(steps["alpha"], rel=1e-5)  # fixed: the page shows the JSON's %.6g (5e-6 of each)
    assert size == pytest.approx(steps["||f(x_J)||"], rel=1e-5)  # fixed: the page shows the JSON's %.6g (5e-6 of each)
    assert product == pytest.approx(steps["||alpha f(x_J)||"], rel=1e-5) == pytest.approx(head["weights"][1][2], rel=1e-5)  # fixed: %.6g JSON
    assert got[6] == fmt(head["weights"][1])
    assert got[7] is True  # norms are token by token: --words is off
    assert got[9] == [fmt(row) for row in one(tiny_bert_dir, "--layer", "0", "--head", "2")["weights"]]


def test_the_scores_view_leaves_masked_cells_blank(tiny_gpt2_dir, tmp_path):
    from _chromium import evaluate_in_page

    chromium = chromium_or_skip()
    page = page_of(tiny_gpt2_dir, tmp_path, "--show", "scores")
    ref = one(tiny_gpt2_dir, "--show", "scores", "--layer", "1", "--head", "0")
    requested: list[str] = []
    got = evaluate_in_page(chromium, page.as_uri(), [pick("head", "0"), CELLS, TITLE.format(i=0, j=1)], requested)
    assert requested == [page.as_uri()]
    # blank exactly where the JSON has null; else its number to 3 decimals (JavaScript's toFixed
    # rounds a tie such as -10.0625 away from zero, Python's format to even: compared as numbers)
    assert [[c == "" for c in row] for row in got[1]] == [[w is None for w in row] for row in ref["weights"]]
    assert all(abs(float(c) - w) <= 5e-4 + 1e-12 for row, ref_row in zip(got[1], ref["weights"])  # fixed: toFixed(3)
               for c, w in zip(row, ref_row) if w is not None)
    assert ref["weights"][0][1] is None and "masked" in got[2]


def test_the_flow_view_is_attn_matrix_flow_of_each_layer(tiny_bert_dir, tmp_path):
    from _chromium import evaluate_in_page

    chromium = chromium_or_skip()
    page = page_of(tiny_bert_dir, tmp_path, "--flow")
    requested: list[str] = []
    got = evaluate_in_page(chromium, page.as_uri(), [
        CELLS, pick("layer", "0"), CELLS, "document.getElementById('head').disabled", hovered(2),
    ], requested)
    assert requested == [page.as_uri()]
    last, first = one(tiny_bert_dir, "--flow"), one(tiny_bert_dir, "--flow", "--layer", "0")
    assert got[0] == [fmt(row) for row in last["weights"]]
    assert got[2] == [fmt(row) for row in first["weights"]] != got[0]
    assert got[3] is True and got[4] == fmt(first["weights"][2])


INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize("show", ["weights", "alti", "value-zeroing"])
def test_control_and_bidi_characters_are_shown_escaped_on_the_page(tiny_gpt2_dir, tmp_path, show):
    """The page's data is the JSON's exact text; what it draws (the title line, the token labels,
    their tooltips, the hover readout) shows ESC and U+202E as attncli.io.textio.visible does."""
    from _chromium import evaluate_in_page

    chromium = chromium_or_skip()
    page = tmp_path / "page.html"
    text = "the cat\x1b[2J sat on the mat\u202e and the dog"
    run("matrix", text, "--transformer", str(tiny_gpt2_dir), "--show", show, "--html", str(page))
    data = re.search(r'<script type="application/json" id="attn-data">(.*?)</script>', page.read_text(), re.S).group(1)
    assert json.loads(data)["text"] == text  # the data is exact
    tooltips = "[...document.querySelectorAll('[title]')].map(e => e.getAttribute('title')).join(' ')"
    got = evaluate_in_page(chromium, page.as_uri(), [
        "document.body.innerText", hovered(6), "document.getElementById('readout').textContent", tooltips,
        "document.getElementById('sub').textContent"], [])
    for drawn in (got[0], got[2], got[3]):
        assert not INVISIBLE.search(drawn), INVISIBLE.findall(drawn)
    assert got[4] == "the cat\\x1b[2J sat on the mat\\u202e and the dog"
