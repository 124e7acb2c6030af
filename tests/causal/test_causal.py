"""attn ablate / patch / dla (attncli/causal) against transformers run with forward hooks that zero
or replace the same slice (tests/_trace_reference.py), on tiny random GPT-2, Llama with
grouped-query attention, Qwen2 and BERT with its MLM head, to 1e-5, on both backends (attn's
batched NumPy pass, and the torch backend's trace: one resumed pass per intervention); patching
everything restores 1.0 and nothing 0.0; DLA's parts add up to the logit; on a Llama whose
induction circuit is set by hand (tests/_llama_head_fixtures.py), zeroing its heads drops the
copied token and no other head moves it, on both backends; the CLI's refusals."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from conftest import needed

needed("tokenizers")
needed("safetensors")
torch = needed("torch")
needed("transformers")

from typer.testing import CliRunner  # noqa: E402

from _llama_fixtures import build_decoder  # noqa: E402
from _transformer_fixtures import SIZES, build_opt  # noqa: E402
from _tolerance import f32_close  # noqa: E402
from _trace_reference import bias_gpt2, build_mlm, hooked_logits, load_reference  # noqa: E402
from attncli.causal import grids  # noqa: E402
from attncli.causal.dla import dla  # noqa: E402
from attncli.causal.target import Target, resolve, vocab_id  # noqa: E402
from attncli.cli.main import app  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.model.trace import Intervention  # noqa: E402

torch.set_num_threads(1)
# the tiny models' float32 rounding (tests/_tolerance.py): their layers and their widest reduction
DEPTH, WIDTH = SIZES["layers"], max(SIZES["hidden"], SIZES["intermediate"])
runner = CliRunner()
KINDS = ("gpt2", "llama", "qwen2", "bert")
BACKENDS = ("numpy", "torch")
TEXT = {"gpt2": "the cat sat on the mat and the dog", "bert": "the cat sat on the [MASK] and the dog ."}


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    base = tmp_path_factory.mktemp("causal")

    @functools.lru_cache(maxsize=None)
    def built(kind):
        d = base / kind
        {"gpt2": bias_gpt2, "bert": lambda p: build_mlm("bert", p)}.get(kind, lambda p: build_decoder(kind, p))(d)
        return d, load_reference(d, kind)

    @functools.lru_cache(maxsize=None)
    def get(kind, backend="numpy"):
        d, ref = built(kind)
        return d, load(str(d), backend=backend), ref
    return get


def metric_scale(model, ids, t) -> float:
    """The size of the numbers a metric is made of (the logits, the clean metric): a grid entry is a
    difference of two metrics and carries their absolute float32 error (tests/_tolerance.py)."""
    logits = model.trace(ids, "logits")["logits"]  # (T, vocab)
    return max(float(np.abs(logits).max()), abs(t.metric(logits[t.position])))


def corrupted(ids: list[int]) -> list[int]:
    """The same tokens with two early ones swapped (the read position and a [MASK] untouched)."""
    bad = list(ids)
    bad[1], bad[3] = ids[3], ids[1]
    return bad


def _setup(models, kind, backend="numpy"):
    path, model, ref = models(kind, backend)
    assert model.backend == backend
    ids = model.encode(TEXT.get(kind, TEXT["gpt2"])).ids
    pos = ids.index(vocab_id(model, "[MASK]")) if kind == "bert" else len(ids) - 1
    return path, model, ref, ids, Target(pos, 7, "x", 11, "y"), Target(pos, 7, "x")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
def test_ablation_grid_equals_transformers_with_a_hook_zeroing_the_head(models, kind, backend):
    _, model, ref, ids, diff, logp = _setup(models, kind, backend)
    for t in (diff, logp):
        grid = grids.ablate(model, ids, t)
        clean = t.metric(hooked_logits(ref, kind, ids)[t.position])
        want = np.array([[t.metric(hooked_logits(ref, kind, ids, z={(l, h): 0.0})[t.position]) - clean
                          for h in range(model.heads)] for l in range(model.layers)])
        f32_close(grid.values, want, depth=DEPTH, length=WIDTH, scale=metric_scale(model, ids, t))
        assert np.abs(want).max() > 1e-3


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
def test_mean_and_one_position_ablation_equal_transformers(models, kind, backend):
    _, model, ref, ids, diff, _ = _setup(models, kind, backend)
    refs = [model.encode(s).ids for s in ("a dog and a cat", "time flies like an arrow")]
    means = grids.head_means(model, refs)  # (L, h, d_head)
    z = np.concatenate([model.trace(r, "blocks.1.attn.z")["blocks.1.attn.z"] for r in refs])  # (sum T, h, d_head)
    np.testing.assert_allclose(means[1], z.astype(np.float64).mean(axis=0), atol=1e-12)
    grid = grids.ablate(model, ids, diff, mode="mean", means=means)
    clean = diff.metric(hooked_logits(ref, kind, ids)[diff.position])
    scale = metric_scale(model, ids, diff)
    for l, h in ((0, 1), (1, 3)):
        got = diff.metric(hooked_logits(ref, kind, ids, z={(l, h): means[l, h]})[diff.position]) - clean
        f32_close(grid.values[l, h], got, depth=DEPTH, length=WIDTH, scale=scale)
    grid = grids.ablate(model, ids, diff, position=2)
    for l, h in ((0, 2), (1, 1)):
        got = diff.metric(hooked_logits(ref, kind, ids, z={(l, h, 2): 0.0})[diff.position]) - clean
        whole = diff.metric(hooked_logits(ref, kind, ids, z={(l, h): 0.0})[diff.position]) - clean
        f32_close(grid.values[l, h], got, depth=DEPTH, length=WIDTH, scale=scale, what=f"L{l}H{h}")
        assert abs(got - whole) > 1e-4, (l, h)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["resid", "attn", "mlp", "head"])
def test_patching_equals_transformers_with_a_hook_replacing_the_slice(models, kind, where, backend):
    _, model, ref, ids, diff, _ = _setup(models, kind, backend)
    bad = corrupted(ids)
    grid = grids.patch(model, ids, bad, diff, where=where)
    name = grids.PATCH_SITES[where]
    clean_tr = model.trace(ids, f"blocks.*.{name}")
    bad_tr = model.trace(bad, f"blocks.*.{name}")
    m = lambda **hooks: diff.metric(hooked_logits(ref, kind, bad, **hooks)[diff.position])  # noqa: E731
    clean, corrupt = diff.metric(hooked_logits(ref, kind, ids)[diff.position]), m()
    scale = max(metric_scale(model, ids, diff), metric_scale(model, bad, diff))
    for l, x in ((0, 1), (1, 3), (1, diff.position if where != "head" else 0)):
        value = clean_tr[f"blocks.{l}.{name}"]
        if where == "head":
            patched = m(z={(l, x): value[:, x].reshape(len(ids), -1)})
        else:
            mixed = bad_tr[f"blocks.{l}.{name}"].copy()
            mixed[x] = value[x]
            patched = m(resid={l: mixed}) if where == "resid" else m(out={(l, where): mixed})
        f32_close([grid.clean, grid.corrupt], [clean, corrupt], depth=DEPTH, length=WIDTH, scale=scale)
        restored = grid.corrupt + grid.values[l, x] * (grid.clean - grid.corrupt)  # the patched run's metric
        f32_close(restored, patched, depth=DEPTH, length=WIDTH, scale=scale, what=f"layer {l}, {x}")


@pytest.mark.parametrize("kind, tol, backend", [("gpt2", 1e-9, "numpy"), ("llama", 1e-5, "numpy"),  # Llama: float32
                                                ("gpt2", 1e-5, "torch"), ("llama", 1e-5, "torch")])
def test_patching_everything_restores_one_and_nothing_zero(models, kind, tol, backend):
    _, model, _, ids, diff, _ = _setup(models, kind, backend)
    bad = corrupted(ids)
    clean_tr, clean = grids.clean_run(model, ids, diff, [])
    bad_tr, corrupt = grids.clean_run(model, bad, diff, [])
    for l in range(model.layers):
        every = [Intervention(f"blocks.{l}.resid_pre", "replace", value=clean_tr[f"blocks.{l}.resid_pre"])]
        got = grids.run_from(model, bad, l, bad_tr[f"blocks.{l}.resid_pre"], [every, []], diff)
        assert (got - corrupt) / (clean - corrupt) == pytest.approx([1.0, 0.0], abs=tol)
    grid = grids.patch(model, ids, bad, diff, where="head")
    assert np.isfinite(grid.values).all() and np.abs(grid.values).max() > 1e-3


@pytest.mark.parametrize("kind, tol", [("gpt2", 1e-6), ("llama", 1e-4), ("qwen2", 1e-4), ("llama-bias", 1e-4)])
def test_dla_parts_add_up_to_the_logit(models, kind, tol):
    _, model, _, ids, diff, logp = _setup(models, kind)
    for t in (diff, logp):
        res = dla(model, ids, t)
        logits = model.trace(ids, "logits")["logits"][t.position]
        want = logits[t.token] - (logits[t.contrast] if t.contrast is not None else 0.0)
        assert abs(res["logit"] - want) < tol
        assert abs(res["sum"] - res["logit"]) < tol
        np.testing.assert_allclose(res["per_token"].sum(axis=-1), res["heads"], atol=tol)
        assert np.abs(res["heads"]).max() > 1e-3


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_the_torch_path_gives_the_numpy_paths_numbers(models, kind):
    """The generic path (one resumed trace per head) and the batched NumPy grid agree, mean
    ablation at one position included."""
    _, fast, _, ids, diff, logp = _setup(models, kind, "numpy")
    _, slow, _, _, _, _ = _setup(models, kind, "torch")
    means = grids.head_means(fast, [fast.encode("a dog and a cat").ids])
    f32_close(grids.head_means(slow, [fast.encode("a dog and a cat").ids]), means, depth=DEPTH, length=WIDTH)
    for t in (diff, logp):
        a, b = grids.ablate(fast, ids, t, mode="mean", means=means, position=1), \
            grids.ablate(slow, ids, t, mode="mean", means=means, position=1)
        scale = metric_scale(fast, ids, t)
        f32_close(b.clean, a.clean, depth=DEPTH, length=WIDTH, scale=scale)
        f32_close(b.values, a.values, depth=DEPTH, length=WIDTH, scale=scale)
        assert np.abs(a.values).max() > 1e-3


def test_cli_backend_torch(models, tiny_bert_dir, tmp_path):
    path, model, _, ids, diff, _ = _setup(models, "gpt2", "torch")
    base = ["--transformer", str(path), "--target-id", str(diff.token), "--contrast-id", str(diff.contrast)]
    result = runner.invoke(app, ["ablate", TEXT["gpt2"], *base, "--backend", "torch", "--json"])
    assert result.exit_code == 0, result.output
    want = grids.ablate(models("gpt2", "numpy")[1], ids, diff).values
    f32_close(json.loads(result.stdout)["grid"], want, depth=DEPTH, length=WIDTH, scale=metric_scale(model, ids, diff))
    result = runner.invoke(app, ["patch", TEXT["gpt2"], "the dog sat on the mat and the cat", *base, "--backend", "torch",
                                 "--site", "head", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["site"] == "head"

    def run(*args):
        r = runner.invoke(app, list(args), env={"COLUMNS": "300"})
        return r.exit_code, " ".join(r.output.split())

    code, out = run("dla", TEXT["gpt2"], *base, "--backend", "torch")
    assert code == 2 and "--backend numpy" in out and "torch backend" in out
    code, out = run("ablate", "the cat [MASK] .", "--transformer", str(tiny_bert_dir), "--target-id", "3",
                    "--backend", "torch")
    assert code == 2 and "no masked-language-model head" in out
    code, out = run("ablate", "the cat sat .", "--transformer", str(models("bert", "torch")[0]), "--target-id", "3",
                    "--backend", "torch")
    assert code == 2 and "[MASK]" in out
    opt = build_opt(path, tmp_path / "opt")
    for backend in ("auto", "torch"):
        code, out = run("ablate", "the cat sat", "--transformer", str(opt), "--target-id", "3", "--backend", backend)
        assert code == 2 and "'opt'" in out and "Traceback" not in out, out


def test_dla_refuses_a_post_norm_encoder(models):
    _, model, _, ids, _, logp = _setup(models, "bert")
    from attncli.errors import BadInput

    with pytest.raises(BadInput, match="post-LN"):
        dla(model, ids, logp)


def test_cli_ablate_json_and_exports(models, tmp_path):
    path, model, _, ids, diff, _ = _setup(models, "gpt2")
    target, contrast = model.token_strings([diff.token, diff.contrast])
    result = runner.invoke(app, ["ablate", TEXT["gpt2"], "--transformer", str(path), "--target-id", str(diff.token),
                                 "--contrast-id", str(diff.contrast), "--json", "--svg", str(tmp_path / "a.svg")])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    np.testing.assert_allclose(doc["grid"], grids.ablate(model, ids, diff).values, atol=1e-7)  # fixed: same pass, 8 decimals printed
    assert doc["target"]["metric"] == "logit_diff" and (tmp_path / "a.svg").stat().st_size > 1000
    shown = runner.invoke(app, ["ablate", TEXT["gpt2"], "--transformer", str(path), "--target-id", str(diff.token)],
                          env={"COLUMNS": "120", "NO_COLOR": "1"})
    assert shown.exit_code == 0 and "L1" in shown.stdout and "H3" in shown.stdout
    assert any(ch.isdigit() for ch in shown.stdout.split("L1")[1])  # the numbers are in the cells


def test_cli_refusals(models, tiny_bert_dir, tmp_path):
    path, model, _, ids, diff, _ = _setup(models, "gpt2")
    bert_path = models("bert")[0]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")

    def run(*args):
        r = runner.invoke(app, list(args), env={"COLUMNS": "300"})
        return r.exit_code, " ".join(r.output.split())

    code, out = run("ablate", TEXT["gpt2"], "--transformer", str(path), "--target-id", "3", "--mode", "mean",
                    "--reference", str(empty))
    assert code == 2 and "holds no text" in out
    code, out = run("ablate", TEXT["gpt2"], "--transformer", str(path), "--target", "zebra-crossing")
    assert code == 2 and "not one token" in out and "--target-id" in out
    code, out = run("ablate", "the cat [MASK] .", "--transformer", str(tiny_bert_dir), "--target-id", "3")
    assert code == 2 and "no masked-language-model head" in out and str(tiny_bert_dir)[-20:] in out.replace(" ", "")
    code, out = run("ablate", "the cat sat .", "--transformer", str(bert_path), "--target-id", "3")
    assert code == 2 and "[MASK]" in out
    code, out = run("patch", "the cat sat", "the cat sat on the mat", "--transformer", str(path), "--target-id", "3",
                    "--contrast-id", "4")
    assert code == 2 and "same number of tokens" in out and "clean has" in out and "corrupted has" in out
    code, out = run("patch", TEXT["gpt2"], TEXT["gpt2"], "--transformer", str(path), "--target-id", "3",
                    "--contrast-id", "4")
    assert code == 2 and "undefined" in out
    code, out = run("ablate", TEXT["gpt2"], "--transformer", str(path), "--target-id", "3", "--position", "99")
    assert code == 2 and "--position 99" in out


@pytest.fixture(scope="session")
def head_llama_dir(tmp_path_factory):
    from _llama_head_fixtures import build_head_llama

    return build_head_llama(tmp_path_factory.mktemp("heads") / "llama")


def _copies(model):
    """(ids, copied token) pairs: ``BOS A B ... Z A B ... Y`` for 8 random runs of 3-11 distinct
    tokens of the fixture's sentences (the tokens with orthogonal codes), Z to be copied; and each
    sentence repeated up to its last token but one, where that token occurred once before (in
    "she sells sea shells" the copy is ambiguous: tests/_llama_head_fixtures.py)."""
    from _llama_head_fixtures import SENTENCES

    sentences = [model.encode(s).ids for s in SENTENCES]
    bos, coded = sentences[0][0], sorted({i for ids in sentences for i in ids[1:]})
    rng = np.random.default_rng(0)
    out = []
    for n in rng.integers(3, 12, size=8):
        run = [int(i) for i in rng.choice(coded, size=n, replace=False)]
        out.append(([bos] + run + run[:-1], run[-1]))
    for ids in sentences:
        rep = ids + ids[1:-1]
        if rep[:-1].count(rep[-1]) == 1:
            out.append((rep, ids[-1]))
    assert len(out) == 8 + 3
    return out


def _drops(model):
    """Per copy: p(copied | clean) and the drop p(clean) - p(head zeroed) of each head (L, h), by
    attn ablate's own grid (batched on NumPy, one resumed trace per head on torch)."""
    for ids, token in _copies(model):
        grid = grids.ablate(model, ids, Target(len(ids) - 1, token, "copied"))
        yield np.exp(grid.clean), np.exp(grid.clean) - np.exp(grid.clean + grid.values)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_ablating_the_induction_head_drops_the_copied_token(head_llama_dir, backend):
    model = load(str(head_llama_dir), backend=backend)
    circuit = {(1, 0), (0, 1)}  # the induction head, and the previous-token head its keys are made of
    for clean, drop in _drops(model):
        assert clean > 0.95
        assert drop[1, 0] > 0.9, drop
        assert drop[0, 1] > 0.5, drop  # without previous codes the induction head spreads over every key
        for l, h in np.ndindex(drop.shape):
            if (l, h) not in circuit:
                assert abs(drop[l, h]) < 0.05, ((l, h), drop)


@pytest.mark.parametrize("command", [["ablate", "the cat sat"], ["patch", "the cat sat", "the dog sat"],
                                     ["dla", "the cat sat"]])
def test_an_export_target_attn_cannot_write_is_refused_before_the_model_loads(command, tmp_path):
    # the model folder does not exist: a check of the target made after loading would name the model
    missing = tmp_path / "no-such-model"
    result = runner.invoke(app, [*command, "--transformer", str(missing), "--target", "sat",
                                 "--svg", "/proc/version"])
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    assert "/proc/version" in said and "no-such-model" not in said
