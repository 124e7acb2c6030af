"""Attribution patching (attncli/causal/attribution.py): each cell equals a first-order (central)
finite-difference estimate of the same patch made through attn's own traced pass; the --verify
cells equal attn patch's exact grid; on the hand-built induction Llama the two heads AtP ranks first
are the two activation patching ranks first; AtP*'s QK fix equals patching the key exactly where
the rest of the model is linear in the pattern."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed
from _tolerance import f32_atol

needed("torch")
needed("transformers")
needed("tokenizers")

from _transformer_fixtures import build_gpt2, every_parameter_drawn  # noqa: E402

from attncli.causal import grids  # noqa: E402
from attncli.causal.attribution import attribute, verify  # noqa: E402
from attncli.causal.target import Target, mask_position  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.model.trace import Intervention, site  # noqa: E402

CLEAN, CORRUPT = "the cat sat on the mat and the dog", "the dog ran to the log and the cat"
NAMES = {"resid": "resid_pre", "attn": "attn.out", "mlp": "mlp.out", "head": "attn.z"}


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    d = tmp_path_factory.mktemp("atp")
    return load(every_parameter_drawn(build_gpt2(d / "base"), d / "gpt2", seed=3), backend="numpy")


def _pair(model):
    clean, corrupt = model.encode(CLEAN).ids, model.encode(CORRUPT).ids
    n = min(len(clean), len(corrupt))
    return clean[:n], corrupt[:n]


def _metric(model, ids, target, ivs=()):
    return float(target.metric(model.trace(list(ids), "logits", interventions=list(ivs))["logits"][target.position]))


@pytest.mark.parametrize("where", ["resid", "attn", "mlp", "head"])
@pytest.mark.parametrize("contrast", [None, 5])
def test_each_cell_is_the_first_order_estimate_of_its_patch(gpt2, where, contrast):
    clean, corrupt = _pair(gpt2)
    target = Target(len(clean) - 1, 7, "t", contrast, None if contrast is None else "c")
    res = attribute(gpt2, clean, corrupt, target, where=where, qk_fix=False)  # plain AtP: the first-order estimate
    name = NAMES[where]
    c_tr, k_tr = gpt2.trace(clean, [f"blocks.*.{name}"]), gpt2.trace(corrupt, [f"blocks.*.{name}"])
    m_c, m_k = _metric(gpt2, clean, target), _metric(gpt2, corrupt, target)
    assert abs(res.clean - m_c) < 1e-9 and abs(res.corrupt - m_k) < 1e-9
    eps = 1e-3
    rng = np.random.default_rng(0)
    cells = [(int(rng.integers(gpt2.layers)), int(rng.integers(res.values.shape[1]))) for _ in range(6)]
    for l, x in cells:
        before, after = k_tr[site(l, name)], c_tr[site(l, name)]
        if where == "head":
            b, a = before[:, x], after[:, x]
            ivs = lambda s: [Intervention(site(l, name), "replace", head=x, value=b + s * (a - b))]  # noqa: E731
        else:
            b, a = before[x], after[x]
            ivs = lambda s: [Intervention(site(l, name), "replace", position=x, value=b + s * (a - b))]  # noqa: E731
        fd = (_metric(gpt2, corrupt, target, ivs(eps)) - _metric(gpt2, corrupt, target, ivs(-eps))) / (2 * eps)
        assert abs(res.values[l, x] - fd / (m_c - m_k)) <= 1e-4 * max(1.0, abs(res.values[l, x])), (where, l, x)  # fixed: central difference, eps 1e-3


def _fraction_tol(model, res) -> float:
    """attn patch's grid runs on the float32 pass (causal.grids.in_float32), verify's patches on the
    float64 one: a restored fraction carries two float32 metrics' rounding (the logits' scale, every
    layer and the head, the log-softmax's sum over the vocabulary the widest) over their difference."""
    scale = max(1.0, abs(res.clean), abs(res.corrupt))
    return 2 * f32_atol(scale, depth=model.layers + 1, length=model.vocab_size) / abs(res.clean - res.corrupt)


