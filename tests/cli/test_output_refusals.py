"""attncli.cli.output.show, the one door every command prints through: --json with an export into
stdout is refused there before anything is written, whichever command forgot to check it first."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from attncli.cli.output import JSON_SHARES_STDOUT, refuse_json_into_stdout, show
from attncli.errors import BadInput
from attncli.views.result import DocumentView


@pytest.mark.parametrize("fmt", ["svg", "html", "png"])
def test_json_and_an_export_into_stdout_are_refused_before_anything_is_written(capfd, fmt):
    written = []
    view = DocumentView({"a": 1})
    view.write_json = written.append  # what show would write first
    exports = SimpleNamespace(**{**dict.fromkeys(("svg", "html", "png", "width")), fmt: f"/proc/{os.getpid()}/fd/1"})
    with pytest.raises(BadInput, match="^" + JSON_SHARES_STDOUT.replace("(", r"\(").replace(")", r"\)") + "$"):
        show(view, json_out=True, exports=exports)
    assert written == [] and capfd.readouterr().out == ""


def test_json_with_an_export_into_a_file_or_an_export_alone_pass(tmp_path):
    refuse_json_into_stdout(SimpleNamespace(svg=tmp_path / "a.svg", html=None, png=None), True)
    refuse_json_into_stdout(SimpleNamespace(svg="/dev/stdout", html=None, png=None), False)
    refuse_json_into_stdout(None, True)
