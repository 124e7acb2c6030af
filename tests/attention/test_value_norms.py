"""``attn matrix --transformer M --show norms`` and ``--show scores`` (issue 22).

The reference is computed here from transformers' own modules: forward hooks on the model's
query / key / value projections give q, k, v; f^h(x_j) = v^h_j W_O^h with W_O read from the
output dense layer; alpha from ``output_attentions`` (Kobayashi et al. 2020, eq. 6). attn's
value vectors (NumPy forward pass, or the torch backend) must equal it to 1e-5.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from _tolerance import f32_close

from attncli.attention.value_norms import head_norms, summed_norms
from attncli.cli.main import app
from attncli.errors import BadInput

SENTENCE = "time flies like an arrow"
MODULES = {  # model_type: the q, k, v modules (or GPT-2's joint c_attn) and the output projection of layer {l}
    "bert": ("encoder.layer.{l}.attention.self.query", "encoder.layer.{l}.attention.self.key",
             "encoder.layer.{l}.attention.self.value", "encoder.layer.{l}.attention.output.dense"),
    "gpt2": ("h.{l}.attn.c_attn", None, None, "h.{l}.attn.c_proj"),
}
_cache: dict = {}


def run(*args):
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()
    return CliRunner().invoke(app, list(args))


def matrix_json(path, *args):
    result = run("matrix", SENTENCE, "--transformer", str(path), "--json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def reference(path):
    """Per layer: alpha (h, T, T), f (h, T, d) and scores (h, T, T, -inf masked), float64, from
    transformers' own q / k / v projections and output dense weight."""
    if str(path) in _cache:
        return _cache[str(path)]
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModel.from_pretrained(str(path), attn_implementation="eager").eval()
    cfg = model.config
    kind = "gpt2" if cfg.model_type == "gpt2" else "bert"
    h = cfg.num_attention_heads
    modules = dict(model.named_modules())
    seen = {}
    hooks = []
    for l in range(cfg.num_hidden_layers):
        for role, name in zip("qkv", MODULES[kind][:3]):
            if name is not None:
                hooks.append(modules[name.format(l=l)].register_forward_hook(
                    lambda m, a, out, key=(l, role): seen.__setitem__(key, out[0].detach().double())))
    enc = tok(SENTENCE, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    for hook in hooks:
        hook.remove()
    layers = []
    for l in range(cfg.num_hidden_layers):
        if kind == "gpt2":
            q, k, v = seen[(l, "q")].split(cfg.hidden_size, dim=-1)  # (T, d) each
        else:
            q, k, v = seen[(l, "q")], seen[(l, "k")], seen[(l, "v")]
        T, d = v.shape
        split = lambda x: x.view(T, h, d // h).transpose(0, 1)  # (h, T, d_head)  # noqa: E731
        w = modules[MODULES[kind][3].format(l=l)].weight.detach().double()
        w_o = w if kind == "gpt2" else w.T  # (d, d) as x @ W_O: Conv1D stores (in, out), Linear (out, in)
        f = torch.einsum("htk,hkd->htd", split(v), w_o.view(h, d // h, d))  # (h, T, d)
        scores = split(q) @ split(k).transpose(1, 2) / (d // h) ** 0.5  # (h, T, T)
        if kind == "gpt2":
            scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        layers.append((out.attentions[l][0].double().numpy(), f.numpy(), scores.numpy()))
    _cache[str(path)] = layers
    return layers


def ref_norms(alpha, f):
    """Independent of attncli.attention.value_norms: a loop over heads in plain NumPy."""
    per_head = np.stack([alpha[hd] * np.sqrt((f[hd] ** 2).sum(-1))[None, :] for hd in range(alpha.shape[0])])
    summed = np.zeros(alpha.shape[1:])
    for i in range(alpha.shape[1]):
        for j in range(alpha.shape[2]):
            summed[i, j] = np.sqrt(((alpha[:, i, j, None] * f[:, j]).sum(0) ** 2).sum())
    return per_head, summed


@pytest.mark.parametrize("fixture", ["tiny_bert_dir", "tiny_gpt2_dir", "minilm_dir"])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_value_vectors_equal_transformers_own(request, fixture, backend):
    from attncli.hf import load

    path = request.getfixturevalue(fixture)
    model = load(str(path), backend=backend)
    enc = model.encode(SENTENCE)
    n = 1536 if fixture == "minilm_dir" else 37  # the widest reduction: the MLP's width
    for l, (alpha, f, scores) in enumerate(reference(path)):
        weights, fx = model.value_vectors(enc, l)
        f32_close(weights, alpha, depth=l + 1, length=n, per_element=True)  # transformers' float32 beside attn's pass
        f32_close(fx, f, depth=l + 1, length=n)
        per_head, summed = ref_norms(alpha, f)
        f32_close(head_norms(weights, fx), per_head, depth=l + 1, length=n)
        f32_close(summed_norms(weights, fx), summed, depth=l + 1, length=n)
        got = model.scores(enc, l)
        assert np.array_equal(np.isinf(got), np.isinf(scores))
        f32_close(np.where(np.isinf(got), 0, got), np.where(np.isinf(scores), 0, scores), depth=l + 1, length=n)


@pytest.mark.parametrize("fixture", ["tiny_bert_dir", "tiny_gpt2_dir"])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_show_norms_and_scores_json(request, fixture, backend):
    path = request.getfixturevalue(fixture)
    alpha, f, scores = reference(path)[1]
    per_head, summed = ref_norms(alpha, f)
    doc = matrix_json(path, "--layer", "1", "--show", "norms", "--backend", backend)
    assert doc["show"] == "norms" and doc["backend"] == backend
    f32_close(np.array(doc["head_weights"]), per_head, depth=2, length=37, printed=5e-6 * np.abs(per_head).max())
    f32_close(np.array(doc["weights"]), summed, depth=2, length=37, printed=5e-6 * np.abs(summed).max())
    assert not np.allclose(summed, per_head.mean(axis=0), atol=1e-3)  # fixed: the layer's is not the heads' mean (far apart)
    doc = matrix_json(path, "--layer", "1", "--head", "2", "--show", "scores", "--backend", backend)
    got = np.array([[np.nan if x is None else x for x in row] for row in doc["weights"]])
    assert doc["show"] == "scores" and np.array_equal(np.isnan(got), np.isinf(scores[2]))
    finite = np.where(np.isinf(scores[2]), 0, scores[2])
    f32_close(np.nan_to_num(got), finite, depth=2, length=37, printed=5e-6 * np.abs(finite).max())


def test_explain_norms_gives_alpha_size_and_product(tiny_bert_dir):
    alpha, f, _ = reference(tiny_bert_dir)[0]
    doc = matrix_json(tiny_bert_dir, "--layer", "0", "--show", "norms", "--explain", "2", "3")
    ex = doc["explanation"]
    for entry in ex["heads"]:
        hd = entry["head"]
        steps = {s["name"]: s["value"] for s in entry["steps"]}
        f32_close(steps["alpha"], alpha[hd, 2, 3], length=37, printed=5e-6 * alpha[hd, 2, 3])  # layer 0; 6 digits
        f32_close(steps["||f(x_J)||"], np.linalg.norm(f[hd, 3]), length=37, printed=5e-6 * np.linalg.norm(f[hd, 3]))
        product = alpha[hd, 2, 3] * np.linalg.norm(f[hd, 3])
        f32_close(steps["||alpha f(x_J)||"], product, length=37, printed=5e-6 * product)
        assert steps["||alpha f(x_J)||"] == pytest.approx(steps["alpha"] * steps["||f(x_J)||"], rel=1e-12)
    assert ex["weight"] == pytest.approx(doc["weights"][2][3], rel=1e-5)  # fixed: one value printed twice to 6 digits
    text = run("matrix", SENTENCE, "--transformer", str(tiny_bert_dir), "--show", "norms", "--explain", "2", "3").stdout
    assert "||f(x_J)||" in text and "norms" in text


@pytest.mark.parametrize("args,needle", [
    (["--rollout"], "--rollout"), (["--words"], "--words"), (["--hide-special"], "--hide-special"),
    (["--model-view"], "--model-view"), (["--show", "output"], "--show output"),
])
def test_show_norms_refuses_views_that_mix_tokens(tiny_bert_dir, args, needle):
    show = [] if "--show" in args else ["--show", "norms"]
    result = run("matrix", SENTENCE, "--transformer", str(tiny_bert_dir), *show, *args)
    assert result.exit_code == 2 and needle in result.stderr and "Traceback" not in result.stderr


def test_show_norms_needs_a_transformer():
    result = run("matrix", SENTENCE, "--show", "norms")
    assert result.exit_code == 2 and "--transformer" in result.stderr


@pytest.mark.parametrize("args,key", [(["--show", "norms"], "norms"), (["--show", "scores"], "scores"), (["--flow"], "flow")])
def test_html_with_norms_scores_or_flow_holds_that_view_of_every_layer(tiny_gpt2_dir, tmp_path, args, key):
    """The interactive page of --show norms / scores or --flow embeds that view of every layer,
    each the --json document of the same options with --layer L, and opens on it."""
    import re

    page = tmp_path / "page.html"
    result = run("matrix", SENTENCE, "--transformer", str(tiny_gpt2_dir), *args, "--html", str(page))
    assert result.exit_code == 0, result.stderr
    data = json.loads(re.search(r'id="attn-data">(.*?)</script>', page.read_text(), re.S).group(1))
    assert data["start"]["show"] == key and list(data["extra"]) == [key]
    assert len(data["extra"][key]) == data["layers"]
    for layer in range(data["layers"]):
        ref = json.loads(run("matrix", SENTENCE, "--transformer", str(tiny_gpt2_dir), *args, "--layer", str(layer),
                             "--json").stdout)
        embedded = data["extra"][key][layer]
        assert embedded["weights"] == ref["weights"] and embedded["head_weights"] == ref["head_weights"]
        assert embedded["show"] == ref["show"] and embedded["flow"] == ref["flow"] and embedded["layer"] == layer
    assert data["views"]["0|0|0"]["show"] == "weights" and data["views"]["0|0|0"]["flow"] is False


def _norm_case():
    """2 heads, 2 x 2 weights, f(x) of lengths 5 and 13 (3-4-5 and 5-12-13 triangles)."""
    weights = np.array([[[0.75, 0.25], [0.5, 0.5]], [[0.25, 0.75], [0.875, 0.125]]])  # (h, T, S)
    fx = np.array([[[1.0, 0.0], [3.0, 4.0]], [[0.0, 2.0], [5.0, 12.0]]])  # (h, S, d)
    return weights, fx


def test_explain_of_a_norm_gives_the_weight_the_norm_and_their_product():
    """--explain I J --head H of the norms view: alpha = A[H, I, J], ||f(x_J)|| and their product;
    no score (a norm has none); the view's name. Worked by hand: head 1, cell (0, 1): 0.75 x 13."""
    from attncli.attention.value_norms import explain_norm

    weights, fx = _norm_case()
    doc = explain_norm(weights, fx, ["a", "b"], 0, 1, head=1)
    assert doc["show"] == "norms" and doc["variant"] == "pretrained"
    assert "score" in doc and doc["score"] is None
    assert doc["weight"] == 9.75 and "heads" not in doc
    assert [(s["name"], s["value"]) for s in doc["steps"]] == [("alpha", 0.75), ("||f(x_J)||", 13.0),
                                                               ("||alpha f(x_J)||", 9.75)]
    whole = explain_norm(weights, fx, ["a", "b"], 0, 1)
    assert [e["weight"] for e in whole["heads"]] == [0.25 * 5, 9.75]
    # the layer: ||0.25 (3, 4) + 0.75 (5, 12)|| = ||(4.5, 10)||
    assert whole["weight"] == pytest.approx(math.hypot(4.5, 10.0), rel=1e-15) and whole["score"] is None


@pytest.mark.parametrize("option, why", [("rollout", "--rollout (it multiplies weights through the layers)"),
                                         ("words", "--words (word rows sum and average weights)"),
                                         ("hide_special", "--hide-special (it renormalises rows of weights)"),
                                         ("model_view", "--model-view (it classifies the heads by their weights)")])
def test_show_norms_names_the_option_it_refuses(option, why):
    from attncli.attention.value_norms import check_norms_options

    flags = dict(rollout=False, words=False, hide_special=False, model_view=False)
    check_norms_options(**flags)
    with pytest.raises(BadInput) as caught:
        check_norms_options(**{**flags, option: True}, show="scores")
    assert str(caught.value) == f"--show scores draws one layer's heads token by token: drop {why}"


def test_head_norms_compute_in_float64_from_float32_inputs():
    """||A f(x)|| = A ||f(x)||, in float64 whatever the inputs' precision (the view's --json
    compares with the explanation's float64 numbers): float32 weights of 1/3 and 1/7 against
    norms 5 and 13 (3-4-5, 5-12-13), worked in Python floats."""
    from attncli.attention.value_norms import head_norms

    w = np.array([[[1 / 3, 1 / 7]]], dtype=np.float32)  # (h, T, S)
    fx = np.array([[[3.0, 4.0], [5.0, 12.0]]], dtype=np.float32)  # (h, S, d)
    got = head_norms(w, fx)
    assert got.dtype == np.float64
    assert got[0, 0].tolist() == [float(w[0, 0, 0]) * 5.0, float(w[0, 0, 1]) * 13.0]


def test_explain_norm_names_the_value_and_output_matrices():
    """The norms view's ||f(x_J)|| step names f as Kobayashi et al. do: (x W_V + b_V) W_O."""
    from attncli.attention.value_norms import explain_norm

    weights = np.array([[[0.75, 0.25], [0.5, 0.5]]])  # (h, T, S)
    fx = np.array([[[1.0, 0.0], [3.0, 4.0]]])  # (h, S, d)
    doc = explain_norm(weights, fx, ["a", "b"], 0, 1, head=0)
    step = [s for s in doc["steps"] if s["name"] == "||f(x_J)||"][0]
    assert step["value"] == 5.0
    assert step["note"] == "f(x) = (x W_V + b_V) W_O, this head's rows of W_O"
