"""docs/notebook.ipynb runs through a real Jupyter kernel (nbclient, ipykernel) and its results
display inline: each drawing cell's outputs carry an image/svg+xml bundle that parses as SVG and
a text/html bundle that parses as HTML, both showing the view; the kernel imports attn from this
tree (PYTHONPATH)."""

from __future__ import annotations

import html.parser
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import needed

nbformat = needed("nbformat")
nbclient = needed("nbclient")
needed("ipykernel")

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "docs" / "notebook.ipynb"


class _Text(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.parts.append(data)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    import os

    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "ATTN_HOME": str(tmp_path_factory.mktemp("attn-home"))}
    env.pop("ATTN_MODEL", None)
    client = nbclient.NotebookClient(nb, timeout=60, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path_factory.mktemp("nb"))}})
    client.execute(env=env)  # the kernel's environment: attn from this tree, a fresh ATTN_HOME
    return nb


def _outputs(nb, needle: str) -> list[dict]:
    cells = [c for c in nb.cells if c.cell_type == "code" and needle in c.source]
    assert len(cells) == 1, needle
    return cells[0].outputs


def _bundle(outputs: list[dict]) -> dict:
    shown = [o for o in outputs if o.output_type in ("execute_result", "display_data")]
    assert len(shown) == 1, [o.output_type for o in outputs]
    return shown[0]["data"]


def _drawn(bundle: dict) -> tuple[str, str]:
    svg = ET.fromstring(bundle["image/svg+xml"])
    assert svg.tag.endswith("svg")
    page = _Text()
    page.feed(bundle["text/html"])
    page.close()
    assert "pre" in page.tags or "code" in page.tags
    return ("".join(svg.itertext()).replace("\xa0", " "), "".join(page.parts).replace("\xa0", " "))


def test_the_notebook_runs_in_a_real_kernel(executed):
    for cell in executed.cells:
        if cell.cell_type == "code":
            assert not [o for o in cell.outputs if o.output_type == "error"], cell.source


def test_a_core_matrix_result_displays_as_its_view_with_its_command_line(executed):
    nb = executed
    svg, page = _drawn(_bundle(_outputs(nb, "r = compute(")))
    for text in (svg, page):
        assert "time" in text and "arrow" in text and "attention weights" in text.lower()
        assert "attn matrix 'time flies like an arrow' --causal" in text


def test_a_view_displays_and_its_command_line_and_document_are_the_cli_s(executed):
    nb = executed
    svg, page = _drawn(_bundle(_outputs(nb, 'MatrixView(r, show="scores")')))
    assert "--show scores" in svg and "--show scores" in page
    outputs = _outputs(nb, "print(view.command_line())")
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert printed.strip() == "attn matrix 'time flies like an arrow' --causal --show scores"
    weights = json.loads(_bundle(outputs)["text/plain"])
    assert [round(w, 3) for w in weights] == [0.293, 0.323, 0.384, 0.0, 0.0]


def test_lookups_display_inline(executed):
    nb = executed
    svg, page = _drawn(_bundle(_outputs(nb, 'lookup("colour"')))
    assert "answer: black" in svg and "answer: black" in page
    assert "attn lookup colour" not in svg  # a lookup made in Python has no file to name: no command line
    outputs = _outputs(nb, "answer = LookupView(")
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert printed.startswith("printf ") and "attn lookup 'top speed' --dict - --temperature 0.5" in printed
    svg, page = _drawn(_bundle(outputs))
    assert "attention over 3 keys" in svg and "--temperature 0.5" in page
