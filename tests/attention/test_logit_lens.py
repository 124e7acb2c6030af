"""``attn lens``: the logit lens (nostalgebraist 2020) against an independent reference: for GPT-2,
transformers' own ``output_hidden_states`` through its ``ln_f`` and ``lm_head`` (the last hidden
state already has ``ln_f`` applied); for the built-in LM, the torch model ``attn train-attention``
trains, loaded with the same weights, its residual stream read by forward hooks."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from attncli.cli.main import app
from _tolerance import f32_close, f32_size

TEXT = "time flies like an arrow"
PRINTED = 5e-7  # the JSON's probabilities: round(p, 6) (pipeline/lens_compute.py)
BUILTIN_SIZE = (2, 64)  # make_random_attention(layers=2, d=16): layers, widest reduction (d_ff = 4 d)


def size_of(path, probs):
    """(depth of the last layer's lens, widest reduction: the model's, or the vocabulary's softmax sum)."""
    depth, length = f32_size(path)
    return depth, max(length, probs.shape[-1])


def by_layer(got, probs, size, printed=0.0):
    """Lens probabilities (L + 1, T, V) per element: layer l's went through l layers and the head
    (ln_f, the unembedding): depth l + 1."""
    for l in range(probs.shape[0]):
        f32_close(got[l], probs[l], l + 1, size[1], per_element=True, printed=printed, what=f"layer {l}")


def run(*args):
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()
    return CliRunner().invoke(app, list(args))


def lens_json(*args):
    result = run("lens", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def gpt2_reference(path, text):
    """(L + 1, T, V) probabilities from transformers' hidden states, ln_f and lm_head."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    ids = tok(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        hs = out.hidden_states  # L + 1 tensors; the last already through ln_f
        logits = [model.lm_head(model.transformer.ln_f(h)) for h in hs[:-1]] + [model.lm_head(hs[-1])]
    probs = np.stack([softmax(x[0].double().numpy()) for x in logits])  # (L + 1, T, V)
    f32_close(probs[-1], softmax(out.logits[0].double().numpy()), 1, model.config.n_embd,  # the model's own
              per_element=True, what="lm_head of the last hidden state")
    return probs


def builtin_reference(att, tokens):
    """(L + 1, T, V) probabilities from the torch CausalLM with the built-in LM's weights."""
    import torch

    from attncli.tinylm import model as trained
    from attncli.tinylm import torch_model

    table = trained.input_vectors(att.vectors, tokens)  # (T, d)
    model = torch_model.model_from_weights(table, att.config, att.w).eval()
    stream = []
    hooks = [model.drop.register_forward_hook(lambda m, a, out: stream.append(out))]
    hooks += [b.register_forward_hook(lambda m, a, out: stream.append(out[0])) for b in model.blocks]
    with torch.no_grad():
        model(torch.arange(len(tokens))[None, :])
        probs = np.stack([softmax(model.head(model.final_ln(x))[0].double().numpy()) for x in stream])
    for hook in hooks:
        hook.remove()
    return probs


def check_against(doc, probs, k, size):
    L1, T, V = probs.shape
    assert doc["layers"] == L1 - 1 and len(doc["tokens"]) == T
    for l in range(L1):
        for t in range(T):
            cell = doc["lens"][l][t]
            # the top k hold the row's largest, which sizes each one's rounding (per element)
            f32_close([c["prob"] for c in cell], np.sort(probs[l, t])[::-1][:k], l + 1, size[1], per_element=True,
                      printed=PRINTED, what=f"layer {l} position {t}")
            assert [c["id"] for c in cell][:1] == [int(np.argmax(probs[l, t]))]


def test_gpt2_lens_equals_transformers_hidden_states(tiny_gpt2_dir):
    probs = gpt2_reference(tiny_gpt2_dir, TEXT)
    doc = lens_json(TEXT, "--transformer", str(tiny_gpt2_dir), "-k", "3")
    check_against(doc, probs, 3, size_of(tiny_gpt2_dir, probs))
    assert not np.allclose(probs[0], probs[-1], atol=1e-3)  # fixed: "differs": the layers really differ (float64 reference)
    from attncli.generate.hf_decoder import load_pretrained  # full precision, through the API

    dec = load_pretrained(str(tiny_gpt2_dir))
    lens = dec.lens(dec.encode(TEXT).inputs, 4, follow=7)
    size = size_of(tiny_gpt2_dir, probs)
    by_layer(lens.top_probs, -np.sort(-probs, axis=-1)[..., :4], size)  # the top 4 hold the row's largest
    follow = probs.copy()  # (L + 1, T, V): token 7's probability in its row, whose largest sizes its rounding
    follow[..., 7] = lens.follow_prob
    by_layer(follow, probs, size)
    assert (lens.follow_rank == (probs > probs[..., 7:8]).sum(-1)).all()


def test_builtin_lm_lens_equals_the_torch_model():
    from _attention_fixtures import make_random_attention

    from attncli.tinylm import model as trained

    make_random_attention("rand", layers=2, heads=4)
    att = trained.load_trained("rand")
    doc = lens_json("the cat sat on", "--model", "rand", "-k", "3")
    check_against(doc, builtin_reference(att, doc["tokens"]), 3, BUILTIN_SIZE)


def test_token_follows_rank_and_probability(tiny_gpt2_dir):
    probs = gpt2_reference(tiny_gpt2_dir, TEXT)
    doc = lens_json(TEXT, "--transformer", str(tiny_gpt2_dir), "--token", "like")
    i = doc["follow"]["id"]
    follow = probs.copy()  # (L + 1, T, V): the token's probability in its row (see above)
    follow[..., i] = doc["follow"]["prob"]
    by_layer(follow, probs, size_of(tiny_gpt2_dir, probs), printed=PRINTED)
    assert np.array_equal(np.array(doc["follow"]["rank"]), (probs > probs[..., i:i + 1]).sum(-1))
    text = " ".join(run("lens", TEXT, "--transformer", str(tiny_gpt2_dir), "--token", "like").stdout.split())
    assert "logit lens" in text and "--token" in text and "L2" in text


@pytest.mark.parametrize("args,needle", [
    (["--top-k", "0"], "--top-k"), (["--token", "zzzzqqqq"], "--token"),
])
def test_refusals(tiny_gpt2_dir, args, needle):
    result = run("lens", TEXT, "--transformer", str(tiny_gpt2_dir), *args)
    assert result.exit_code == 2 and needle in result.stderr and "Traceback" not in result.stderr


def test_an_encoder_has_no_lens(tiny_bert_dir):
    result = run("lens", TEXT, "--transformer", str(tiny_bert_dir))
    assert result.exit_code == 2 and "encoder" in result.stderr


def test_lens_never_imports_torch(tiny_gpt2_dir):
    code = ("import sys; from attncli.cli.main import main; sys.argv = ['attn', 'lens', 'time flies', '--transformer', "
            f"{str(tiny_gpt2_dir)!r}, '--json']\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-500:]
    assert json.loads(done.stdout)["layers"] == 2


def reference_first_top(probs_at, token):
    """The first layer from which ``token`` is the argmax in every later layer, from (L + 1, V) probabilities."""
    tops = probs_at.argmax(-1)
    if tops[-1] != token:
        return None
    layer = len(tops) - 1
    while layer > 0 and tops[layer - 1] == token:
        layer -= 1
    return layer


@pytest.mark.parametrize("greedy", [True, False])
def test_generate_lens_layers_equal_transformers_hidden_states(tiny_gpt2_dir, greedy):
    import torch
    from transformers import AutoModelForCausalLM

    sampling = ["--greedy"] if greedy else ["--seed", "3"]
    result = run("generate", "time flies", "--transformer", str(tiny_gpt2_dir), "-n", "6", "--ignore-eos", *sampling,
                 "--lens", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    from attncli.generate.hf_decoder import load_pretrained

    dec = load_pretrained(str(tiny_gpt2_dir))
    ids = list(dec.encode("time flies").inputs) + [s["id"] for s in doc["steps"]]
    model = AutoModelForCausalLM.from_pretrained(str(tiny_gpt2_dir)).eval()
    with torch.no_grad():
        hs = model(torch.tensor([ids]), output_hidden_states=True).hidden_states
        probs = np.stack([softmax(model.lm_head(model.transformer.ln_f(h))[0].double().numpy()) for h in hs[:-1]]
                         + [softmax(model.lm_head(hs[-1])[0].double().numpy())])  # (L + 1, T, V)
    want = [reference_first_top(probs[:, s["query"]], s["id"]) for s in doc["steps"]]
    assert doc["lens_layers"] == want
    if greedy:
        assert None not in want  # the argmax is always the last layer's top


def test_lens_svg_and_html_are_written(tiny_gpt2_dir, tmp_path):
    svg, html = tmp_path / "lens.svg", tmp_path / "lens.html"
    result = run("lens", TEXT, "--transformer", str(tiny_gpt2_dir), "--svg", str(svg), "--html", str(html))
    assert result.exit_code == 0, result.stderr
    drawn_svg, drawn_html = svg.read_text(encoding="utf-8"), html.read_text(encoding="utf-8")
    assert "attn lens: time flies" in drawn_svg.replace("&#160;", " ") and "logit lens" in drawn_html
    assert "L2" in drawn_svg and "L2" in drawn_html  # the last layer's column
    result = run("lens", TEXT, "--transformer", str(tiny_gpt2_dir), "--svg", str(tmp_path / "no" / "x.svg"))
    assert result.exit_code == 2 and "exist" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("k", [1, 5, 20, 40])
def test_top_k_equals_a_full_sort_ties_by_the_lower_id(k):
    """top_k (one argmax per rank) against NumPy's full stable sort of every row, with ties
    (probabilities rounded to 2 decimals) and k above the vocabulary (V = 30)."""
    from attncli.attention.logit_lens import top_k

    p = np.random.default_rng(1).dirichlet(np.ones(30), size=12).round(2).astype(np.float32)  # (12, 30)
    want_ids = np.argsort(-p, axis=-1, kind="stable")[:, :k]  # (12, min(k, 30)), equal values: lower id first
    ids, values = top_k(p.copy(), k)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(values, np.take_along_axis(p, want_ids, axis=-1))


# -- the table: the terminal's width for the tokens, and --top-k ------------------------------------


def synthetic_doc(top_k: int, layers: int = 3) -> dict:
    """A lens document whose predicted tokens are long (as a real vocabulary's are)."""
    words = ["interpretability", "attention", "transformers", "understanding"]
    lens = [[[{"token": words[(l + t + n) % 4], "id": n, "prob": round(0.5 / (n + 1), 6)} for n in range(top_k)]
             for t in range(3)] for l in range(layers + 1)]
    return {"model": "m", "kind": "gpt2", "tokens": ["a", "b", "c"], "layers": layers, "top_k": top_k,
            "lens": lens, "follow": None}


def table_lines(doc: dict, columns: int) -> list[str]:
    from rich.console import Console

    from attncli.views.lens import lens_renderables

    console = Console(width=columns, record=True, color_system=None)
    for part in lens_renderables(doc, columns):
        console.print(part)
    return console.export_text().splitlines()


def test_the_table_uses_the_width_it_has_for_the_tokens():
    wide = "\n".join(table_lines(synthetic_doc(1), 150))
    assert "interpretability 0.50" in wide and "…" not in wide  # whole at 150 columns (once cut to 5)
    cut = table_lines(synthetic_doc(1), 90)  # every layer, each token cut to what is left (13)
    assert max(len(line) for line in cut) <= 90 and "interpretabi… 0.50" in "\n".join(cut)
    assert not any(line.startswith("layers ") for line in cut)
    narrow = table_lines(synthetic_doc(1), 60)  # 4 layers of 5 characters: 3 layers of 9 instead
    assert max(len(line) for line in narrow) <= 60 and "interpre… 0.50" in "\n".join(narrow)
    assert not any("interpretability" in line for line in narrow)
    assert "\n".join(narrow).count("0.50") == 3 * 3  # the token is cut, never a cell's probability
    header = next(line.split() for line in narrow if line.strip().startswith("position"))
    assert header == ["position", "L0", "L2", "L3"]
    assert "layers L0, L2 and L3: every 2nd of the 4 and the last" in " ".join(narrow)


def many_layers_doc(layers: int, positions: int) -> dict:
    """A lens document of a model deeper and a text longer than any terminal shows whole, its
    tokens of MIN_TOKEN characters (x00001)."""
    lens = [[[{"token": f"x{l:05d}", "id": 0, "prob": 0.25}] for t in range(positions)] for l in range(layers + 1)]
    return {"model": "m", "kind": "gpt2", "tokens": [f"t{t}" for t in range(positions)], "layers": layers,
            "top_k": 1, "lens": lens, "follow": None}


@pytest.mark.parametrize("columns", [20, 80, 200, 5000])
def test_a_deep_model_draws_the_layers_that_fit(columns):
    """1,000 layers: as many layer columns as tokens of MIN_TOKEN fit (at least the first and the
    last), every s-th and the last, the rule stated; the lines as wide as the terminal where it has
    room for two columns."""
    from attncli.views.lens import CELL_EXTRA, MIN_TOKEN, layer_columns

    doc = many_layers_doc(1000, 3)
    shown = layer_columns(doc, columns)
    fit = max(2, (columns - len("position") - 2) // (MIN_TOKEN + CELL_EXTRA))
    assert shown[0] == 0 and shown[-1] == 1000 and 2 <= len(shown) <= fit
    step = shown[1] - shown[0]
    assert shown[:-1] == list(range(0, 1000, step))
    assert -(-1000 // (step - 1)) + 1 > fit  # the smallest step that fits: one less draws too many columns
    lines = table_lines(doc, columns)
    assert (f"every {step}" if len(shown) > 2 else "L0 and L1000: the first and the last") in " ".join(" ".join(lines).split())
    if columns >= 80:
        header = next(line.split() for line in lines if line.strip().startswith("position"))
        assert header[1:] == [f"L{l}" for l in shown]
        assert max(len(line) for line in lines) <= columns
        assert all(f"x{l:05d} 0.25" in " ".join(lines) for l in shown)


def test_short_tokens_of_a_deep_model_are_not_drawn_in_every_layer():
    """Tokens of one character: each column needs 3 for its token, so 80 columns hold 7 layers of
    1,001, not every one (each cut to nothing)."""
    from attncli.views.lens import CELL_EXTRA, layer_columns

    doc = many_layers_doc(1000, 3)
    for c in (cell for layer in doc["lens"] for row in layer for cell in row):
        c["token"] = "a"
    shown = layer_columns(doc, 80)
    assert shown[0] == 0 and shown[-1] == 1000 and len(shown) <= (80 - len("position") - 2) // (3 + CELL_EXTRA)
    assert max(len(line) for line in table_lines(doc, 80)) <= 80


@pytest.mark.parametrize("k", [1, 3])
def test_top_k_is_in_the_table_one_line_per_token(k):
    lines = table_lines(synthetic_doc(k), 200)
    doc = synthetic_doc(k)
    for t in range(3):
        start = next(n for n, line in enumerate(lines) if line.strip().startswith(f"{t} {doc['tokens'][t]}"))
        for n in range(k):  # line n of position t: the n-th best of every layer
            cells = [f"{doc['lens'][l][t][n]['token']} {doc['lens'][l][t][n]['prob']:.2f}" for l in range(4)]
            assert all(cell in " ".join(lines[start + n].split()) for cell in cells), (t, n, lines[start + n])
    header = next(n for n, line in enumerate(lines) if line.strip().startswith("position"))
    note = next(n for n, line in enumerate(lines) if line.startswith("colour:"))
    assert note - header - 1 == 3 * k  # k lines per position, nothing else


def test_top_k_changes_the_table_as_the_json(tiny_gpt2_dir):
    doc = lens_json(TEXT, "--transformer", str(tiny_gpt2_dir), "--top-k", "3")
    assert all(len(cell) == 3 for layer in doc["lens"] for cell in layer)
    result = run("lens", TEXT, "--transformer", str(tiny_gpt2_dir), "--top-k", "3")
    text = " ".join(result.stdout.split())
    for layer in doc["lens"]:
        for cell in layer:
            for cand in cell:
                assert f"{cand['prob']:.2f}" in text
    assert lens_json(TEXT, "--transformer", str(tiny_gpt2_dir))["top_k"] == 1  # the default: the top token


def test_the_first_top_layer_is_where_the_token_stays_the_top_prediction():
    """The first layer from which the token stays the top prediction to the last layer."""
    from attncli.attention.logit_lens import first_top_layer

    assert first_top_layer(np.array([5, 5, 5, 5]), 5) == 0
    assert first_top_layer(np.array([5, 1, 5, 5]), 5) == 2
    assert first_top_layer(np.array([1, 5, 5, 5, 5]), 5) == 1
    assert first_top_layer(np.array([5, 5, 5, 1]), 5) is None


def test_the_titles_wrap_to_the_terminal_not_to_the_table():
    """A narrow table (one layer, short tokens) keeps its title on one line at 120 columns."""
    doc = synthetic_doc(1, layers=1)
    doc["lens"] = [[[{"token": "a", "id": 0, "prob": 0.5}] for _ in range(3)] for _ in range(2)]
    doc["follow"] = {"token": "banana", "rank": [[0] * 3] * 2, "prob": [[0.5] * 3] * 2}
    lines = table_lines(doc, 120)
    assert "m · logit lens · top next token after each layer (0 = embeddings)" in lines
    assert "--token banana: rank (0 = top) and probability" in lines