def test_verify_patches_the_largest_cells_exactly_as_attn_patch_does(gpt2):
    clean, corrupt = _pair(gpt2)
    target = Target(len(clean) - 1, 7, "t")
    exact = grids.patch(gpt2, clean, corrupt, target, where="head").values  # (L, h)
    res = verify(gpt2, clean, corrupt, target, attribute(gpt2, clean, corrupt, target, where="head"), 4)
    assert len(res.verified) == 4
    sizes = [abs(c["estimate"]) for c in res.verified]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == np.abs(res.values).max()
    for cell in res.verified:
        l = int(cell["row"][1:])
        assert abs(cell["exact"] - exact[l, cell["column"]]) < _fraction_tol(gpt2, res)


def test_the_qk_fix_is_exact_for_a_last_layer_key(gpt2):
    """In the last layer a key reaches the metric only through its head's pattern, and the pattern
    reaches the logits linearly (z = A v, then a linear map and the final norm): AtP* recomputes the
    pattern exactly, so its estimate differs from the exact patch only by the final norm's and
    log-softmax's curvature; the plain linear estimate through the softmax does worse."""
    clean, corrupt = _pair(gpt2)
    target = Target(len(clean) - 1, 7, "t", 5, "c")  # a logit difference: linear in the final norm's output
    fixed = verify(gpt2, clean, corrupt, target, attribute(gpt2, clean, corrupt, target, where="key"), 6)
    plain = attribute(gpt2, clean, corrupt, target, where="key", qk_fix=False)
    L, h = gpt2.layers, gpt2.heads
    last = [c for c in fixed.verified if int(c["row"][1:].split("H")[0]) == L - 1]
    assert last, "no last-layer key among the largest cells"
    for cell in last:
        l, head = map(int, cell["row"][1:].split("H"))
        err_fixed = abs(cell["estimate"] - cell["exact"])
        err_plain = abs(plain.values[l * h + head, cell["column"]] - cell["exact"])
        assert err_fixed <= 0.05 * abs(cell["exact"]) + 1e-6 and err_fixed <= err_plain + 1e-12


def test_on_the_induction_llama_atp_and_patching_agree_on_the_two_heads(tmp_path):
    from _llama_head_fixtures import build_head_llama, induction_pair

    model = load(str(build_head_llama(tmp_path / "llama")), backend="numpy")
    clean, corrupt, target = induction_pair(model)  # a logit difference: log p saturates on the corrupted run
    exact = grids.patch(model, clean, corrupt, target, where="head").values  # (L, h)
    atp = attribute(model, clean, corrupt, target, where="head").values
    top = lambda g: set(map(tuple, np.argwhere(np.abs(g) >= np.sort(np.abs(g), axis=None)[-2])))  # noqa: E731
    assert top(exact) == top(atp) == {(1, 0), (0, 1)}, (exact.round(3), atp.round(3))
    assert np.all(np.sign(exact[[1, 0], [0, 1]]) == np.sign(atp[[1, 0], [0, 1]]))


def test_refusals(gpt2, tiny_bert_dir):
    clean, corrupt = _pair(gpt2)
    target = Target(len(clean) - 1, 7, "t")
    with pytest.raises(BadInput, match="--site"):
        attribute(gpt2, clean, corrupt, target, where="neurons")
    with pytest.raises(BadInput, match="same number of tokens"):
        attribute(gpt2, clean, corrupt[:-1], target)
    with pytest.raises(BadInput, match="same"):
        attribute(gpt2, clean, clean, target)
    bert = load(str(tiny_bert_dir), backend="numpy")
    with pytest.raises(BadInput, match="masked-language-model head"):
        attribute(bert, [1, 2], [2, 1], Target(1, 3, "x"))


