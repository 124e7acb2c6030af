"""Each token's text (attncli/hf/text/token_text.py), per kind of tokenizer, against the ``tokenizers``
library's own decoder: tiny tokenizers of each kind built with the library (GPT-2's byte-level
BPE, SentencePiece's ▁ with byte fallback as Llama's and Gemma's tokenizer.json decode it, the
newer Metaspace decoder, WordPiece, a BPE with a word-end suffix), and the labels a view draws
(attncli.io.textio.token_label: ␣ for a space, controls escaped, bounded)."""

from __future__ import annotations

import re

import pytest
from conftest import needed

needed("tokenizers", reason="the tokenizers' decoders are the reference (the pretrained extra)")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: E402

from attncli.hf.text.token_text import byte_table, decoder_steps, token_texts  # noqa: E402
from attncli.io.textio import MAX_TOKEN_LABEL, token_label  # noqa: E402

TEXT = "When Mary\nand  John went to 東京, café 🙂"
BYTE = re.compile(r"<0x([0-9A-F]{2})>")


def as_bytes(text: str) -> bytes:
    """A token's text back to its bytes: each <0xNN> is the byte NN."""
    out, at = b"", 0
    for m in BYTE.finditer(text):
        out += text[at:m.start()].encode() + bytes([int(m[1], 16)])
        at = m.end()
    return out + text[at:].encode()


