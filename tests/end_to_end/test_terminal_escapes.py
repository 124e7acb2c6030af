"""No terminal control sequence from data reaches the terminal, end to end (issue 20).

The data: a model directory whose *name* holds OSC 52 (write the clipboard), CSI 2J (clear the
screen), a BEL and a right-to-left override; a prompt and sentences holding the same plus a C1
CSI; a tiny GPT-2 whose vocabulary has one token that decodes to those bytes and that greedy
decoding always picks; dictionary keys and values; a model name in an error. Each command runs as
a real process (so rich sees the environment) with colour off (NO_COLOR) and forced on
(FORCE_COLOR): rich's own colour codes (SGR, ``ESC [ ... m``) may appear, nothing else that starts
with ESC, no BEL, no C1 control, no bidi control; the data is shown as visible escapes instead.
The checks of every call site are tests/test_escape_audit.py; this file checks the result.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import needed

REPO = Path(__file__).resolve().parents[2]
INJECTED = "\x1b]52;c;aGk=\x07\x1b[2J\u202e"  # what the hostile token decodes to
PROMPT = "hi \x1b]52;c;eA==\x07\x1b[2J\x9b1m\u202e x"
DIRNAME = "gpt2\x1b]52;c;aGk=\x07\x1b[2J\u202e\x9d0;t\x9c"
SGR = re.compile(r"\x1b\[[0-9;]*m")
COLOURS = {"off": {"NO_COLOR": "1"}, "on": {"FORCE_COLOR": "1"}}


def assert_inert(text: str, where: str) -> None:
    """Nothing but rich's colours: no other ESC sequence, no BEL, no C1 control, no bidi control."""
    rest = SGR.sub("", text)
    bad = sorted({repr(c) for c in rest if c in "\x1b\x07\x08\r" or "\x80" <= c <= "\x9f"
                  or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"})
    assert not bad, f"{where}: control characters reached the terminal: {bad}\n{text[:2000]!r}"
    assert "\x1b]52" not in text and "\x1b[2J" not in text, where


@pytest.fixture(scope="module")
def hostile_gpt2(tmp_path_factory) -> Path:
    """A tiny random GPT-2 in a directory named with control sequences, whose vocabulary has one
    extra token decoding to INJECTED and whose output always picks it: the final layer norm gives
    every position the same vector b, and that token's embedding (tied to the output) is 5 b."""
    needed("torch", reason="the hostile GPT-2 is built with torch and transformers")
    needed("transformers", reason="the hostile GPT-2 is built with torch and transformers")
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

    from _transformer_fixtures import INIT, SIZES, _finish, _seed, bytes_to_unicode, train_byte_bpe

    vocab, merges = train_byte_bpe(["<|endoftext|>"])
    byte_char = bytes_to_unicode()
    piece = "".join(byte_char[b] for b in INJECTED.encode("utf-8"))
    vocab[piece] = len(vocab)
    tokenizer = GPT2Tokenizer(vocab=vocab, merges=merges)
    _seed()
    config = GPT2Config(vocab_size=len(vocab), n_embd=SIZES["hidden"], n_layer=SIZES["layers"], n_head=SIZES["heads"],
                        n_inner=SIZES["intermediate"], n_positions=SIZES["positions"], initializer_range=INIT,
                        bos_token_id=vocab["<|endoftext|>"], eos_token_id=vocab["<|endoftext|>"])
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        b = torch.randn(SIZES["hidden"])
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.copy_(b)
        model.transformer.wte.weight[vocab[piece]] = 5 * b
    assert tokenizer.decode([vocab[piece]]) == INJECTED
    return _finish(model, tokenizer, tmp_path_factory.mktemp("hostile") / DIRNAME)


def attn(*argv: str, colour: str, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(COLOURS[colour], COLUMNS="120", ATTN_HOME=str(home),
               PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "attncli", *argv], capture_output=True, env=env, timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode("utf-8"),
                                       proc.stderr.decode("utf-8"))


def test_the_hostile_model_really_generates_the_injection(hostile_gpt2, attn_home):
    """The premise of the generate tests: the model writes INJECTED, and --json carries it exactly."""
    proc = attn("generate", PROMPT, "--transformer", str(hostile_gpt2), "-n", "2", "--greedy", "--ignore-eos",
                "--json", colour="off", home=attn_home)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["text"] == PROMPT + INJECTED * 2


@pytest.mark.parametrize("colour", COLOURS)
@pytest.mark.parametrize("extra", [[], ["--top", "2"]], ids=["heatmap", "top"])
def test_generate_shows_model_path_prompt_and_text_inertly(hostile_gpt2, attn_home, colour, extra):
    proc = attn("generate", PROMPT, "--transformer", str(hostile_gpt2), "-n", "2", "--greedy", "--ignore-eos",
                *extra, colour=colour, home=attn_home)
    assert proc.returncode == 0, proc.stderr
    assert_inert(proc.stdout, "stdout")
    assert_inert(proc.stderr, "stderr")
    plain = SGR.sub("", proc.stdout)
    assert "\\x1b]52;c;eA==\\x07" in plain  # the prompt, shown
    assert "| \\x1b]52;c;aGk=\\x07\\x1b[2J\\u202e\\x1b]52" in plain  # the generated text, shown
    assert "gpt2\\x1b]52;c;aGk=" in plain  # the model's path, shown


@pytest.mark.parametrize("extra, colour", [(["--model-view"], "off"), (["--model-view"], "on"), ([], "on"),
                                           (["--words"], "on")], ids=["model-view-off", "model-view-on", "heads", "words"])
def test_matrix_transformer_views_are_inert(hostile_gpt2, attn_home, colour, extra):
    proc = attn("matrix", f"a {INJECTED} b", "--transformer", str(hostile_gpt2), *extra, colour=colour, home=attn_home)
    assert proc.returncode == 0, proc.stderr
    assert_inert(proc.stdout, "stdout")
    assert_inert(proc.stderr, "stderr")
    assert "\\x1b" in SGR.sub("", proc.stdout)


@pytest.mark.parametrize("colour", ["on"])
def test_heads_transformer_is_inert(hostile_gpt2, attn_home, colour, tmp_path):
    sentences = tmp_path / "s.txt"
    sentences.write_text(f"the cat {INJECTED} sat\nthe \x9b31m dog \u202eran\n", encoding="utf-8")
    proc = attn("heads", "--transformer", str(hostile_gpt2), "--file", str(sentences), colour=colour, home=attn_home)
    assert proc.returncode == 0, proc.stderr
    assert_inert(proc.stdout, "stdout")
    assert_inert(proc.stderr, "stderr")


@pytest.mark.parametrize("colour", ["on"])  # the escaping does not depend on colour; with it, SGR is allowed
@pytest.mark.parametrize("argv", [
    ["matrix", "a b", "--transformer", f"/nowhere/{DIRNAME}"],
    ["matrix", "a b", "--transformer", f"/nowhere/{DIRNAME}", "--model-view"],
    ["generate", "a b", "--transformer", f"/nowhere/{DIRNAME}"],
    ["lookup", "colour", "--model", DIRNAME],
    ["lookup", "colour", "--dict", f"/nowhere/{DIRNAME}.json"],
    ["import", f"/nowhere/{DIRNAME}.vec", "--name", "x", "--format", "glove"],
    ["import", "/dev/null", "--name", DIRNAME, "--format", "glove"],
], ids=["matrix", "model-view", "generate", "model-name", "dict-path", "import-path", "import-name"])
def test_error_messages_quoting_paths_and_names_are_inert(attn_home, colour, argv):
    proc = attn(*argv, colour=colour, home=attn_home)
    assert proc.returncode == 2, proc.stderr
    assert_inert(proc.stderr, "stderr")
    assert proc.stderr.count("\n") <= 3 and "Traceback" not in proc.stderr
    assert "\\x1b" in SGR.sub("", proc.stderr)  # the name is quoted, visibly


@pytest.mark.parametrize("colour", COLOURS)
def test_lookup_keys_and_values_are_inert_with_colour(attn_home, colour, tmp_path):
    d = {"colour\u202e": f"black{INJECTED}", "speed": f"fast\x9b31m{INJECTED}", "brand": "[link=http://x]P[/link]"}
    path = tmp_path / "d.json"
    path.write_text(json.dumps(d), encoding="utf-8")
    for extra in ([], ["--explain"]):
        proc = attn("lookup", "colour", "--dict", str(path), *extra, colour=colour, home=attn_home)
        assert proc.returncode == 0, proc.stderr
        assert_inert(proc.stdout, "stdout")
        assert "\x1b]8;" not in proc.stdout  # markup in a value is text, not a hyperlink
        assert "black\\x1b]52" in SGR.sub("", proc.stdout)


def test_the_explore_status_line_and_messages_are_inert(hostile_gpt2):
    """attn explore --transformer PATH: the status line names the model's folder, and a refusal
    quotes the sentence; both drawn through visible() (no markup either)."""
    needed("textual", reason="attn explore needs the explore extra (textual)")
    from test_explore import drive, lines_of, press

    from attncli.explore.state import ExploreState

    async def script(app, pilot):
        status = "\n".join(lines_of(app, "#settings"))
        assert "gpt2\\x1b]52" in status, status
        assert_inert(status, "status line")
        app._say(f"cannot read {INJECTED} [bold]x[/]", error=True)
        await press(app, pilot)
        message = "\n".join(lines_of(app, "#message"))
        assert_inert(message, "message")
        assert "[bold]x[/]" in message

    drive(script, ExploreState("a b", transformer=str(hostile_gpt2)), size=(160, 40))


def test_strongest_cell_escapes_its_tokens():
    import numpy as np

    from attncli.views.model_view import strongest

    text = strongest(np.array([[0.1, 0.9], [0.5, 0.5]]), [f"a{INJECTED}", "b\x9b"])
    assert_inert(text, "strongest")
    assert text.startswith("a\\x1b]52")
