"""Empty input is a clear refusal (exit 2) on every path, never a view of nothing.

An empty or blank sentence, prompt, query or --pair sentence, and a view that --hide-special
empties: each is one line on stderr saying what is empty, exit 2, before any model is loaded
where the check needs none. Without the check a pretrained model showed its [CLS] and [SEP]
alone as if they were the sentence's attention (exit 0).
"""

from __future__ import annotations

import pytest

from conftest import needed
from typer.testing import CliRunner

from attncli.cli.main import app as cli

PATHS = [
    (["matrix", ""], "sentence is empty"),
    (["matrix", "   "], "sentence is empty"),
    (["matrix", "a b", "--context", " "], "context is empty"),
    (["matrix", "", "--transformer", "BERT"], "sentence is empty"),
    (["matrix", " \t ", "--transformer", "BERT"], "sentence is empty"),
    (["matrix", "", "--transformer", "BERT", "--hide-special"], "sentence is empty"),
    (["matrix", "  ", "--transformer", "BERT", "--model-view"], "sentence is empty"),
    (["matrix", "a b", "--transformer", "BERT", "--pair", ""], "--pair sentence is empty"),
    (["matrix", "a b", "--transformer", "BERT", "--pair", "   "], "--pair sentence is empty"),
    (["generate", ""], "prompt is empty"),
    (["generate", "   "], "prompt is empty"),
    (["generate", "", "--transformer", "GPT2"], "prompt is empty"),
    (["lookup", ""], "query is empty"),
    (["lookup", "   "], "query is empty"),
    (["lookup", "", "--encoder", "BERT"], "query is empty"),
    (["lookup", "  ", "--encoder", "BERT"], "query is empty"),
    (["explore", ""], "sentence is empty"),
    (["explore", "   "], "sentence is empty"),
    (["explore", "", "--transformer", "BERT"], "sentence is empty"),
    (["explore", "a b", "--transformer", "BERT", "--pair", " "], "--pair sentence is empty"),
]


@pytest.mark.parametrize("args,message", PATHS, ids=[" ".join(repr(a) if not a.strip() else a for a in args)
                                                     for args, _ in PATHS])
def test_empty_input_is_exit_2_with_a_message(tiny_bert_dir, tiny_gpt2_dir, args, message):
    args = [str(tiny_bert_dir) if a == "BERT" else str(tiny_gpt2_dir) if a == "GPT2" else a for a in args]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    said = " ".join(result.stderr.split())
    assert said.startswith("error: ") and message in said, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not any(line.startswith("warning") for line in lines), "a model was loaded before the check"


def test_a_view_emptied_by_hide_special_is_refused(tiny_bert_dir):
    """Every token special (the encoding of an empty text): select refuses instead of a NaN mean."""
    from attncli.attention import checkpoint_views as pv
    from attncli.errors import BadInput
    from attncli.hf import load

    model = load(str(tiny_bert_dir), backend="numpy")
    enc = model.encode("")
    assert all(enc.special) and len(enc.tokens) == 2  # [CLS] [SEP]
    attentions = model.attentions(enc)  # (L, h, 2, 2)
    with pytest.raises(BadInput, match="--hide-special"):
        pv.select(attentions, layer=0, hide_special=True, tokens=enc.tokens, segments=enc.segments,
                  special=enc.special, word_ids=enc.word_ids, word_texts=enc.words)


def test_the_app_refuses_an_edited_empty_sentence(tiny_bert_dir):
    """attn explore --transformer: a sentence emptied in the app is a message, as at the start."""
    needed("textual")
    from attncli.errors import BadInput
    from attncli.explore.checkpoint_state import compute
    from attncli.explore.state import ExploreState

    for text, pair, what in (("  ", None, "sentence is empty"), ("a b", " ", "--pair sentence is empty")):
        with pytest.raises(BadInput, match=what):
            compute(ExploreState(text, transformer=str(tiny_bert_dir), pair=pair), {})
