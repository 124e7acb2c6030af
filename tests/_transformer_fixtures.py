"""Tiny random Hugging Face models for the tests, written with ``save_pretrained`` into a directory.

Each builder writes ``config.json``, ``model.safetensors`` and ``tokenizer.json`` (plus what the
tokenizer class writes beside them), so attn loads it by path through the same code as a hub id.
The weights are drawn with a large ``initializer_range`` so the attention is far from uniform and
a wrong step in a forward pass shows in the numbers. Importing this module imports neither torch
nor transformers; the builders do, inside.

    build_bert(dir)        BertModel, WordPiece vocab file written here (uncased)
    build_roberta(dir)     RobertaModel, byte-level BPE trained in memory with `tokenizers`
    build_distilbert(dir)  DistilBertModel, the same WordPiece vocab
    build_electra(dir)     ElectraModel with embedding_size < hidden_size (embeddings_project)
    build_gpt2(dir)        GPT2LMHeadModel (LM head tied to wte), byte-level BPE
    every_parameter_drawn(src, dst)   a copy of a model with every parameter drawn from N(0, 0.5^2)
    compare_with_transformers(path, texts)   attn's NumPy pass against transformers' on that model
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from conftest import needed

from _tolerance import f32_close, f32_size

TEXT = [
    "time flies like an arrow",
    "fruit flies like a banana",
    "the cat sat on the mat and the dog sat on the log",
    "a quick brown fox jumps over the lazy dog",
    "attention is all you need, said the paper in 2017.",
    "colourless green ideas sleep furiously",
    "she sells sea shells by the sea shore",
]

# a WordPiece vocabulary that splits some words into pieces ("flies" -> "fl", "##ies")
WORDPIECE = (
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + list(".,!?'-")
    + list("abcdefghijklmnopqrstuvwxyz0123456789")
    + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    + "time like an arrow fruit a the cat sat on mat and dog log quick brown fox over lazy is all you need"
      " said paper in she sea by green sleep".split()
    + ["fl", "##ies", "ban", "##ana", "##s", "##ed", "##ing", "jump", "##ly", "2017"]
)

SIZES = dict(hidden=32, layers=2, heads=4, intermediate=37, positions=40)
INIT = 0.4  # initializer_range: peaked attention, so a wrong step cannot hide in near-uniform rows


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: each byte's character in a byte-level BPE vocabulary (as
    transformers builds it, written here from its definition): the printable bytes stand for
    themselves, the rest are moved up to 256 + n in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _seed() -> None:
    """Seed torch, and run it on one thread: for models this small, two threads only wait on each
    other (a tiny forward pass took 0.5 s instead of 2 ms on a busy 2-core machine)."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)


def write_vocab(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "vocab.txt"
    path.write_text("\n".join(WORDPIECE) + "\n", encoding="utf-8")
    return path


def _check_tokenizer(tokenizer, unk: str) -> None:
    """The tokenizer really tokenizes (a vocab silently ignored gives only [UNK])."""
    tokens = tokenizer.tokenize("time flies like an arrow")
    assert tokens and unk not in tokens, tokens


def _finish(model, tokenizer, directory: Path) -> Path:
    model.eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (directory / name).is_file(), f"{name} missing in {directory}"
    return directory


def build_bert(directory: Path) -> Path:
    from transformers import BertConfig, BertModel, BertTokenizer

    directory = Path(directory)
    vocab = write_vocab(directory)
    tokenizer = BertTokenizer(str(vocab))  # positional: `vocab_file=` is silently ignored in 5.x
    _check_tokenizer(tokenizer, "[UNK]")
    _seed()
    config = BertConfig(vocab_size=len(WORDPIECE), hidden_size=SIZES["hidden"], num_hidden_layers=SIZES["layers"],
                        num_attention_heads=SIZES["heads"], intermediate_size=SIZES["intermediate"],
                        max_position_embeddings=SIZES["positions"], initializer_range=INIT)
    return _finish(BertModel(config), tokenizer, directory)


def build_distilbert(directory: Path) -> Path:
    from transformers import DistilBertConfig, DistilBertModel, DistilBertTokenizer

    directory = Path(directory)
    vocab = write_vocab(directory)
    tokenizer = DistilBertTokenizer(str(vocab))
    _check_tokenizer(tokenizer, "[UNK]")
    _seed()
    config = DistilBertConfig(vocab_size=len(WORDPIECE), dim=SIZES["hidden"], n_layers=SIZES["layers"],
                              n_heads=SIZES["heads"], hidden_dim=SIZES["intermediate"],
                              max_position_embeddings=SIZES["positions"], initializer_range=INIT)
    return _finish(DistilBertModel(config), tokenizer, directory)


def build_electra(directory: Path) -> Path:
    """ElectraModel (a discriminator's encoder) with embedding_size < hidden_size: embeddings_project."""
    from transformers import ElectraConfig, ElectraModel, ElectraTokenizer

    directory = Path(directory)
    vocab = write_vocab(directory)
    tokenizer = ElectraTokenizer(str(vocab))
    _check_tokenizer(tokenizer, "[UNK]")
    _seed()
    config = ElectraConfig(vocab_size=len(WORDPIECE), embedding_size=16, hidden_size=SIZES["hidden"],
                           num_hidden_layers=SIZES["layers"], num_attention_heads=SIZES["heads"],
                           intermediate_size=SIZES["intermediate"], max_position_embeddings=SIZES["positions"],
                           initializer_range=INIT)
    return _finish(ElectraModel(config), tokenizer, directory)


def train_byte_bpe(specials: list[str], vocab_size: int = 300) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A byte-level BPE trained in memory on TEXT: (vocab, merges) for RoBERTa/GPT-2 tokenizers."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TEXT * 3, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return model["vocab"], merges


def build_roberta(directory: Path) -> Path:
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizer

    directory = Path(directory)
    vocab, merges = train_byte_bpe(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tokenizer = RobertaTokenizer(vocab=vocab, merges=merges)
    _check_tokenizer(tokenizer, "<unk>")
    _seed()
    config = RobertaConfig(vocab_size=len(vocab), hidden_size=SIZES["hidden"], num_hidden_layers=SIZES["layers"],
                           num_attention_heads=SIZES["heads"], intermediate_size=SIZES["intermediate"],
                           max_position_embeddings=SIZES["positions"] + 2, initializer_range=INIT,
                           pad_token_id=vocab["<pad>"], bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"],
                           type_vocab_size=1)
    return _finish(RobertaModel(config), tokenizer, directory)


def build_gpt2(directory: Path) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

    directory = Path(directory)
    vocab, merges = train_byte_bpe(["<|endoftext|>"])
    tokenizer = GPT2Tokenizer(vocab=vocab, merges=merges)
    _check_tokenizer(tokenizer, "<|endoftext|>")
    _seed()
    config = GPT2Config(vocab_size=len(vocab), n_embd=SIZES["hidden"], n_layer=SIZES["layers"], n_head=SIZES["heads"],
                        n_inner=SIZES["intermediate"], n_positions=SIZES["positions"], initializer_range=INIT,
                        bos_token_id=vocab["<|endoftext|>"], eos_token_id=vocab["<|endoftext|>"])
    return _finish(GPT2LMHeadModel(config), tokenizer, directory)


def build_opt(gpt2_dir: Path, directory: Path) -> Path:
    """A tiny OPT decoder with the GPT-2 fixture's tokenizer: a family neither attn's NumPy pass nor
    the torch backend's trace maps (what each refuses by name)."""
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(gpt2_dir))
    torch.manual_seed(0)
    config = transformers.OPTConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, ffn_dim=20,
                                    num_attention_heads=2, max_position_embeddings=40, word_embed_proj_dim=16)
    transformers.OPTForCausalLM(config).eval().save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


