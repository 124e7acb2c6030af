"""Encoder-decoders (T5, BART): ``attn matrix --transformer M --target TEXT --stack encoder|decoder|cross``.

The references are independent of attn: transformers' own ``encoder_attentions``,
``decoder_attentions`` and ``cross_attentions`` (eager attention) of the model run with
``labels=`` (so transformers shifts the target itself), and one cross-attention head computed
by hand from the q and k the model's own projection modules output (forward hooks). The models
are tiny and random (tests/_seq2seq_fixtures.py), built once for this module.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import needed
from typer.testing import CliRunner
from _seq2seq_fixtures import SIZES
from _tolerance import f32_close, f32_size
from _transformer_fixtures import PAIR_TEXTS

from attncli.cli.main import app
from attncli.errors import RuntimeFailure

needed("transformers")
needed("torch")

SOURCE, TARGET = "time flies like an arrow", "fruit flies like a banana"
KINDS = ("t5", "bart")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from _seq2seq_fixtures import BUILDERS

    return {kind: BUILDERS[kind](tmp_path_factory.mktemp(f"tiny-{kind}") / kind) for kind in KINDS}


@pytest.fixture(scope="module")
def loaded(models):
    from attncli.hf import load

    return {kind: load(str(path)) for kind, path in models.items()}


@pytest.fixture(scope="module")
def references(models):
    """Per kind: transformers' own model and output for (SOURCE, labels of TARGET), eager attention."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    refs = {}
    for kind, path in models.items():
        tok = AutoTokenizer.from_pretrained(str(path))
        model = AutoModelForSeq2SeqLM.from_pretrained(str(path), attn_implementation="eager").eval()
        src = tok(SOURCE, return_tensors="pt")
        labels = tok(text_target=TARGET, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = model(**src, labels=labels, output_attentions=True)
        as_np = lambda ts: np.stack([a[0].double().numpy() for a in ts])  # noqa: E731 - (L, h, R, C)
        refs[kind] = dict(model=model, tok=tok, src=src, labels=labels,
                          encoder=as_np(out.encoder_attentions), decoder=as_np(out.decoder_attentions),
                          cross=as_np(out.cross_attentions),
                          source_tokens=tok.convert_ids_to_tokens(src["input_ids"][0]))
    return refs


def run(*args):
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def matrix_json(path, *args):
    result = run("matrix", SOURCE, "--transformer", str(path), "--json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def refused(result, message: str, code: int = 2) -> None:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert isinstance(result.exception, SystemExit)  # a message and an exit code, never an escaped exception
    assert "Traceback" not in result.stderr + result.stdout
    assert message in " ".join(result.stderr.split()), result.stderr


# --- the model ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_decoder_reads_the_labels_shifted_right(kind, loaded, references):
    """What transformers feeds the decoder given labels: T5's own _shift_right, BART's
    shift_tokens_right, each behind the config's decoder_start_token_id."""
    ref, model = references[kind], loaded[kind]
    labels = ref["labels"]
    if kind == "t5":
        shifted = ref["model"]._shift_right(labels)
    else:
        from transformers.models.bart.modeling_bart import shift_tokens_right

        cfg = ref["model"].config
        shifted = shift_tokens_right(labels, cfg.pad_token_id, cfg.decoder_start_token_id)
    target = model.encode_target(TARGET)
    assert target.ids == shifted[0].tolist()
    assert target.tokens[0] == {"t5": "<pad>", "bart": "</s>"}[kind] and target.special[0]
    assert target.tokens[1:] == ref["tok"].convert_ids_to_tokens(labels[0])[:-1]  # the last label is not read


@pytest.mark.parametrize("kind", KINDS)
def test_every_stack_equals_transformers(kind, loaded, references):
    ref, model = references[kind], loaded[kind]
    stacks = model.stack_attentions(model.encode(SOURCE), model.encode_target(TARGET))
    for stack in ("encoder", "decoder", "cross"):
        assert stacks[stack].shape == ref[stack].shape, stack
        for layer in range(ref[stack].shape[0]):
            for head in range(ref[stack].shape[1]):
                f32_close(stacks[stack][layer, head], ref[stack][layer, head], *f32_size(model), per_element=True,
                          what=f"{kind} {stack} layer {layer} head {head}")
    f32_close(model.attentions(model.encode(SOURCE)), ref["encoder"], *f32_size(model), per_element=True)


@pytest.mark.parametrize("kind", KINDS)
def test_cross_attention_by_hand_from_the_hooked_q_and_k(kind, models, references):
    """softmax(q k^T * scale) of the last decoder layer's cross-attention, head 1, from what the
    model's own query and key modules output (T5 does not scale; BART scales by 1/sqrt(d_head))."""
    import torch

    ref = references[kind]
    model = ref["model"]
    layer, head = 1, 1
    if kind == "t5":
        attn, scale, heads = model.decoder.block[layer].layer[1].EncDecAttention, 1.0, model.config.num_heads
        q_mod, k_mod = attn.q, attn.k
    else:
        attn, heads = model.model.decoder.layers[layer].encoder_attn, model.config.decoder_attention_heads
        q_mod, k_mod, scale = attn.q_proj, attn.k_proj, (model.config.d_model // heads) ** -0.5
    seen = {}
    hooks = [m.register_forward_hook(lambda mod, args, out, role=role: seen.__setitem__(role, out[0].double().numpy()))
             for role, m in (("q", q_mod), ("k", k_mod))]
    try:
        with torch.no_grad():
            model(**ref["src"], labels=ref["labels"])
    finally:
        for h in hooks:
            h.remove()
    q = seen["q"].reshape(seen["q"].shape[0], heads, -1)[:, head]  # (T, d_head)
    k = seen["k"].reshape(seen["k"].shape[0], heads, -1)[:, head]  # (S, d_head)
    scores = q @ k.T * scale  # (T, S)
    by_hand = np.exp(scores - scores.max(axis=1, keepdims=True))
    by_hand /= by_hand.sum(axis=1, keepdims=True)
    doc = matrix_json(models[kind], "--target", TARGET, "--stack", "cross", "--layer", str(layer), "--head", str(head))
    # the same float32 q and k: only the scores' and the softmax's rounding differ (one layer, d_head <= d_model)
    f32_close(doc["weights"], by_hand, 1, SIZES["d_model"], per_element=True)


def test_embed_pools_the_encoder(loaded, references):
    """attn lookup --encoder on an encoder-decoder: the mean of the encoder's last hidden state."""
    import torch

    ref = references["bart"]
    with torch.no_grad():
        hidden = ref["model"].get_encoder()(**ref["src"]).last_hidden_state[0].double().numpy()  # (S, d)
    f32_close(loaded["bart"].embed([SOURCE])[0], hidden.mean(axis=0), *f32_size(loaded["bart"]))


# --- the CLI ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_each_stack_as_json(kind, models, references):
    ref, path = references[kind], models[kind]
    target_tokens = [{"t5": "<pad>", "bart": "</s>"}[kind]] + ref["tok"].convert_ids_to_tokens(ref["labels"][0])[:-1]
    for stack, rows, cols in (("encoder", ref["source_tokens"], ref["source_tokens"]),
                              ("decoder", target_tokens, target_tokens),
                              ("cross", target_tokens, ref["source_tokens"])):
        doc = matrix_json(path, "--target", TARGET, "--stack", stack)
        assert doc["stack"] == stack and doc["tokens"] == rows and doc["key_tokens"] == cols
        assert doc["source_tokens"] == ref["source_tokens"] and doc["target_tokens"] == target_tokens
        assert doc["causal"] is (stack == "decoder") and doc["layer"] == ref[stack].shape[0] - 1
        assert doc["heads"] == ref[stack].shape[1]
        f32_close(doc["head_weights"], ref[stack][-1], *f32_size(path), per_element=True)
        f32_close(doc["weights"], ref[stack][-1].mean(axis=0), *f32_size(path), per_element=True)
    default = matrix_json(path, "--layer", "0", "--head", "2")  # no --stack: the encoder, as a BERT reads
    assert default["stack"] == "encoder" and default["target_tokens"] is None
    f32_close(default["weights"], ref["encoder"][0, 2], *f32_size(path), per_element=True)


def test_the_decoder_stack_is_causal_and_rolls_out(models, references):
    ref = references["bart"]
    doc = matrix_json(models["bart"], "--target", TARGET, "--stack", "decoder", "--rollout")
    # rollout by hand: R = Â_1 Â_0, Â = rownorm(head mean + I)
    steps = [(a.mean(axis=0) + np.eye(a.shape[-1])) for a in ref["decoder"]]
    steps = [s / s.sum(axis=1, keepdims=True) for s in steps]
    f32_close(doc["weights"], steps[1] @ steps[0], *f32_size(models["bart"]), per_element=True)  # sums of products of weights
    assert np.allclose(np.triu(np.array(doc["weights"]), 1), 0)


def test_cross_words_group_rows_by_target_words_and_columns_by_source_words(models, references):
    """BART's byte-level BPE splits 'time' and 'fruit' into pieces: a word's row is the mean of its
    pieces' rows, its column the sum of their columns; special tokens hidden and rows renormalised."""
    ref = references["bart"]
    tok = ref["tok"]
    src_words = tok(SOURCE).word_ids()  # None for a special token
    tgt_words = [None] + tok(text_target=TARGET).word_ids()[:-1]  # the decoder's input: shifted right
    doc = matrix_json(models["bart"], "--target", TARGET, "--stack", "cross", "--words", "--hide-special",
                      "--layer", "0", "--head", "1")
    cross = ref["cross"][0, 1]  # (T, S)
    cross = cross[np.ix_([w is not None for w in tgt_words], [w is not None for w in src_words])]
    cross = cross / cross.sum(axis=1, keepdims=True)
    rows = [[n for n, w in enumerate(x for x in tgt_words if x is not None) if w == word]
            for word in sorted({w for w in tgt_words if w is not None})]
    cols = [[n for n, w in enumerate(x for x in src_words if x is not None) if w == word]
            for word in sorted({w for w in src_words if w is not None})]
    by_hand = np.array([[cross[np.ix_(r, c)].sum(axis=1).mean() for c in cols] for r in rows])
    assert doc["words"]["tokens"] == TARGET.split()[: len(rows)] and doc["words"]["key_tokens"] == SOURCE.split()
    assert any(len(r) > 1 for r in rows) and any(len(c) > 1 for c in cols)  # pieces really merged
    f32_close(doc["words"]["weights"], by_hand, *f32_size(models["bart"]), per_element=True)  # sums of weights


def test_cross_renders_with_target_rows_and_source_columns(models, tmp_path):
    svg = tmp_path / "cross.svg"
    result = run("matrix", SOURCE, "--transformer", str(models["t5"]), "--target", TARGET, "--stack", "cross",
                 "--head", "0", "--svg", str(svg))
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(line for line in lines if "␣arrow" in line)  # tokens drawn as text: SentencePiece's ▁ is ␣
    assert header.split() == ["␣time", "␣flies", "␣like", "␣an", "␣arrow", "</s>"]  # the source's tokens
    labels = [line.split()[1] for line in lines if line[:1].isdigit()]
    assert labels == ["<pad>", "␣fruit", "␣flies", "␣like", "␣a", "␣banana"]  # the target's, shifted right
    assert "cross layer 1 head 0" in result.stdout
    text = svg.read_text(encoding="utf-8")
    assert "banana" in text and "arrow" in text


def test_the_decoder_stack_as_a_page_and_a_model_view(models, references, tmp_path):
    """The square stacks get every view of a self-attention: the --html page opens on the decoder's
    tokens, and --model-view --json holds every decoder head."""
    import re

    ref = references["bart"]
    page = tmp_path / "decoder.html"
    result = run("matrix", SOURCE, "--transformer", str(models["bart"]), "--target", TARGET, "--stack", "decoder",
                 "--html", str(page))
    assert result.exit_code == 0, result.stderr
    data = json.loads(re.search(r'id="attn-data">(.*?)</script>', page.read_text(encoding="utf-8"), re.S).group(1))
    target_tokens = ["</s>"] + ref["tok"].convert_ids_to_tokens(ref["labels"][0])[:-1]
    assert data["input"]["tokens"] == target_tokens and data["heads"] == 2 and data["text"] == TARGET
    doc = matrix_json(models["bart"], "--target", TARGET, "--stack", "decoder", "--model-view")
    att = np.array(doc["attentions"]).reshape(ref["decoder"].shape)  # layer-major: (L, h, T, T)
    f32_close(att, ref["decoder"], *f32_size(models["bart"]), per_element=True)


def test_heads_read_the_encoder_stack(models, tmp_path):
    sentences = tmp_path / "s.txt"
    sentences.write_text("time flies like an arrow\nfruit flies like a banana\n", encoding="utf-8")
    result = run("heads", "--transformer", str(models["t5"]), "--file", str(sentences), "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["stack"] == "encoder" and doc["layers"] == 2 and doc["heads_per_layer"] == 4
    assert "encoder stack" in result.stderr


def test_auto_runs_torch_and_numpy_points_to_it(models, loaded):
    assert loaded["t5"].backend == "torch" and loaded["bart"].encoder_decoder
    refused(run("matrix", SOURCE, "--transformer", str(models["t5"]), "--backend", "numpy"),
            "is an encoder-decoder, whose three stacks attn reads through transformers only; use --backend torch")


@pytest.mark.parametrize("args,message", [
    (["--stack", "cross"], '--stack cross reads the decoder: give its text with --target "TEXT"'),
    (["--stack", "decoder"], "--stack decoder reads the decoder: give its text with --target"),
    (["--target", "  "], "the --target text is empty"),
    (["--target", TARGET, "--stack", "cross", "--rollout"], "rollout is not defined there"),
    (["--target", TARGET, "--stack", "cross", "--flow"], "--flow follows one sequence's tokens"),
    (["--target", TARGET, "--stack", "decoder", "--pair", "x"], "--pair is a second source sentence"),
    (["--target", TARGET, "--show", "scores"], "--show scores is not implemented for encoder-decoders"),
    (["--show", "norms"], "--show norms is not implemented for encoder-decoders"),
    (["--explain", "0", "0"], "--explain needs attn's NumPy forward pass, which does not run encoder-decoders"),
    (["--stack", "middle"], "'middle' is not one of"),
])
def test_refusals(models, args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused(run("matrix", SOURCE, "--transformer", str(models["t5"]), *args), message)


def test_target_and_stack_need_an_encoder_decoder(tiny_bert_dir):
    refused(run("matrix", SOURCE, "--transformer", str(tiny_bert_dir), "--target", TARGET),
            "--target reads an encoder-decoder (T5, BART); model")
    refused(run("matrix", SOURCE, "--stack", "encoder"), "--stack needs --transformer NAME_OR_PATH")
    refused(run("matrix", SOURCE, "--target", TARGET), "--target needs --transformer NAME_OR_PATH")


# --- hostile configs -------------------------------------------------------------------------------


@pytest.mark.parametrize("field,value,message", [
    ("dropout_rate", float("nan"), "config.json: it is not valid JSON (NaN is not a JSON number)"),
    ("dropout_rate", "1e999", "dropout_rate: Infinity is not a number in 0..1"),
    ("initializer_factor", -1.5, "initializer_factor: -1.5 is not a number in 0..1e+06"),
    ("decoder_attention_heads", 3, "3 heads do not divide d_model 16"),
    ("relative_attention_num_buckets", 0, "relative_attention_num_buckets: 0 is outside 4..4,096"),
    ("num_decoder_layers", 10**6, "num_decoder_layers: 1000000 is outside 1..1,024"),
    ("relative_attention_max_distance", 2, "2 is not more than half of relative_attention_num_buckets 8"),
    ("decoder_start_token_id", "x", "decoder_start_token_id: 'x' is not a token id"),
])
def test_a_damaged_t5_config_is_refused(models, tmp_path, field, value, message):
    import shutil

    from attncli.errors import RuntimeFailure
    from attncli.hf import load

    d = tmp_path / "t5"
    shutil.copytree(models["t5"], d)
    config = json.loads((d / "config.json").read_text(encoding="utf-8"))
    config[field] = value
    text = json.dumps(config).replace('"1e999"', "1e999")  # NaN written as NaN, 1e999 (infinite), as a stranger may
    (d / "config.json").write_text(text, encoding="utf-8")
    with pytest.raises(RuntimeFailure, match="damaged model") as caught:
        load(str(d))
    assert message in str(caught.value)


def test_auto_without_transformers_names_the_extra(models, tmp_path):
    """On a machine without torch and transformers, auto names the extra an encoder-decoder needs."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from test_missing_extras import HIDE, PRETRAINED_ONLY

    record = tmp_path / "imported.json"
    result = subprocess.run([sys.executable, "-c", HIDE, ",".join(PRETRAINED_ONLY), str(record), "matrix", SOURCE,
                             "--transformer", str(models["bart"]), "--target", TARGET, "--stack", "cross"],
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    message = " ".join(result.stderr.split())
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "'bart' is an encoder-decoder" in message and "pip install -e '.[transformers]'" in message, message


def test_explore_reads_the_encoder_stack(models, references):
    """attn explore --transformer on an encoder-decoder draws the encoder's self-attention (it has
    no --target): the last layer's head mean, as transformers computes it."""
    needed("textual")
    from test_explore import drive, press

    from attncli.explore.state import ExploreState

    async def script(app, pilot):
        await press(app, pilot, "right", "down")
        assert app.message == ""
        assert app.result.enc.tokens == references["t5"]["source_tokens"]
        f32_close(app.result.view.weights, references["t5"]["encoder"][-1].mean(axis=0), *f32_size(models["t5"]),
                  per_element=True)

    drive(script, ExploreState(SOURCE, transformer=str(models["t5"])), size=(160, 50))


def test_a_bert_that_claims_to_be_an_encoder_decoder_is_damaged(tiny_bert_dir, tmp_path):
    import shutil

    d = tmp_path / "bert"
    shutil.copytree(tiny_bert_dir, d)
    config = json.loads((d / "config.json").read_text(encoding="utf-8"))
    (d / "config.json").write_text(json.dumps({**config, "is_encoder_decoder": True, "decoder_start_token_id": 0}),
                                   encoding="utf-8")
    refused(run("matrix", SOURCE, "--transformer", str(d), "--target", TARGET, "--stack", "cross"),
            "is_encoder_decoder is true, but transformers builds a BertModel", code=1)


TEXT = PAIR_TEXTS[0]


def test_an_encoder_that_overflows_is_damage_naming_the_encoders_output(tmp_path):
    """A T5 whose final encoder RMSNorm weight is finite but huge (3e38): its float32 output
    overflows to infinity; embed() says so ("damaged model: infinity in the encoder's output")."""
    needed("torch")
    from _seq2seq_fixtures import BUILDERS
    from safetensors.numpy import load_file, save_file

    from attncli.hf import load

    path = BUILDERS["t5"](tmp_path / "t5")
    tensors = load_file(str(path / "model.safetensors"))
    tensors["encoder.final_layer_norm.weight"] = np.full_like(tensors["encoder.final_layer_norm.weight"], 3e38)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    model = load(str(path))
    with pytest.raises(RuntimeFailure) as caught:
        model.embed([TEXT])
    assert str(caught.value) == "damaged model: infinity in the encoder's output"


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory):
    needed("transformers")
    from _seq2seq_fixtures import BUILDERS

    from attncli.hf import load

    return load(str(BUILDERS["t5"](tmp_path_factory.mktemp("tiny-t5") / "t5")))


def test_seq2seq_refuses_scores_and_norms_saying_what_to_use(tiny_t5):
    from attncli.errors import BadInput

    enc = tiny_t5.encode("the cat sat")
    for show in (tiny_t5.scores, tiny_t5.value_vectors):
        with pytest.raises(BadInput) as caught:
            show(enc, 0)
        assert str(caught.value) == ("--show scores / norms read q, k and v of an encoder or decoder (BERT and GPT-2 "
                                     "families); for an encoder-decoder (T5, BART) they are not implemented: use "
                                     "--show weights")


def test_seq2seq_refuses_an_empty_target_with_an_example(tiny_t5):
    from attncli.errors import BadInput

    with pytest.raises(BadInput) as caught:
        tiny_t5.encode_target("  ")
    assert str(caught.value) == "the --target text is empty: give the decoder's text, e.g. --target \"le chat\""


def test_seq2seq_target_says_whether_it_was_truncated(tiny_t5, monkeypatch):
    monkeypatch.setattr(tiny_t5, "max_positions", 8)  # T5 has no position limit of its own
    assert tiny_t5.encode_target("le", truncate=True).truncated is False
    long = tiny_t5.encode_target("chat " * 20, truncate=True)
    assert long.truncated is True and len(long.ids) == 8


def test_seq2seq_encoder_failure_is_one_line_naming_the_model(tiny_t5, monkeypatch):
    def broken(**_):
        raise RuntimeError("shapes do not match\nsecond line of the trace")

    monkeypatch.setattr(tiny_t5.model, "get_encoder", lambda: broken)
    with pytest.raises(RuntimeFailure) as caught:
        tiny_t5.attentions(tiny_t5.encode("the cat sat"))
    assert str(caught.value) == f"model '{tiny_t5.name}' failed to run: shapes do not match"


@pytest.mark.parametrize("rows,shown", [("2", ["␣flies"]), ("1:3", ["␣fruit", "␣flies"])])  # tokens as text
def test_a_stack_takes_rows_as_every_view_does_and_refuses_the_long_forms(models, rows, shown):
    """--rows N and START:END pick an encoder-decoder's rows as they do any view's; last:N, A-B and
    word:TEXT are for one stack of tokens."""
    result = run("matrix", SOURCE, "--transformer", str(models["t5"]), "--target", TARGET, "--stack", "cross",
                 "--head", "0", "--rows", rows)
    assert result.exit_code == 0, result.stderr
    assert [line.split()[1] for line in result.stdout.splitlines() if line[:1].isdigit()] == shown
    for form in ("last:2", "1-2", "word:flies"):
        refused(run("matrix", SOURCE, "--transformer", str(models["t5"]), "--target", TARGET, "--stack", "cross",
                    "--rows", form), f"--rows {form}: an encoder-decoder's view takes --rows START:END")
