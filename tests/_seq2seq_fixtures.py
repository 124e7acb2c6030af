"""Tiny random encoder-decoders for the tests, written with ``save_pretrained`` into a directory.

    build_t5(dir)    T5ForConditionalGeneration, 2 + 2 layers, relative position buckets, with a
                     Unigram tokenizer (one piece per word of TEXT, letters for the rest) as T5Tokenizer
    build_bart(dir)  BartForConditionalGeneration, 2 + 2 layers, 4 encoder heads and 2 decoder heads
                     (so a stack's head count matters), with a byte-level BPE as BartTokenizer

Both tokenizers are built offline (no hub). Importing this module imports neither torch nor
transformers; the builders do, inside.
"""

from __future__ import annotations

from pathlib import Path

try:
    from _transformer_fixtures import TEXT, _check_tokenizer, _finish, _seed, train_byte_bpe
except ImportError as exc:  # run as a script without the test extra (the fixtures' conftest imports pytest)
    if __name__ != "__main__":
        raise
    import sys

    from attncli.env.extras import install_command

    sys.exit(f"error: building the model needs {exc.name or exc}, which is not installed: the test extra, "
             f"{install_command('test')}")

SIZES = dict(d_model=16, layers=2, ffn=24)


def t5_vocab() -> list[tuple[str, float]]:
    """A Unigram vocabulary: the specials, one piece per word of TEXT, then single characters."""
    words = sorted({w for t in TEXT for w in t.replace(",", " ,").replace(".", " .").split()})
    return ([("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + [("▁" + w, -1.0) for w in words]
            + [(c, -5.0) for c in "abcdefghijklmnopqrstuvwxyz0123456789.,"] + [("▁", -3.0)])


def build_t5(directory: Path) -> Path:
    from transformers import T5Config, T5ForConditionalGeneration, T5Tokenizer

    directory = Path(directory)
    tokenizer = T5Tokenizer(vocab=t5_vocab(), extra_ids=0)
    _check_tokenizer(tokenizer, "<unk>")
    _seed()
    config = T5Config(vocab_size=len(tokenizer), d_model=SIZES["d_model"], d_kv=4, d_ff=SIZES["ffn"],
                      num_layers=SIZES["layers"], num_decoder_layers=SIZES["layers"], num_heads=4,
                      relative_attention_num_buckets=8, relative_attention_max_distance=16, initializer_factor=2.0,
                      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return _finish(T5ForConditionalGeneration(config), tokenizer, directory)


def build_bart(directory: Path) -> Path:
    from transformers import BartConfig, BartForConditionalGeneration, BartTokenizer

    directory = Path(directory)
    vocab, merges = train_byte_bpe(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tokenizer = BartTokenizer(vocab=vocab, merges=merges)
    _check_tokenizer(tokenizer, "<unk>")
    _seed()
    config = BartConfig(vocab_size=len(vocab), d_model=SIZES["d_model"], encoder_layers=SIZES["layers"],
                        decoder_layers=SIZES["layers"], encoder_attention_heads=4, decoder_attention_heads=2,
                        encoder_ffn_dim=SIZES["ffn"], decoder_ffn_dim=SIZES["ffn"], max_position_embeddings=64,
                        init_std=0.4, pad_token_id=vocab["<pad>"], bos_token_id=vocab["<s>"],
                        eos_token_id=vocab["</s>"], decoder_start_token_id=vocab["</s>"], forced_eos_token_id=None)
    return _finish(BartForConditionalGeneration(config), tokenizer, directory)


BUILDERS = {"t5": build_t5, "bart": build_bart}


if __name__ == "__main__":  # docs/transformers.md: `python tests/_seq2seq_fixtures.py t5 tiny-t5` from a clone
    import sys

    if len(sys.argv) != 3 or sys.argv[1] not in BUILDERS:
        sys.exit(f"usage: python tests/_seq2seq_fixtures.py {{{'|'.join(BUILDERS)}}} FOLDER")
    kind, folder = sys.argv[1], Path(sys.argv[2])
    try:
        BUILDERS[kind](folder)
    except ImportError as exc:  # torch or transformers: the test extra
        from attncli.env.extras import install_command

        sys.exit(f"error: building the model needs {exc.name or exc}, which is not installed: the test extra, "
                 f"{install_command('test')}")
    print(f"{folder}: a tiny random {kind.upper() if kind == 't5' else kind.capitalize()}, "
          f"{SIZES['layers']} + {SIZES['layers']} layers of width {SIZES['d_model']} (seeded)")
