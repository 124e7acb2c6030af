"""Retrieval heads (attncli/causal/retrieval_heads.py) against a brute-force reference: transformers'
eager pass with output_attentions over the whole sequence at every step (no cache), greedy, and a
plain loop over every layer, head and step for the copy-paste rule; on every family attn's NumPy
path runs. The key/value cache that keeps only the decoded rows (hf/backends/numpy_rows_cache.py)
against the traced pass, and its head masks against the trace's own interventions."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed
from _llama_fixtures import build_decoder
from _tolerance import f32_close, f32_size
from attncli.causal import retrieval_heads as rh
from attncli.hf import load
from attncli.model.trace import Keep

FAMILIES = ("gpt2", "llama", "qwen2", "qwen3", "gemma3")
STEPS = 12


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_gpt2_dir):
    built = {}

    def get(kind: str):
        if kind not in built:
            built[kind] = tiny_gpt2_dir if kind == "gpt2" else build_decoder(kind, tmp_path_factory.mktemp(kind))
        return built[kind]
    return get


def prompt(model, seed: int = 0) -> tuple[list[int], tuple[int, int]]:
    """A prompt of 26 tokens and a needle span (its last 22), drawn from few ids: each round's ids
    are the previous prompt's and those the model wrote after it, so that a head's top key often
    holds the token the model writes."""
    rng = np.random.default_rng(seed)
    pool = [i for i in range(10, 200) if i not in model.special_ids][:3]
    for _ in range(3):
        ids = [int(i) for i in rng.choice(pool, 26)]
        emitted, _ = rh.decode(model, model.new_rows_cache(), ids, 4)
        pool = list(dict.fromkeys([t for t in emitted if t not in model.special_ids][:2] + pool))[:4]
    return [int(i) for i in rng.choice(pool, 26)], (4, 26)  # a sliding window of 4 (Qwen2, Gemma 3) reaches it


def reference(path, ids: list[int], span: tuple[int, int], steps: int):
    """(emitted tokens, (L, h) scores): greedy decoding by whole passes of transformers' eager
    attention, the copy-paste rule as loops."""
    torch = needed("torch")
    transformers = needed("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
    tok = transformers.AutoTokenizer.from_pretrained(path)
    specials = {tok.bos_token_id, tok.eos_token_id, tok.pad_token_id} - {None}  # the ids a model names
    seq = list(ids)
    emitted = []
    L, H = model.config.num_hidden_layers, model.config.num_attention_heads
    copied = [[set() for _ in range(H)] for _ in range(L)]
    for _ in range(steps):
        with torch.no_grad():
            out = model(torch.tensor([seq]), output_attentions=True)
        w = int(out.logits[0, -1].argmax())
        for l in range(L):
            for h in range(H):
                row = out.attentions[l][0, h, -1].double().numpy()
                s = int(np.argmax(row))
                if span[0] <= s < span[1] and seq[s] == w:
                    copied[l][h].add(s)
        emitted.append(w)
        seq.append(w)
        if w in specials or "\n" in tok.decode([w]):
            break
    scores = np.array([[len(copied[l][h]) / (span[1] - span[0]) for h in range(H)] for l in range(L)])
    return emitted, scores


@pytest.mark.parametrize("kind", FAMILIES)
def test_scores_equal_the_brute_force_reference(tiny, kind):
    path = tiny(kind)
    model = load(str(path), backend="numpy")
    hits = 0
    for seed in range(6):
        ids, span = prompt(model, seed)
        cache = model.new_rows_cache()
        emitted, rows = rh.decode(model, cache, ids, STEPS)
        got = rh.copy_paste(rows, emitted, ids, span)
        want_tokens, want = reference(str(path), ids, span, STEPS)
        assert emitted == want_tokens
        np.testing.assert_array_equal(got, want)  # exact: the same top-1 keys
        hits += int((want > 0).sum())
    assert hits > 0, "no head copied anything: the comparison would hold for a rule that never fires"


def test_rows_cache_equals_the_traced_pass(tiny):
    """Every step's logits and kept rows, the prompt's prefix kept across samples, equal one traced
    pass of the whole sequence (float32 rounding)."""
    model = load(str(tiny("llama")), backend="numpy")
    cache = model.new_rows_cache()
    for seed in range(2):  # the second prompt shares none or part of the first's prefix
        ids, _ = prompt(model, seed)
        ids = ids[:20] if seed else ids
        for extra in ([], [7], [7, 9]):
            seq = ids + extra
            logits, pattern = cache.extend(seq)
            tr = model.trace(seq, Keep.of(["logits", "blocks.*.attn.pattern"], rows=[len(seq) - 1]))
            f32_close(logits, tr["logits"][-1], *f32_size(model))
            f32_close(pattern[:, :, 0], tr.stack("attn.pattern", model.layers)[:, :, 0], *f32_size(model))


def test_the_head_masks_mask(tiny):
    """A cache made with the top heads' masks runs the masked model: its logits equal a trace with
    the same interventions and differ from the clean ones (a mask dropped fails here)."""
    model = load(str(tiny("llama")), backend="numpy")
    ids, _ = prompt(model)
    masks = rh.head_masks([(0, 1), (1, 3)])
    masked, _ = model.new_rows_cache(masks).extend(ids)
    clean, _ = model.new_rows_cache().extend(ids)
    want = model.trace(ids, "logits", interventions=masks)["logits"][-1]
    f32_close(masked, want, *f32_size(model))
    assert np.abs(masked - clean).max() > 1e-3  # fixed: the masks move the logits far past rounding


def test_stability_by_hand():
    """Three needles on a 1 x 3 model: the top 2 are {2, 0} from the second needle on, their
    running means 0.1 and 0.06 away from the last after needles 1 and 2."""
    per_needle = np.array([[[0.0, 0.4, 0.8]], [[0.6, 0.0, 0.8]], [[0.6, 0.2, 0.5]]])
    s = rh.stability(per_needle, 2, 0.1)
    # running means: [0, .4, .8], [.3, .2, .8], [.4, .2, .7]; final top 2: heads 2 (0.7) and 0 (0.4)
    assert [c["same_top"] for c in s["curve"]] == [False, True, True]
    assert s["k"] == 2 and s["stable_at"] == 2
    assert rh.stability(per_needle, 2, 0.05)["stable_at"] == 3
    assert rh.stability(np.zeros((2, 1, 3)), 2, 0.1)["k"] == 0
    assert s["by_k"] == [{"k": 1, "stable_at": 1}]  # head 2 leads from the first needle, within 0.1 of 0.7
    # within the tolerance from the first needle on, but another head leads after it: stable at 2
    assert rh.stability(np.array([[[0.50, 0.52]], [[0.54, 0.50]]]), 1, 0.05)["stable_at"] == 2


def test_copy_paste_counts_a_needle_position_once():
    ids = [5, 6, 7, 6, 8]
    rows = [np.zeros((1, 2, 5)) for _ in range(3)]
    for r in rows:
        r[0, 0, 1] = 1.0  # head 0 always on position 1 (token 6)
        r[0, 1, 4] = 1.0  # head 1 on position 4, outside the span
    emitted = [6, 6, 9]
    got = rh.copy_paste(rows, emitted, ids, (1, 4))
    np.testing.assert_array_equal(got, [[1 / 3, 0.0]])


def test_samples_share_the_haystack_before_the_needle(tiny):
    model = load(str(tiny("llama")), backend="numpy")
    hay = rh.haystack(model, ["the cat sat.", "a dog ran far.", "it was late."] * 12)
    needles = rh.make_needles(3)
    a, b = (rh.build_sample(model, hay, [1], needles, n, 200, 0.5) for n in (0, 1))
    assert len(a.ids) == len(b.ids) == 200
    pre = a.span[0] - len(model.pieces(needles[0].head))
    assert a.ids[:pre] == b.ids[:pre] and pre - 1 in hay.breaks
    assert model.decode(a.ids[a.span[0]:a.span[1]]).split() == list(needles[0].value)
