"""The attention masks (attncli.attention.masks): no mask when nothing is masked, the reasons a cell
is masked in words, and the label a mask gives itself; hand-worked."""

from __future__ import annotations

import pytest

from attncli.attention import masks


def test_a_mask_with_nothing_masked_is_none():
    spec = masks.MaskSpec(causal=False, window=None)
    assert masks.build(spec, 3, 4, 4) is None  # every key real: no padding part
    assert masks.build(spec, 3, 4, 3)[:, 3].tolist() == [False] * 3


@pytest.mark.parametrize("i, j, n_real, expected", [
    (0, 1, 4, ["causal: key 1 comes after query 0"]),
    (1, 1, 4, []),  # a query sees itself
    (3, 0, 4, ["window: |0 - 3| = 3 > 2"]),
    (0, 2, 4, ["causal: key 2 comes after query 0"]),  # |2 - 0| = 2 is inside the window
    (0, 3, 3, ["causal: key 3 comes after query 0", "window: |3 - 0| = 3 > 2", "padding: key 3 is a pad token"]),
    (3, 2, 3, []),  # the last real key is not padding
    (4, 1, 5, ["window: |1 - 4| = 3 > 2"]),
])
def test_the_reasons_a_cell_is_masked_in_words(i, j, n_real, expected):
    spec = masks.MaskSpec(causal=True, window=2)
    assert masks.reasons(spec, i, j, n_real) == expected


def test_a_mask_describes_itself():
    assert masks.MaskSpec().describe() == "no mask"
    assert masks.MaskSpec(causal=True).describe() == "causal"
    assert masks.MaskSpec(causal=True, window=2, pad_to=8).describe() == "causal + window 2 + padding to 8"
    assert masks.MaskSpec(window=0).describe() == "window 0"