def test_the_qk_fix_brings_the_grids_closer_to_exact_patching(gpt2):
    """AtP*'s claim, on a model whose attention saturates (every weight drawn at std 0.5): over the
    four grids, the QK-fixed estimates sit closer to activation patching than plain AtP's."""
    clean, corrupt = _pair(gpt2)
    target = Target(len(clean) - 1, 7, "t", 5, "c")
    fixed = plain = 0.0
    for where in ("resid", "attn", "mlp", "head"):
        exact = grids.patch(gpt2, clean, corrupt, target, where=where).values
        fixed += np.abs(attribute(gpt2, clean, corrupt, target, where=where).values - exact).mean()
        plain += np.abs(attribute(gpt2, clean, corrupt, target, where=where, qk_fix=False).values - exact).mean()
    assert fixed < 0.9 * plain, (fixed, plain)


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    from _trace_reference import drawn_mlm

    return load(str(drawn_mlm("bert", tmp_path_factory.mktemp("atp-bert") / "bert", std=1.0)), backend="numpy")


@pytest.mark.parametrize("where", ["resid", "attn", "mlp", "head", "key", "query"])
def test_on_a_bert_each_cell_is_the_first_order_estimate_of_its_patch(bert, where):
    """A post-LN encoder read at its mask by the MLM head: plain AtP's cells are the central finite
    differences of the patch through attn's traced pass (sites as on a decoder, the MLM logits)."""
    clean = bert.encode("the cat sat on the [MASK] and the dog .").ids
    corrupt = bert.encode("the dog sat on the [MASK] and the cat .").ids
    assert len(clean) == len(corrupt)
    target = Target(clean.index(bert.vocab_id("[MASK]")), 7, "t")
    res = attribute(bert, clean, corrupt, target, where=where, qk_fix=False)
    name = {**NAMES, "key": "attn.k", "query": "attn.q"}[where]
    c_tr, k_tr = bert.trace(clean, [f"blocks.*.{name}"]), bert.trace(corrupt, [f"blocks.*.{name}"])
    m_c, m_k = _metric(bert, clean, target), _metric(bert, corrupt, target)
    assert abs(res.clean - m_c) < 1e-9 and abs(res.corrupt - m_k) < 1e-9 and abs(m_c - m_k) > 1e-2
    eps, h = 1e-3, bert.heads
    rng = np.random.default_rng(0)
    for r, x in [(int(rng.integers(res.values.shape[0])), int(rng.integers(res.values.shape[1]))) for _ in range(6)]:
        l, head = divmod(r, h) if where in ("key", "query") else (r, None)
        before, after = k_tr[site(l, name)], c_tr[site(l, name)]
        if where == "head":
            b, a, at = before[:, x], after[:, x], dict(head=x)
        elif head is not None:
            b, a, at = before[head, x], after[head, x], dict(head=head, position=x)
        else:
            b, a, at = before[x], after[x], dict(position=x)
        ivs = lambda s: [Intervention(site(l, name), "replace", value=b + s * (a - b), **at)]  # noqa: E731
        fd = (_metric(bert, corrupt, target, ivs(eps)) - _metric(bert, corrupt, target, ivs(-eps))) / (2 * eps)
        assert abs(res.values[r, x] - fd / (m_c - m_k)) <= 1e-4 * max(1.0, abs(res.values[r, x])), (where, r, x)  # fixed: central difference, eps 1e-3
    assert np.abs(res.values).max() > 1e-3