def byte_level() -> Tokenizer:
    """GPT-2's kind: a byte-level BPE (SmolLM2, Qwen, Llama 3 decode this way)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    from tokenizers import trainers

    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["When Mary and John went to the store, John gave a drink to Mary"] * 5, trainer=trainer)
    return tok


SP_WORDS = ["▁When", "▁Mary", "▁and", "▁John", "▁went", "▁to", "▁", "東", "京", ",", "▁caf", "e"]


def sentencepiece(decoder) -> Tokenizer:
    """SentencePiece's kind: ▁ for a space and byte fallback (<0x0A> for a newline, <0xC3><0xA9> for
    an é that is not in the vocabulary), with ``decoder``."""
    vocab = [("<unk>", 0.0), ("<s>", 0.0)] + [(f"<0x{b:02X}>", -10.0) for b in range(256)] + [(w, -1.0) for w in SP_WORDS]
    tok = Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoder
    return tok


LLAMA_DECODER = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])  # as Llama's and Gemma's tokenizer.json have it


def texts_of(tok: Tokenizer, text: str = TEXT):
    enc = tok.encode(text)
    return enc, token_texts(enc.tokens, enc.special_tokens_mask, decoder_steps(tok))


def test_byte_level_texts_are_the_decoders_bytes_token_by_token():
    tok = byte_level()
    enc, texts = texts_of(tok)
    assert enc.tokens[1] == "ĠMary" and texts[1] == " Mary" and "\n" in texts
    for piece, text in zip(enc.tokens, texts):
        alone = tok.decoder.decode([piece])  # the library's decode of the token alone
        assert as_bytes(text).decode("utf-8", "replace") == alone  # the same bytes; U+FFFD where we name them
        assert ("<0x" in text) == ("\ufffd" in alone)
    # every token's bytes, joined, are the library's decode of the whole text
    assert b"".join(as_bytes(t) for t in texts).decode() == tok.decode(enc.ids) == TEXT
    assert any("<0x" in t for t in texts)  # the test means something: a piece of a multi-byte character
    assert len(byte_table()) == 256 and byte_table()["Ġ"] == 32 and byte_table()["Ċ"] == 10


@pytest.mark.parametrize("decoder", [LLAMA_DECODER, decoders.Metaspace(replacement="▁", prepend_scheme="always")],
                         ids=["replace-bytefallback-strip", "metaspace"])
def test_sentencepiece_texts_keep_their_leading_space_and_name_their_bytes(decoder):
    tok = sentencepiece(decoder)
    enc, texts = texts_of(tok)
    by_piece = dict(zip(enc.tokens, texts))
    assert by_piece["▁When"] == " When"  # the first token keeps the space it holds (the decoder strips the text's)
    assert by_piece["▁Mary"] == " Mary" and by_piece["東"] == "東"
    if isinstance(decoder, decoders.Sequence):
        assert by_piece["<0x0A>"] == "\n"  # a byte piece that is a character alone: the character
        assert by_piece["<0xC3>"] == "<0xC3>" and by_piece["<0xA9>"] == "<0xA9>"  # é's two bytes, each alone
        assert b"".join(as_bytes(t) for t in texts).decode().removeprefix(" ") == tok.decode(enc.ids)
    for piece, text in zip(enc.tokens, texts):  # inside a text, the token adds what the library adds
        if "<0x" not in text:
            assert tok.decoder.decode(["▁x", piece]) == tok.decoder.decode(["▁x"]) + text


def test_wordpiece_tokens_are_their_own_text_and_special_tokens_stay():
    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "[CLS]": 1, "fl": 2, "##ies": 3, "time": 4}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(["[CLS]"])
    enc = tok.encode("[CLS] time flies")
    texts = token_texts(enc.tokens, enc.special_tokens_mask, decoder_steps(tok))
    assert enc.tokens == ["[CLS]", "time", "fl", "##ies"] and texts == enc.tokens  # ## marks a continuation
    assert [tok.decoder.decode([p]) for p in enc.tokens] == texts  # the library's decode of each alone


def test_a_word_end_suffix_is_a_space_and_no_decoder_is_the_pieces():
    steps = decoder_steps(type("T", (), {"decoder": decoders.BPEDecoder(suffix="</w>")})())
    assert token_texts(["lo</w>", "w"], [False, False], steps) == ["lo ", "w"]
    assert decoders.BPEDecoder(suffix="</w>").decode(["lo</w>", "w"]) == "lo w"
    assert token_texts(["ĠJohn", "▁x"], [False, False], decoder_steps(None)) == ["ĠJohn", "▁x"]
    # a special token is its own piece, whatever the decoder would make of it
    assert token_texts(["Ġ<s>"], [True], decoder_steps(byte_level())) == ["Ġ<s>"]


@pytest.mark.parametrize("text,label", [
    (" John", "␣John"), ("When", "When"), (" ", "␣"), ("  x ", "␣␣x␣"), ("##ing", "##ing"),
    ("\n", "\\n"), ("\t", "\\t"), ("", "∅"), ("<0xE2>", "<0xE2>"),
    ("\x1b[2J", "\\x1b[2J"), ("\u202eevil", "\\u202eevil"), ("\u009b", "\\x9b"),
    ("a\u00a0b", "a\\u00a0b"), ("\u200b", "\\u200b"), ("\u3000", "\\u3000"), ("東京", "東京"),
])
def test_token_labels_show_spaces_and_escape_what_a_terminal_acts_on(text, label):
    assert token_label(text) == label


def test_token_labels_are_bounded():
    huge = "x" * 100_000
    assert token_label(huge) == "x" * MAX_TOKEN_LABEL + "…"
    assert len(token_label("\x1b" * 100_000)) <= 4 * MAX_TOKEN_LABEL + 1  # escapes of the kept part only


def test_a_regex_replace_is_the_librarys_and_a_runaway_pattern_leaves_the_token():
    from tokenizers import Regex

    tok = Tokenizer(models.WordLevel({"<unk>": 0, "a_b": 1}, unk_token="<unk>"))
    tok.decoder = decoders.Replace(Regex("_+"), " ")
    assert token_texts(["a__b"], [False], decoder_steps(tok)) == ["a b"] == [tok.decoder.decode(["a__b"])]
    # a stranger's pattern that backtracks without end: Python's re would never return; the
    # library's bound stops it and the token is shown as it is
    tok.decoder = decoders.Replace(Regex("(a+)+$"), "x")
    hostile = "a" * 40 + "b"
    assert token_texts([hostile, "aaa"], [False, False], decoder_steps(tok)) == [hostile, "x"]

