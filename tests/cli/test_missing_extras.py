"""A command that needs an optional extra says which one, exit 2, before it does any work.

Each case runs ``attn`` in a subprocess whose named modules are hidden (``sys.modules[name] =
None``: importing them fails, ``importlib.util.find_spec`` finds nothing), as on a machine without
that extra. The message must give the command that installs the extra here (attncli.env.extras: the
tests run from a clone, so ``pip install -e '.[EXTRA]'``); no traceback, no
"internal error"; and the work did not start: Brown (nltk) was never imported and nothing was
written under ATTN_HOME.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HIDE = """
import atexit, json, sys
hidden, record = sys.argv[1].split(","), sys.argv[2]
for name in hidden:
    sys.modules[name] = None
atexit.register(lambda: open(record, "w").write(json.dumps(
    sorted(m for m in ("nltk", "torch", "transformers", "textual", "textual_serve") if sys.modules.get(m) is not None))))
sys.argv = ["attn", *sys.argv[3:]]
from attncli.cli.entry import main
main()
"""
NO_EXTRAS = ["torch", "transformers", "tokenizers", "safetensors", "huggingface_hub", "sentence_transformers",
             "textual", "textual_serve"]
PRETRAINED_ONLY = ["torch", "transformers", "sentence_transformers"]


@pytest.mark.parametrize("hidden,args,extra", [
    (["torch"], ["train-attention", "--name", "trained", "--limit-sentences", "50"], "torch"),
    (NO_EXTRAS, ["train-attention", "--name", "trained"], "torch"),
    (["textual", "textual_serve"], ["explore", "a b c"], "explore"),
    (["textual_serve"], ["explore", "a b c", "--serve"], "explore"),
    (NO_EXTRAS, ["matrix", "a b c", "--transformer", "BERT"], "pretrained"),
    (NO_EXTRAS, ["generate", "a b", "--transformer", "GPT2"], "pretrained"),
    (NO_EXTRAS, ["lookup", "a b", "--encoder", "BERT"], "pretrained"),
    (NO_EXTRAS, ["heads", "--transformer", "BERT"], "pretrained"),
    (NO_EXTRAS[:-2], ["explore", "a b c", "--transformer", "BERT"], "pretrained"),
    (PRETRAINED_ONLY, ["matrix", "a b c", "--transformer", "BERT", "--backend", "torch"], "transformers"),
    (PRETRAINED_ONLY, ["explore", "a b c", "--transformer", "BERT", "--backend", "torch"], "transformers"),
], ids=["train-attention", "train-attention-bare", "explore", "explore-serve", "matrix-transformer",
        "generate-transformer", "lookup-encoder", "heads-transformer", "explore-transformer", "matrix-torch", "explore-torch"])
def test_a_missing_extra_is_named_before_any_work(tmp_path, attn_home, tiny_bert_dir, tiny_gpt2_dir, hidden, args, extra):
    args = [str(tiny_bert_dir) if a == "BERT" else str(tiny_gpt2_dir) if a == "GPT2" else a for a in args]
    record = tmp_path / "imported.json"
    result = subprocess.run([sys.executable, "-c", HIDE, ",".join(hidden), str(record), *args],
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    message = " ".join(result.stderr.split())
    assert result.returncode == 2, result.stderr
    assert f"pip install -e '.[{extra}]'" in message and "attncli[" not in message, message
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    imported = json.loads(record.read_text())
    assert "nltk" not in imported, "Brown was being read"
    assert not set(imported) & set(hidden)
    written = [p for p in attn_home.rglob("*") if p.is_file()] if attn_home.exists() else []
    assert written == [], written