def test_on_a_bert_the_qk_fix_changes_keys_queries_and_a_layer_input_only(bert):
    """On a post-LN encoder the QK fix has a direct path only into a resid node's own layer and a key's
    or query's own head: an attn, mlp or head node keeps plain AtP's linear estimate; resid, key and
    query cells move, each --verify cell is the exact patch."""
    clean = bert.encode("the cat sat on the [MASK] and the dog .").ids
    corrupt = bert.encode("the dog sat on the [MASK] and the cat .").ids
    target = Target(clean.index(bert.vocab_id("[MASK]")), 7, "t", 9, "c")
    for where in ("resid", "attn", "mlp", "head", "key", "query"):
        fixed, plain = (attribute(bert, clean, corrupt, target, where=where, qk_fix=q).values for q in (True, False))
        if where in ("attn", "mlp", "head"):
            np.testing.assert_array_equal(fixed, plain)
        else:
            assert np.abs(fixed - plain).max() > 1e-6, where
    exact = grids.patch(bert, clean, corrupt, target, where="resid").values  # (L, T), on the float32 pass
    res = verify(bert, clean, corrupt, target, attribute(bert, clean, corrupt, target, where="resid"), 3)
    for cell in res.verified:
        assert abs(cell["exact"] - exact[int(cell["row"][1:]), cell["column"]]) < _fraction_tol(bert, res)


@pytest.mark.parametrize("kind", ["bert", "mpnet"])
@pytest.mark.parametrize("where", ["key", "query"])
def test_on_an_encoder_the_qk_fix_of_a_key_or_query_is_the_traced_patterns_change(tmp_path_factory, kind, where):
    """AtP* on a key (query) node: the head's pattern with that clean key (query) put in, read off
    attn's traced pass (MPNet's relative position bias included there), minus the corrupted run's,
    times d metric / d pattern (hf/methods/backward_encoder.py's, checked against autograd)."""
    from _trace_reference import drawn_mlm

    from attncli.hf.methods.backward_encoder import gradients

    model = load(str(drawn_mlm(kind, tmp_path_factory.mktemp(kind) / kind, std=1.0)), backend="numpy")
    mask = "[MASK]" if kind == "bert" else "<mask>"
    clean = model.encode(f"the cat sat on the {mask} and the dog .").ids
    corrupt = model.encode(f"the dog sat on the {mask} and the cat .").ids
    target = Target(mask_position(model, clean), 7, "t", 9, "c")
    res = attribute(model, clean, corrupt, target, where=where, qk_fix=True)
    name = "attn.k" if where == "key" else "attn.q"
    grads, _ = gradients(model, corrupt, target.position, target.gradient)
    c_tr = model.trace(clean, [f"blocks.*.{name}"])
    k_tr = model.trace(corrupt, ["blocks.*.attn.pattern"])
    h = model.heads
    largest = np.argsort(-np.abs(res.values), axis=None)[:4]  # (row, column) flat: layer * h + head, position
    for r, pos in zip(*np.unravel_index(largest, res.values.shape)):
        l, head, pos = *divmod(int(r), h), int(pos)
        iv = Intervention(site(l, name), "replace", head=head, position=pos, value=c_tr[site(l, name)][head, pos])
        new = model.trace(corrupt, [site(l, "attn.pattern")], interventions=[iv])[site(l, "attn.pattern")][head]
        want = ((new - k_tr[site(l, "attn.pattern")][head]) * grads[site(l, "attn.pattern")][head]).sum()
        assert res.values[l * h + head, pos] * (res.clean - res.corrupt) == pytest.approx(want, rel=1e-9, abs=1e-12)
        assert abs(want) > 1e-6


@pytest.mark.parametrize("where, qk_fix", [("resid", True), ("key", False)])
def test_a_model_without_the_numpy_tape_is_refused_by_name(tiny_gpt2_dir, where, qk_fix):
    """The torch backend has gradients ("grad") but not attn's tape, on which AtP*'s QK fix and the key
    and query sites recompute patterns: they are refused naming the method and the reason, before any
    pass (plain AtP runs on torch: tests/causal/test_attribution_torch.py)."""
    model = load(str(tiny_gpt2_dir), backend="torch")
    ids = list(model.encode("the cat sat on").ids)
    with pytest.raises(BadInput, match=r"(QK fix|--site key).*torch backend"):
        attribute(model, ids, ids, Target(len(ids) - 1, 7, "t"), where=where, qk_fix=qk_fix)
