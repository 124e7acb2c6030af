"""attn generate's pretrained decoder (attncli/generate/hf_decoder.py) against the tokenizers and
transformers libraries themselves and hand-worked labels: labels, the model's facts, prompts (plain
and chat), single tokens and the lens refusals. A tiny random Llama (tests/_llama_fixtures.py: a
tokenizer that puts <s> in front, a chat template, </s> as the end of text) is built once per module.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import needed

from attncli.errors import BadInput
from attncli.generate.hf_decoder import PretrainedLM, load_pretrained, shown


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    needed("torch")
    needed("transformers")
    from _llama_fixtures import build_decoder

    return build_decoder("llama", tmp_path_factory.mktemp("generate-decoder") / "llama")


def tokenizer_of(directory: Path):
    """The model's tokenizer.json read by the tokenizers library itself: the reference."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(directory / "tokenizer.json"))


def copy_with_config(src: Path, dst: Path, **changes) -> Path:
    """A copy of model directory ``src`` whose config.json has ``changes`` (a value None: the field removed)."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (dst / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return dst


# -- labels ------------------------------------------------------------------------------------

@pytest.mark.parametrize("piece, label", [
    ("ab", "ab"),                # pieces join with nothing between them
    (" cat", "cat"),             # GPT-2's Ġcat: the leading space dropped
    ("café", "café"),            # printable non-ASCII stays as it is
    ("Xmas X", "Xmas X"),        # only spaces are stripped
    ("\x1b[31m", "\\x1b[31m"),   # a control character is escaped, as Python writes it
    ("\n", "\\n"),
    ("\u202e", "\\u202e"),       # an invisible bidi override too
    (" ", "␣"),                  # a lone space is ␣, one per space
    ("   ", "␣␣␣"),
    ("", "∅"),                   # no text at all
])
def test_a_label_is_the_piece_trimmed_and_escaped(piece, label):
    assert shown(piece) == label


# -- the decoder's model facts -----------------------------------------------------------------

def test_an_encoder_is_refused_naming_the_model_and_what_generate_needs(tiny_bert_dir):
    from attncli.hf import load

    model = load(str(tiny_bert_dir))
    with pytest.raises(BadInput) as refused:
        PretrainedLM(model)
    message = str(refused.value)
    assert f"model '{model.name}' (bert) is an encoder: it cannot generate text" in message
    assert message.endswith("attn generate needs a causal LM (GPT-2 family, or any AutoModelForCausalLM)")


def test_vocabulary_and_end_of_text_come_from_the_model(llama_dir):
    tok = tokenizer_of(llama_dir)
    dec = load_pretrained(str(llama_dir))
    assert dec.vocab_size == tok.get_vocab_size() == json.loads((llama_dir / "config.json").read_text())["vocab_size"]
    assert dec.eos_ids == (tok.token_to_id("</s>"),) != (0,)  # nonzero: id 0 is falsy, and hides a check of its truth made in place of its type


# -- prompts -----------------------------------------------------------------------------------

def test_a_plain_prompt_is_the_tokenizers_own_encoding(llama_dir):
    tok = tokenizer_of(llama_dir)
    ref = tok.encode("the cat sat")  # with the <s> its post-processor adds
    assert ref.tokens[0] == "<s>"
    enc = load_pretrained(str(llama_dir)).encode("the cat sat")
    assert enc.ids == enc.inputs == ref.ids
    assert enc.tokens == [tok.decode([i], skip_special_tokens=False) for i in ref.ids]
    assert enc.mapping == [{"token": tok.decode([i], skip_special_tokens=False), "id": i, "piece": p}
                           for i, p in zip(ref.ids, ref.tokens)]
    assert enc.notes == [f"the prompt is {len(ref.ids)} token(s) of the model's own tokenizer"]


@pytest.mark.parametrize("how", ["load_pretrained", "PretrainedLM"])
def test_a_chat_prompt_is_transformers_apply_chat_template(how, llama_dir):
    from transformers import AutoTokenizer

    from attncli.hf import load

    hf = AutoTokenizer.from_pretrained(str(llama_dir))
    want = hf.apply_chat_template([{"role": "user", "content": "the cat sat"}], add_generation_prompt=True,
                                  tokenize=True)["input_ids"]
    assert want.count(hf.bos_token_id) == 1
    dec = load_pretrained(str(llama_dir), chat=True) if how == "load_pretrained" else \
        PretrainedLM(load(str(llama_dir)), chat=True)
    enc = dec.encode("the cat sat")
    assert enc.ids == want
    assert enc.notes == [f"the prompt is {len(want)} token(s) of the model's own tokenizer, wrapped in its chat template"]


def test_chat_without_a_template_names_the_model(llama_dir, tmp_path):
    path = shutil.copytree(llama_dir, tmp_path / "no-template")
    (path / "chat_template.jinja").unlink()
    dec = load_pretrained(str(path), chat=True)
    with pytest.raises(BadInput) as refused:
        dec.encode("the cat sat")
    assert f"model '{dec.name}' has no chat template" in str(refused.value)


def test_an_empty_or_too_long_prompt_says_what_to_do(llama_dir):
    dec = load_pretrained(str(llama_dir))
    with pytest.raises(BadInput) as empty:
        dec.encode("  ")
    assert str(empty.value).startswith("the prompt is empty") and str(empty.value).endswith("give a few words to continue")
    context = json.loads((llama_dir / "config.json").read_text())["max_position_embeddings"]  # 64
    with pytest.raises(BadInput) as long:
        dec.encode("the cat sat " * context)
    message = str(long.value)
    assert f"({context} tokens, its context)" in message
    assert f"shorten it to at most {context - 1} tokens" in message  # one position left for the token it writes


# -- single tokens -----------------------------------------------------------------------------

def test_a_byte_piece_keeps_its_raw_text_and_a_whole_piece_decodes(llama_dir):
    tok = tokenizer_of(llama_dir)
    dec = load_pretrained(str(llama_dir))
    halves = [i for i in range(tok.get_vocab_size()) if "\ufffd" in tok.decode([i], skip_special_tokens=False)]
    assert halves  # the byte-level alphabet holds the bytes 0x80-0xff, each half a character
    for i in halves[:5]:
        assert dec.token(i) == tok.id_to_token(i) and "\ufffd" not in dec.token(i)
    sat = tok.token_to_id("Ġsat")
    assert dec.token(sat) == tok.decode([sat]) == " sat"


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_token_id_is_a_vocabulary_entry_else_the_one_token_of_the_word(backend, llama_dir):
    """On either path (the transformers path's tokenizer is transformers' own, without token_to_id)."""
    tok = tokenizer_of(llama_dir)
    dec = load_pretrained(str(llama_dir), backend=backend)
    assert dec.model.backend == backend
    assert dec.token_id("Ġsat") == tok.token_to_id("Ġsat") is not None  # an entry as written
    assert tok.token_to_id("sat") is None
    spaced = tok.encode(" sat", add_special_tokens=False).ids  # the word as inside a text: one token
    assert len(spaced) == 1 and dec.token_id("sat") == spaced[0]
    assert len(tok.encode(" cat", add_special_tokens=False).ids) > 1 and len(tok.encode("cat").ids) > 1
    assert dec.token_id("cat") is None  # two or more tokens either way


def test_the_transformers_path_refuses_the_lens_naming_model_and_backend(llama_dir):
    dec = load_pretrained(str(llama_dir), backend="torch")
    assert dec.model.backend == "torch"
    with pytest.raises(BadInput) as refused:
        dec.lens([1, 263], 3)
    message = str(refused.value)
    assert "the logit lens reads attn's own NumPy forward pass" in message
    assert f"'{dec.name}' runs on the torch backend" in message


def test_the_lens_keeps_five_tokens_by_default(llama_dir):
    """As ``attn lens`` (-k 5) and the built-in LM's ``lens``."""
    dec = load_pretrained(str(llama_dir))
    lens = dec.lens(dec.encode("the cat sat").inputs)
    assert lens.top_ids.shape[-1] == 5


