"""Every export parses, whatever the text held: the SVG as XML (xml.etree), the static HTML and
the interactive page as HTML (html.parser), the page's embedded data as JSON, for a sentence
holding every C0 control character, DEL, the C1 controls, ``</script>`` and ``]]>``, on the word
vector, ``--transformer`` and ``lens`` paths and ``attn explore``'s ``x`` (attncli.views.export.markup_safe).
"""

from __future__ import annotations

import html.parser
import json
import re
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from conftest import needed
from attncli.cli.main import app
from attncli.views.export import NOT_MARKUP, markup_safe

C0 = "".join(chr(c) for c in range(0x20))
C1 = "".join(chr(c) for c in range(0x80, 0xA0))
SHORT = "time\x0b\x1b\x00\x7f\x85\x9b]]></script> flies"  # in a drawing's title (its first 60 characters)
HOSTILE = f"{SHORT} {C0} flies \x7f {C1} like </script> an ]]> arrow <!-- & \ufffe"


class _Page(html.parser.HTMLParser):
    """The page's application/json scripts and its title, read as a browser's parser sees them."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.scripts: list[tuple[dict, str]] = []
        self.title = ""
        self._in: tuple | None = None

    def handle_starttag(self, tag, attrs):
        self._in = (tag, dict(attrs), [])

    def handle_data(self, data):
        if self._in is not None:
            self._in[2].append(data)

    def handle_endtag(self, tag):
        if self._in is not None and self._in[0] == tag:
            if tag == "script":
                self.scripts.append((self._in[1], "".join(self._in[2])))
            elif tag == "title":
                self.title = "".join(self._in[2])
        self._in = None


def assert_svg(text: str, title: bool = False) -> None:
    """``text`` parses as SVG; ``title``: its title shows the sentence's vertical tab as an escape."""
    assert not NOT_MARKUP.search(text)
    root = ET.fromstring(text)
    assert root.tag.endswith("svg")
    if title:
        assert "time\\x0b\\x1b" in "".join(root.itertext())


def assert_html(text: str) -> _Page:
    assert not NOT_MARKUP.search(text)
    page = _Page()
    page.feed(text)
    page.close()
    for attrs, body in page.scripts:
        if attrs.get("type") == "application/json":
            json.loads(body)
    return page


def run(args):
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.exit_code, result.stderr[-600:])
    assert "Traceback" not in result.stderr
    return result


def test_markup_safe_escapes_what_xml_forbids_and_keeps_the_rest():
    assert markup_safe("a\x0bb\x1bc\x7fd\x85e\ud800f\tg\nh\ri") == "a\\x0bb\\x1bc\\x7fd\\x85e\\ud800f\tg\nh\ri"
    assert markup_safe("naïve 日本 </script> ]]>") == "naïve 日本 </script> ]]>"


def test_word_vector_exports_parse(tmp_path):
    svg, page = tmp_path / "m.svg", tmp_path / "m.html"
    run(["matrix", HOSTILE, "--svg", str(svg), "--html", str(page)])
    assert_svg(svg.read_text(encoding="utf-8"))
    assert_html(page.read_text(encoding="utf-8"))


@pytest.fixture
def bert(tiny_bert_dir):
    needed("tokenizers")
    return tiny_bert_dir


def test_transformer_exports_and_the_page_parse(bert, tmp_path):
    svg, page = tmp_path / "t.svg", tmp_path / "t.html"
    run(["matrix", HOSTILE, "--transformer", str(bert), "--backend", "numpy", "--svg", str(svg), "--html", str(page)])
    assert_svg(svg.read_text(encoding="utf-8"), title=True)
    parsed = assert_html(page.read_text(encoding="utf-8"))
    assert [a.get("type") for a, _ in parsed.scripts].count("application/json") >= 1
    assert "\\x0b" in parsed.title and "</script>" in parsed.title  # shown, escaped, whole


def test_model_view_export_parses(bert, tmp_path):
    svg = tmp_path / "mv.svg"
    run(["matrix", HOSTILE, "--transformer", str(bert), "--backend", "numpy", "--model-view", "--svg", str(svg)])
    assert_svg(svg.read_text(encoding="utf-8"), title=True)


def test_lens_exports_parse(tiny_gpt2_dir, tmp_path):
    needed("tokenizers")
    svg, page = tmp_path / "l.svg", tmp_path / "l.html"
    run(["lens", SHORT, "--transformer", str(tiny_gpt2_dir), "--svg", str(svg), "--html", str(page)])
    assert_svg(svg.read_text(encoding="utf-8"), title=True)
    assert_html(page.read_text(encoding="utf-8"))


def test_png_title_with_controls_is_drawn(tmp_path):
    needed("PIL")
    png = tmp_path / "m.png"
    run(["matrix", HOSTILE, "--png", str(png)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_explore_exports_parse(tmp_path):
    from attncli.attention.matrix import compute
    from attncli.explore.state import ExploreState, export

    state = ExploreState(HOSTILE)
    res = compute(state.request())
    assert_svg(export(res, state, "e.svg", tmp_path).read_text(encoding="utf-8"))
    assert_html(export(res, state, "e.html", tmp_path).read_text(encoding="utf-8"))
    doc = json.loads(export(res, state, "e.json", tmp_path).read_text(encoding="utf-8"))
    assert doc["tokens"]


def test_the_page_s_json_escapes_del_c1_and_surrogates():
    from attncli.views.page import script_json

    text = script_json({"t": "a\x7fb\x85c\ud800d</script>"})
    assert not NOT_MARKUP.search(text) and "</" not in text
    assert json.loads(text) == {"t": "a\x7fb\x85c\ud800d</script>"}
    assert re.fullmatch(r"[^\x00-\x1f]*", text)