def build_opt_lm(directory: Path) -> Path:
    """A tiny OPT causal LM with tests/_llama_fixtures' tokenizer (BOS, EOS, a pad id): a decoder
    attn's NumPy pass does not run, which loads on the transformers path (attn lens refuses it there)."""
    import torch
    import transformers

    from _llama_fixtures import build_tokenizer

    tok = build_tokenizer()
    torch.manual_seed(0)
    config = transformers.OPTConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, ffn_dim=37,
                                    num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=32,
                                    pad_token_id=0, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    transformers.OPTForCausalLM(config).save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


BUILDERS = {"bert": build_bert, "roberta": build_roberta, "distilbert": build_distilbert, "gpt2": build_gpt2,
            "electra": build_electra}


# Models with every parameter drawn: the tiny models above are saved as transformers initialises
# them (every bias 0, every LayerNorm weight 1), so a dropped bias, a bias added with the wrong sign
# or a LayerNorm weight read as its bias would go unseen; drawn, they show in the numbers.
PAIR_TEXTS = ("time flies like an arrow", "fruit flies like a banana")


def every_parameter_drawn(src: Path, dst: Path, seed: int = 0, **config_changes) -> str:
    torch = needed("torch")
    transformers = needed("transformers")
    shutil.copytree(src, dst)
    config = transformers.AutoConfig.from_pretrained(src)
    for key, value in config_changes.items():
        setattr(config, key, value)
    cls = transformers.AutoModelForCausalLM if config.model_type == "gpt2" else transformers.AutoModel
    torch.manual_seed(seed)
    model = cls.from_config(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    model.eval().save_pretrained(dst)
    return str(dst)


def compare_with_transformers(path: str, texts: tuple[str, ...]) -> None:
    """Every layer's and head's attention for ``texts`` (float64, 1e-10), the mean of the last
    hidden state of texts[0] alone (``embed``, float32: 1e-4) and, for GPT-2, the logits."""
    torch = needed("torch")
    transformers = needed("transformers")
    from attncli.hf import load

    tok = transformers.AutoTokenizer.from_pretrained(path)
    config = transformers.AutoConfig.from_pretrained(path)
    cls = transformers.AutoModelForCausalLM if config.model_type == "gpt2" else transformers.AutoModel
    reference = cls.from_pretrained(path, attn_implementation="eager").double().eval()
    ours = load(path, backend="numpy")
    with torch.no_grad():
        out = reference(**tok(*texts, return_tensors="pt"), output_attentions=True)
        single = tok(texts[0], return_tensors="pt")
        alone = reference(**single, output_hidden_states=True)
    want = np.stack([a[0].numpy() for a in out.attentions])  # (L, h, T, T)
    got = ours.attentions(ours.encode(*texts))
    assert got.shape == want.shape
    assert np.abs(got - want).max() < 1e-10
    hidden = alone.hidden_states[-1][0].numpy()  # (T, d): after ln_f for GPT-2
    f32_close(ours.embed([texts[0]])[0], hidden.mean(axis=0), *f32_size(path))  # embed runs in float32
    if config.model_type == "gpt2":
        logits, _ = ours.logits_and_attentions(single["input_ids"][0].tolist())
        np.testing.assert_allclose(logits, alone.logits[0].numpy(), rtol=0, atol=1e-9)