def test_a_gpt2_config_without_vocab_size_means_gpt2s_own_and_a_smaller_table_is_refused(tiny_gpt2_dir, tmp_path):
    """A GPT-2 config.json without vocab_size means GPT2Config's 50,257 (as transformers reads it,
    which refuses the folder on the size mismatch): the NumPy path names the embedding whose 300
    rows do not match, exit 1, instead of taking the vocabulary from the table."""
    from safetensors import safe_open
    from typer.testing import CliRunner

    from attncli.cli.main import app

    transformers = needed("transformers")
    path = copy_with_config(tiny_gpt2_dir, tmp_path / "m", vocab_size=None)
    with safe_open(str(path / "model.safetensors"), "np") as weights:
        rows = next(weights.get_slice(k).get_shape()[0] for k in weights.keys() if k.endswith("wte.weight"))
    result = CliRunner().invoke(app, ["generate", "the cat", "--transformer", str(path), "-n", "2", "--greedy", "--json",
                                      "--backend", "numpy"])
    assert result.exit_code == 1 and result.stdout == "", result.output
    default = transformers.GPT2Config().vocab_size
    assert f"wte.weight: shape ({rows}, 32), but config.json implies ({default}, 32)" in " ".join(result.stderr.split())


def test_lens_token_on_the_transformers_path_gets_the_lens_refusal(tmp_path):
    """A model type attn's NumPy pass does not run (OPT) loads on the transformers path: --token is
    found there, so the refusal is the lens's own (it said the token was not in the vocabulary)."""
    needed("torch")
    needed("transformers")
    from typer.testing import CliRunner

    from _transformer_fixtures import build_opt_lm
    from attncli.cli.main import app

    opt = build_opt_lm(tmp_path / "opt")
    result = CliRunner().invoke(app, ["lens", "the cat sat", "--transformer", str(opt), "--token", "sat"])
    assert result.exit_code == 2, result.output
    stderr = " ".join(result.stderr.split())
    assert "runs on the torch backend" in stderr and "not one token" not in stderr
