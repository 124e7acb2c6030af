"""Every call into a model's tokenizer goes through one door (attncli.hf.text.encoding:
``tokenized`` / ``tokenizer_errors``): whatever the tokenizers library raises, at load time or
while encoding or decoding, is a damaged-model message and exit 1, never "internal error".

The case that found it: a WordPiece tokenizer.json whose ``unk_token`` is not in its vocabulary
(the tokenizers library raises "Missing [UNK] token" on the first unknown character).
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import needed
import attncli
from attncli.cli.main import app
from attncli.errors import BadInput, RuntimeFailure, Stopped
from attncli.hf.text.encoding import tokenizer_errors

needed("tokenizers")
needed("safetensors")

OUT_OF_VOCABULARY = "time flies \U0001f99c \ua66e"  # a parrot and a multiocular O: no piece of a small vocabulary


def without_unk(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    spec = json.loads((dst / "tokenizer.json").read_text(encoding="utf-8"))
    assert spec["model"]["type"] == "WordPiece"
    spec["model"]["unk_token"] = "[NOT-IN-THE-VOCABULARY]"
    (dst / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    return dst


def run(*args):
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()
    return CliRunner().invoke(app, list(args))


def assert_damaged(result) -> None:
    err = " ".join(result.stderr.split())
    assert result.exit_code == 1, (result.exit_code, err[-600:])
    assert "damaged model" in err and "its tokenizer fails to" in err and "Missing" in err, err
    assert "internal error" not in err and "Traceback" not in err


@pytest.mark.parametrize("command", [
    ["matrix", OUT_OF_VOCABULARY, "--backend", "numpy"],
    ["matrix", OUT_OF_VOCABULARY, "--backend", "numpy", "--json"],
    ["matrix", "time flies", "--pair", OUT_OF_VOCABULARY, "--backend", "numpy"],
])
def test_a_wordpiece_without_its_unknown_token_is_a_damaged_model(minilm_dir, tmp_path, command):
    bad = without_unk(minilm_dir, tmp_path / "bad")
    result = run(*command[:2], "--transformer", str(bad), *command[2:])
    assert_damaged(result)


def test_mpnet_without_its_unknown_token_is_a_damaged_model(tmp_path):
    needed("torch")
    needed("transformers")
    from _llama_fixtures import build_mpnet

    bad = without_unk(build_mpnet(tmp_path / "mpnet"), tmp_path / "bad")
    assert_damaged(run("matrix", OUT_OF_VOCABULARY, "--transformer", str(bad), "--backend", "numpy"))


def test_the_torch_backend_gives_no_internal_error(minilm_dir, tmp_path):
    needed("torch")
    needed("transformers")
    bad = without_unk(minilm_dir, tmp_path / "bad")
    result = run("matrix", OUT_OF_VOCABULARY, "--transformer", str(bad), "--backend", "torch")
    err = " ".join(result.stderr.split())
    assert result.exit_code in (0, 1) and "internal error" not in err and "Traceback" not in err, err
    if result.exit_code == 1:
        assert "damaged model" in err


def test_lookup_and_lens_of_a_damaged_tokenizer(minilm_dir, tmp_path):
    bad = without_unk(minilm_dir, tmp_path / "bad")
    from attncli.hf import load

    model = load(str(bad), backend="numpy")
    with pytest.raises(RuntimeFailure, match="its tokenizer fails to split the text into tokens"):
        model.encode(OUT_OF_VOCABULARY)
    with pytest.raises(RuntimeFailure, match="its tokenizer fails to split"):
        model.embed([OUT_OF_VOCABULARY])


class PanicException(BaseException):
    """What pyo3 raises for a panic in Rust code (a BaseException, so ``except Exception`` misses it)."""


@pytest.mark.parametrize("raised, passes", [
    (Exception("WordPiece error: Missing [UNK] token"), False),
    (PanicException("called `Option::unwrap()` on a `None` value"), False),
    (TypeError("argument 'ids': 'NoneType' object cannot be converted"), False),
    (Exception(""), False),
    (BadInput("a user's mistake"), True),
    (KeyboardInterrupt(), True),
    (Stopped(15), True),
    (MemoryError(), True),
])
def test_the_door_turns_every_tokenizer_failure_into_a_damaged_model(raised, passes):
    with pytest.raises(type(raised) if passes else RuntimeFailure) as caught:
        with tokenizer_errors("m\x1b", "split the text into tokens"):
            raise raised
    if not passes:
        text = str(caught.value)
        assert text.startswith("damaged model 'm\\x1b': its tokenizer fails to split the text into tokens: ")
        assert text.rstrip().split(": ")[-1]  # says what happened (the class name when the message is empty)


# --- the door has no way around it -----------------------------------------------------------------

ROOT = Path(attncli.__file__).parent
# a call on a tokenizer object: self.tokenizer(...), self.tokenizer.encode(...), tok.encode(...), Tokenizer.from_str(...)
CALL_ON_TOKENIZER = re.compile(r"^(self\.(model\.)?tokenizer|tok|tokenizer|Tokenizer)(\.|\(|$)")
ONLY_CALLED_INSIDE_THE_DOOR = {("hf/backends/torch_backend.py", "_slow_encoding"),  # called from _tokenize
                               # called only inside gguf_tokenizer.build's try, which turns any failure of the
                               # tokenizer it is building into a damaged model (test_gguf_hostile)
                               ("hf/formats/gguf_tokenizer.py", "_add_specials")}


def _doors(node: ast.AST) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return any("tokenized" in ast.unparse(d) for d in node.decorator_list)
    if isinstance(node, ast.With):
        return any("tokenizer_errors" in ast.unparse(item.context_expr) for item in node.items)
    return False


def calls_outside_the_door() -> list[str]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))

        def visit(node, inside: bool, function: str) -> None:
            inside = inside or _doors(node)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                function = node.name
            if isinstance(node, ast.Call) and CALL_ON_TOKENIZER.match(ast.unparse(node.func)):
                if not inside and (rel, function) not in ONLY_CALLED_INSIDE_THE_DOOR:
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node.func)}")
            for child in ast.iter_child_nodes(node):
                visit(child, inside, function)

        visit(tree, False, "")
    return found


def test_every_call_into_a_tokenizer_goes_through_the_door():
    assert calls_outside_the_door() == []


def test_the_door_check_sees_a_call_around_it(monkeypatch, tmp_path):
    stray = tmp_path / "attncli"
    stray.mkdir()
    (stray / "stray.py").write_text("def f(self):\n    return self.tokenizer.encode('x')\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", stray)
    assert calls_outside_the_door() == ["stray.py:2: self.tokenizer.encode"]
