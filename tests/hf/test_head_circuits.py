"""attncli.hf.methods.head_circuits (``attn heads --weights``) against TransformerLens 4 (a TransformerBridge
over the same transformers model, enable_compatibility_mode(): fold_ln, center_writing_weights,
center_unembed): its all_composition_scores, its OV and QK factored matrices and the copying score
of its full OV circuit W_E @ OV @ W_U, on tiny random GPT-2, Llama (grouped-query), Gemma, Qwen2
(tied) and Phi-3 models and on one of GPT-2 small's shape (12 layers, 12 heads, width 768; a small
vocabulary); against the matrices formed in float64 (brute force); and on the hand-built induction
model, whose previous-token -> induction K-composition is its largest score.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import needed

torch = needed("torch")
transformers = needed("transformers")
needed("transformer_lens", "transformer_lens is not installed: pip install transformer-lens (TransformerLens 4)")

from _causal_peer import boot_lens  # noqa: E402
from _llama_fixtures import build_decoder  # noqa: E402
from _tolerance import f32_close  # noqa: E402
import _transformer_fixtures as tf  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.methods.head_circuits import MODES, composition_scores, copying_scores, head_factors, unembedded  # noqa: E402

torch.set_num_threads(1)


def build_gpt2(directory: Path, *, layers: int = 3, heads: int = 4, width: int = 48) -> Path:
    """A GPT-2 whose biases and LayerNorm weights are moved off their init (so folding them bites)."""
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

    vocab, merges = tf.train_byte_bpe(["<|endoftext|>"])
    tokenizer = GPT2Tokenizer(vocab=vocab, merges=merges)
    tf._seed()
    config = GPT2Config(vocab_size=len(vocab), n_embd=width, n_layer=layers, n_head=heads, n_positions=64,
                        initializer_range=0.2, bos_token_id=vocab["<|endoftext|>"], eos_token_id=vocab["<|endoftext|>"])
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name or name.startswith("transformer.ln_f"):
                param.add_(torch.randn_like(param) * 0.2)
    return tf._finish(model, tokenizer, Path(directory))


def lens_scores(directory: Path) -> dict[str, np.ndarray]:
    bridge = boot_lens(str(directory))
    bridge.enable_compatibility_mode(disable_warnings=True)
    with torch.no_grad():
        out = {m: bridge.all_composition_scores(m).scores.double().numpy() for m in MODES}
        out["OV"] = bridge.OV.AB.double().numpy()  # (L, h, d, d)
        out["QK"] = bridge.QK.AB.double().numpy()
        lam = (bridge.W_E @ bridge.OV @ bridge.W_U).eigenvalues  # (L, h, d_head)
        out["copying"] = (lam.sum(-1).real / lam.abs().sum(-1)).double().numpy()
    return out


def ours(directory: Path) -> dict[str, np.ndarray]:
    model = load(str(directory), backend="numpy")
    f = head_factors(model.arch)
    out = dict(composition_scores(f, np.float64))
    out["OV"], out["QK"] = f.OV(), f.QK()
    out["copying"] = copying_scores(f, unembedded(model, f.norm).gram())
    out["factors"] = f
    return out


def check_against_lens(directory: Path, width: int, layers: int) -> None:
    mine, lens = ours(directory), lens_scores(directory)
    for key in (*MODES, "OV", "QK", "copying"):
        assert mine[key].shape == lens[key].shape, key
        # TransformerLens computes in float32: its products reduce over the width, through the layers' folding
        f32_close(mine[key], lens[key], depth=layers, length=width, what=key)
    for m in MODES:  # the brief's bound too: every score within 1e-5
        assert np.abs(mine[m] - lens[m]).max() < 1e-5  # fixed: the stated bound on a score in [0, 1]


@pytest.mark.parametrize("kind", ["gpt2", "llama", "gemma", "qwen2", "phi3"])
def test_scores_equal_transformer_lens(kind, tmp_path):
    if kind == "gpt2":
        check_against_lens(build_gpt2(tmp_path / kind), 48, 3)
    else:
        check_against_lens(build_decoder(kind, tmp_path / kind), 37, 2)


@pytest.mark.slow
def test_gpt2_small_layers_equal_transformer_lens(tmp_path):
    """GPT-2 small's layer shape (12 heads of 64, width 768), 3 of its 12 layers: TransformerLens forms
    every pair's product of (L h)^2 heads, so the whole 144-head model takes minutes of its time (6.5 on
    a busy machine); the width and the heads, which set the rounding, are the real ones."""
    check_against_lens(build_gpt2(tmp_path / "gpt2-small", layers=3, heads=12, width=768), 768, 3)


def brute_force(f, G: np.ndarray) -> dict[str, np.ndarray]:
    """Every score from the formed (d, d) and (V, V)-sized products, float64."""
    L, h = f.layers, f.heads
    OV, QK = f.OV(), f.QK()
    out = {m: np.zeros((L, h, L, h)) for m in MODES}
    for l1 in range(L):
        for h1 in range(h):
            for l2 in range(l1 + 1, L):
                for h2 in range(h):
                    A = OV[l1, h1]
                    for m, B in (("Q", QK[l2, h2]), ("K", QK[l2, h2].T), ("V", OV[l2, h2])):
                        out[m][l1, h1, l2, h2] = np.linalg.norm(A @ B) / np.linalg.norm(A) / np.linalg.norm(B)
    return out


def test_composition_and_copying_equal_the_formed_matrices(tmp_path):
    directory = build_decoder("llama", tmp_path / "llama")
    model = load(str(directory), backend="numpy")
    f = head_factors(model.arch)
    comp = composition_scores(f, np.float64)
    want = brute_force(f, None)
    for m in MODES:
        np.testing.assert_allclose(comp[m], want[m], rtol=0, atol=1e-12)
    lm = unembedded(model, f.norm)
    # the full (V, V) OV circuit, formed: its eigenvalues, all V of them (the zero ones add nothing)
    E, U = lm.E.astype(np.float64), (lm.U.astype(np.float64) * lm.w_f).T  # (V, d), (d, V)
    U = U - U.mean(axis=1, keepdims=True)  # centred over the vocabulary
    got = copying_scores(f, lm.gram())  # (L, h): W_U W_E is one float32 product over the vocabulary
    want = np.zeros_like(got)
    for l in range(f.layers):
        for h in range(f.heads):
            lam = np.linalg.eigvals(E @ f.W_V[l, h] @ f.W_O[l, h] @ U)  # (V,)
            want[l, h] = lam.sum().real / np.abs(lam).sum()
    f32_close(got, want, length=E.shape[0], scale=1.0, what="copying")


def test_float32_products_keep_the_float64_scores(tmp_path):
    model = load(str(build_gpt2(tmp_path / "gpt2")), backend="numpy")
    f = head_factors(model.arch)
    wide, narrow = composition_scores(f, np.float64), composition_scores(f, np.float32)
    for m in MODES:
        f32_close(narrow[m], wide[m], length=f.W_Q.shape[-2] ** 2, what=m)


def test_induction_model_k_composition_is_the_largest(tmp_path):
    from _llama_head_fixtures import build_head_llama

    model = load(str(build_head_llama(tmp_path / "heads")), backend="numpy")
    comp = composition_scores(head_factors(model.arch))
    best = max(((m, tuple(int(i) for i in np.unravel_index(comp[m].argmax(), comp[m].shape))) for m in MODES),
               key=lambda p: comp[p[0]][p[1]])
    assert best == ("K", (0, 1, 1, 0)), best  # layer 0 head 1 (previous token) -> layer 1 head 0's keys
    second = max(np.sort(comp[m].ravel())[-2 if m == "K" else -1] for m in MODES)
    assert comp["K"][0, 1, 1, 0] > 1.5 * second


def test_qwen3_per_head_norm_weights_are_folded(tmp_path):
    """Qwen3's q_norm and k_norm (d_head,) scale each head's query and key columns: folded in, from
    transformers' own parameters (the per-token RMS scale is left out, and said)."""
    directory = build_decoder("qwen3", tmp_path / "qwen3")
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(directory)).eval()
    f = head_factors(load(str(directory), backend="numpy").arch)
    assert f.folded_norms == ("q_norm", "k_norm")
    sd = {k: v.double().numpy() for k, v in hf.state_dict().items()}
    dh, group = f.W_Q.shape[-1], f.heads // f.kv_heads
    for l in range(f.layers):
        p = f"model.layers.{l}."
        n1 = sd[p + "input_layernorm.weight"]
        for h in range(f.heads):
            wq = sd[p + "self_attn.q_proj.weight"][h * dh:(h + 1) * dh].T  # (d, dh)
            wk = sd[p + "self_attn.k_proj.weight"][(h // group) * dh:(h // group + 1) * dh].T
            f32_close(f.W_Q[l, h], n1[:, None] * wq * sd[p + "self_attn.q_norm.weight"][None], what="W_Q")
            f32_close(f.W_K[l, h], n1[:, None] * wk * sd[p + "self_attn.k_norm.weight"][None], what="W_K")


def test_top_tokens_equal_a_full_sort_by_score_then_id():
    """top_tokens (the candidates above the k-th largest block maximum, sorted) is a full sort of
    each row by score, largest first, equal scores by id: rows with ties planted across blocks and
    inside the top k, a row wider than TOP_BLOCK's multiple, k near the row's width; and a row with
    a NaN takes the whole sort (NaN last)."""
    from attncli.hf.methods.head_circuits import TOP_BLOCK, top_tokens

    rng = np.random.default_rng(0)
    for n, V, k in ((7, 5 * TOP_BLOCK + 13, 5), (3, 2 * TOP_BLOCK + 1, 2 * TOP_BLOCK), (4, 40, 3), (2, 300, 1)):
        scores = rng.integers(-20, 20, size=(n, V)).astype(np.float32)  # many equal scores
        scores[0, [3, V - 1, min(TOP_BLOCK + 2, V - 2)]] = 50.0  # a tie at the top, across blocks
        full = np.lexsort((np.broadcast_to(np.arange(V), (n, V)), -scores), axis=-1)[:, :min(k, V)]  # (n, k)
        np.testing.assert_array_equal(top_tokens(scores, k), full)
    scores = rng.standard_normal((2, 3 * TOP_BLOCK))
    scores[1, 5] = np.nan
    want = np.argsort(-np.nan_to_num(scores, nan=-np.inf), axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(top_tokens(scores, 3), want)
