"""attn attribute --backend torch (attncli/causal/attribution.py's attribute_by_gradients over the model
interface's ``site_gradients``, hf/backends/torch_grad.py: torch autograd through transformers' own modules)
equals the NumPy tape's plain AtP on GPT-2 (both float64) and Llama (both float32: f32_close), through
the CLI's JSON too; a family only transformers runs (OPT) is attributed at --site resid, checked against
a direct autograd computation of the same metric here; what needs the tape is refused by the table (attn circuit --backend torch: tests/causal/test_circuit_torch.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import needed
from typer.testing import CliRunner

torch = needed("torch")
needed("transformers")
needed("tokenizers")

from _llama_fixtures import build_decoder  # noqa: E402
from _tolerance import f32_close, f32_size  # noqa: E402

from attncli.causal.attribution import attribute  # noqa: E402
from attncli.causal.target import resolve  # noqa: E402
from attncli.cli.main import app  # noqa: E402
from attncli.hf import load  # noqa: E402

CLEAN, CORRUPT = [1, 5, 9, 12, 30, 7, 8], [1, 5, 9, 14, 30, 7, 8]
SITES = ("resid", "attn", "mlp", "head")


def grids(path, target_id=5, *, float64=False):
    torch_model, numpy_model = load(str(path), backend="torch"), load(str(path), backend="numpy")
    if float64:
        torch_model.model.to(torch.float64)
    t = resolve(numpy_model, CLEAN, target=None, target_id=target_id)
    return {s: (attribute(torch_model, CLEAN, CORRUPT, t, where=s, qk_fix=False).values,
                attribute(numpy_model, CLEAN, CORRUPT, t, where=s, qk_fix=False).values) for s in SITES}


def test_gpt2_torch_grids_equal_the_numpy_tapes_in_float64(tiny_gpt2_dir):
    for site, (ours, want) in grids(tiny_gpt2_dir, float64=True).items():
        np.testing.assert_allclose(ours, want, rtol=1e-9, atol=1e-9 * np.abs(want).max(), err_msg=site)


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_llama_family_torch_grids_equal_the_numpy_tapes(tmp_path, kind):
    path = build_decoder(kind, tmp_path / kind)
    depth, length = f32_size(path)
    for site, (ours, want) in grids(path).items():
        # a grid cell is the sum of T d products of float32 sites and gradients, through 2 depth passes
        f32_close(ours, want, 2 * depth + 2, length * len(CLEAN), what=site)


def run(*args):
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "160"})
    return result


def test_the_cli_json_on_torch_equals_numpys(tiny_gpt2_dir):
    args = ["attribute", "the dog sat", "the dog on", "--transformer", str(tiny_gpt2_dir), "--target-id", "5",
            "--no-qk-fix", "--site", "head", "--json"]
    a, b = run(*args, "--backend", "torch"), run(*args, "--backend", "numpy")
    assert a.exit_code == 0 and b.exit_code == 0, (a.output, b.output)
    ours, want = json.loads(a.stdout), json.loads(b.stdout)
    depth, length = f32_size(tiny_gpt2_dir)
    f32_close(np.array(ours["grid"]), np.array(want["grid"]), 2 * depth + 2, length * 3, printed=5e-7)
    assert ours["clean"] == pytest.approx(want["clean"], abs=1e-4)  # fixed: 6 printed digits of float32 logits


@pytest.mark.parametrize("extra, says", [([], "QK fix recomputes attention patterns on attn's NumPy tape: with "
                                              "--backend torch add --no-qk-fix"),
                                         (["--no-qk-fix", "--site", "key"], "--site key recomputes a head's pattern")])
def test_what_needs_the_tape_is_refused_on_torch(tiny_gpt2_dir, extra, says):
    r = run("attribute", "the dog sat", "the dog on", "--transformer", str(tiny_gpt2_dir), "--target-id", "5",
            "--backend", "torch", *extra)
    assert r.exit_code == 2 and says in r.output and "Traceback" not in r.output


def opt_dir(tmp_path, tiny_gpt2_dir):
    """A tiny random OPT (a family attn's NumPy pass does not run) with GPT-2's tokenizer files."""
    import shutil

    import transformers

    torch.manual_seed(0)
    config = transformers.OPTConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=2, ffn_dim=37,
                                    num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=32,
                                    pad_token_id=1, bos_token_id=2, eos_token_id=2)
    model = transformers.OPTForCausalLM(config).eval()
    path = tmp_path / "opt"
    model.save_pretrained(path)
    for f in tiny_gpt2_dir.iterdir():
        if f.name not in ("config.json",) and not f.name.endswith((".safetensors", ".bin", ".json.index")) \
                and "generation" not in f.name:
            shutil.copy(f, path / f.name)
    return path, model


def test_a_family_only_transformers_runs_is_attributed_at_resid(tmp_path, tiny_gpt2_dir):
    path, reference = opt_dir(tmp_path, tiny_gpt2_dir)
    model = load(str(path), backend="torch")
    t = resolve(model, CLEAN, target=None, target_id=5)
    res = attribute(model, CLEAN, CORRUPT, t, where="resid", qk_fix=False)
    # the same metric's AtP by hand: log p(5) at the last position, d / d each layer's input on the corrupted run
    layers = reference.model.decoder.layers
    held = {}

    def pass_of(ids, grad):
        hooks = [layer.register_forward_pre_hook(lambda m, a, kw, l=l: held.__setitem__(l, a[0] if a else kw["hidden_states"]),
                                                 with_kwargs=True) for l, layer in enumerate(layers)]
        try:
            with torch.set_grad_enabled(grad):
                logits = reference(input_ids=torch.tensor([ids])).logits[0, -1].double()
                metric = torch.log_softmax(logits, -1)[5]
                xs = [held[l] for l in range(len(layers))]
                gs = torch.autograd.grad(metric, xs) if grad else None
        finally:
            for h in hooks:
                h.remove()
        return metric.item(), [x[0].detach().double() for x in xs], gs

    m_clean, clean_x, _ = pass_of(CLEAN, False)
    m_corrupt, corrupt_x, gs = pass_of(CORRUPT, True)
    want = np.array([((c - x) * g[0].double()).sum(-1).numpy() for c, x, g in zip(clean_x, corrupt_x, gs)])
    want /= m_clean - m_corrupt
    depth, length = f32_size(path)
    f32_close(res.values, want, 2 * depth + 2, length * len(CLEAN))
    assert res.values.shape == (2, len(CLEAN)) and np.abs(want).max() > 0
    with pytest.raises(Exception, match="--site resid"):
        attribute(model, CLEAN, CORRUPT, t, where="attn", qk_fix=False)


def test_pairs_run_on_torch(tiny_gpt2_dir, tmp_path):
    """--pairs --backend torch runs the torch model (float32: its grid differs from the float64 NumPy
    tape's in the last digits) and equals the NumPy mean within float32 rounding."""
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"clean": "the dog sat", "corrupt": "the dog on", "target_id": 5}\n'
                     '{"clean": "the dog on", "corrupt": "the dog sat", "target_id": 7}\n', encoding="utf-8")
    args = ["attribute", "--pairs", str(pairs), "--transformer", str(tiny_gpt2_dir), "--no-qk-fix", "--json"]
    a, b = run(*args, "--backend", "torch"), run(*args)
    assert a.exit_code == 0 and b.exit_code == 0, (a.output, b.output)
    ours, want = np.array(json.loads(a.stdout)["grid"]), np.array(json.loads(b.stdout)["grid"])
    depth, length = f32_size(tiny_gpt2_dir)
    f32_close(ours, want, 2 * depth + 2, length * 3)
    assert not np.array_equal(ours, want)  # the torch model ran (float32), not the NumPy tape again


def test_the_numpy_models_site_gradients_give_the_tapes_grids(tiny_gpt2_dir):
    """The same interface on attn's NumPy pass (pretrained_base.site_gradients, from its float64 tape):
    the generic path's grids equal the tape path's."""
    from attncli.causal.attribution import attribute_by_gradients

    model = load(str(tiny_gpt2_dir), backend="numpy")
    t = resolve(model, CLEAN, target=None, target_id=5)
    for s in SITES:
        ours = attribute_by_gradients(model, CLEAN, CORRUPT, t, where=s, qk_fix=False).values
        want = attribute(model, CLEAN, CORRUPT, t, where=s, qk_fix=False).values
        np.testing.assert_allclose(ours, want, rtol=1e-12, atol=1e-12 * np.abs(want).max(), err_msg=s)
