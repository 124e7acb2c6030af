"""``attn explore --transformer`` with a long text's views (--rows, --top-k, --pool): what the app
exports is what ``attn matrix`` prints for the command it copies."""

from __future__ import annotations

import json
import shlex

import pytest
from conftest import needed
from typer.testing import CliRunner

needed("textual", reason="attn explore needs the explore extra (textual)")
needed("safetensors", reason="the NumPy transformer path needs the pretrained extra")

from test_explore import drive, press  # noqa: E402

from attncli.cli.main import app as cli  # noqa: E402
from attncli.explore.checkpoint_state import command_line  # noqa: E402
from attncli.explore.state import ExploreState  # noqa: E402

TEXT = "the bank was closed. we sat by the river bank. then home"


def transformer_json(command: str) -> dict:
    args = shlex.split(command)
    assert args[:2] == ["attn", "matrix"]
    result = CliRunner().invoke(cli, [*args[1:], "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("options,key", [({"top_k": 2, "rows": "3-6"}, "top_k"), ({"pool": "sentence"}, "pool"),
                                         ({"rows": "word:bank"}, None)])
def test_the_app_exports_the_long_view_attn_matrix_prints(tiny_bert_dir, tmp_path, options, key):
    async def script(app, pilot):
        await press(app, pilot, "x")
        app.screen.query_one("#export-path").value = "view.json"
        await press(app, pilot, "enter")
        assert app.message == f"wrote {tmp_path / 'view.json'}"

    state = ExploreState(TEXT, transformer=str(tiny_bert_dir), head=1, **options)
    app = drive(script, state, size=(160, 50), cwd=tmp_path)
    command = command_line(app.result, app.state)  # --explain of the cursor's cell as input positions
    for option, value in (("--rows", options.get("rows")), ("--top-k", options.get("top_k")),
                          ("--pool", options.get("pool"))):
        assert (value is None) or f"{option} {value}" in command
    written = json.loads((tmp_path / "view.json").read_text())
    assert written == transformer_json(command)
    if key is not None:
        assert written[key] is not None and written["weights"] is None and "--explain" not in command
    else:
        assert len(written["rows"]) == 4 and written["weights"]  # ban ##k, twice


@pytest.mark.parametrize("args,needle", [(["--top-k", "2"], "needs --transformer"), (["--pool", "foo"], "--pool 'foo'"),
                                         (["--top-k", "2", "--pool", "4"], "give one of them")])
def test_explore_refuses_bad_long_views(tiny_bert_dir, args, needle):
    extra = [] if needle == "needs --transformer" else ["--transformer", str(tiny_bert_dir)]
    result = CliRunner().invoke(cli, ["explore", TEXT, *extra, *args])
    assert result.exit_code == 2 and needle in result.stderr, result.output
