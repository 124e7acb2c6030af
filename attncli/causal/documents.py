"""The JSON documents of ``attn ablate``, ``attn patch`` and ``attn dla`` (what --json prints, what
attncli/views/causal.py draws, and what ``attn explore``'s G and D keys show), built from the core's
results. Keys are described in docs/causal.md."""

from __future__ import annotations

from typing import Any

from attncli.causal.grids import Grid
from attncli.causal.target import Target
from attncli.io.textio import texts_of


def target_document(t: Target) -> dict[str, Any]:
    return {"position": t.position, "token": t.label, "id": t.token, "text": t.text or t.label,
            "contrast": None if t.contrast is None else {"token": t.contrast_label, "id": t.contrast,
                                                         "text": t.contrast_text or t.contrast_label},
            "metric": "log_prob" if t.contrast is None else "logit_diff"}


def rounded(grid) -> list[list[float]]:
    return [[round(float(x), 8) for x in row] for row in grid]


def ablate_document(model: Any, enc: Any, t: Target, grid: Grid, *, mode: str = "zero",
                    position: int | None = None) -> dict[str, Any]:
    what = "log p" if t.contrast is None else "logit difference"
    return {"command": "ablate", "model": model.name, "tokens": enc.tokens, "token_texts": texts_of(enc),
            "target": target_document(t), "mode": mode,
            "position": position, "clean": round(grid.clean, 8), "columns": "heads",
            "rows": f"grid[layer][head]: the change in {what} when that head's output is "
                    f"{'zeroed' if mode == 'zero' else 'set to its mean'} (negative: the head helped)",
            "grid": rounded(grid.values),
            "title": f"{model.name} · ablate ({mode}) · change in {t.describe()}",
            "notes": [f"clean {what}: {grid.clean:z.4f}; each cell: ablated - clean"]}


def patch_document(model: Any, enc: Any, bad: Any, t: Target, grid: Grid, *, site: str) -> dict[str, Any]:
    cols = "heads" if site == "head" else "positions"
    return {"command": "patch", "model": model.name, "tokens": enc.tokens, "token_texts": texts_of(enc),
            "corrupt_tokens": bad.tokens, "target": target_document(t), "site": site, "clean": round(grid.clean, 8),
            "corrupt": round(grid.corrupt, 8), "columns": cols,
            "rows": f"grid[layer][{cols[:-1]}]: (patched - corrupt) / (clean - corrupt), clean's {site} copied in",
            "grid": rounded(grid.values),
            "title": f"{model.name} · patch {site} · restored fraction of {t.describe()}",
            "notes": [f"clean {grid.clean:z.4f}, corrupt {grid.corrupt:z.4f}; 1 = all restored, 0 = none"]}


def dla_document(model: Any, enc: Any, t: Target, res: dict[str, Any]) -> dict[str, Any]:
    parts = [{"name": "embeddings", "value": res["embed"]}]
    for l in range(model.layers):
        parts += [{"name": f"L{l}H{h}", "value": float(res["heads"][l, h])} for h in range(model.heads)]
        if abs(res["attn_bias"][l]) > 1e-9:  # b_O is measured as attn.out - sum of heads: 0 up to rounding without one
            parts.append({"name": f"L{l} attention bias", "value": float(res["attn_bias"][l])})
        parts.append({"name": f"L{l} MLP", "value": float(res["mlp"][l])})
    if res["norm_bias"]:
        parts.append({"name": "final norm bias", "value": res["norm_bias"]})
    if res.get("head_bias"):  # the built-in LM's output head
        parts.append({"name": "unembedding bias", "value": res["head_bias"]})
    what = "logit" if t.contrast is None else "logit difference"
    return {"command": "dla", "model": model.name, "tokens": enc.tokens, "token_texts": texts_of(enc),
            "target": {**target_document(t), "metric": what},
            "logit": round(res["logit"], 8), "sum": round(res["sum"], 8), "norm_scale": round(res["scale"], 8),
            "parts": [{**p, "value": round(p["value"], 8)} for p in parts],
            "heads": rounded(res["heads"]),
            "per_token": [rounded(layer) for layer in res["per_token"]],
            "rows": "heads[layer][head]: the head's direct part of the " + what + "; per_token[layer][head][j]: "
                    "the part that came through source token j (they add up to the head's)",
            "title": f"{model.name} · direct logit attribution · {what} of {t.shown()}"
                     + (f" - {t.shown(True)}" if t.contrast is not None else "") + f" at position {t.position}"}


def attribute_document(model: Any, enc: Any, bad: Any, t: Target, res: Any) -> dict[str, Any]:
    """``attn attribute``'s document: ``patch``'s keys (the grid read as the restored fraction), the
    row labels (layers, or layer x head for key and query), the method and the --verify cells."""
    cols = "heads" if res.where == "head" else "positions"
    method = "AtP* (QK fix)" if res.qk_fix else "AtP"
    doc = {"command": "attribute", "model": model.name, "tokens": enc.tokens, "token_texts": texts_of(enc),
           "corrupt_tokens": bad.tokens,
           "target": target_document(t), "site": res.where, "method": "atp*" if res.qk_fix else "atp",
           "clean": round(res.clean, 8), "corrupt": round(res.corrupt, 8), "columns": cols,
           "row_labels": res.row_labels,
           "rows": f"grid[row][{cols[:-1]}]: the estimate of (patched - corrupt) / (clean - corrupt), clean's "
                   f"{res.where} copied in, from one forward and one backward pass",
           "grid": rounded(res.values),
           "title": f"{model.name} · attribute {res.where} ({method}) · restored fraction of {t.describe()}",
           "notes": [f"clean {res.clean:z.4f}, corrupt {res.corrupt:z.4f}; estimates: 1 = all restored, 0 = none"]}
    if res.verified is not None:
        doc["verify"] = [{**c, "estimate": round(c["estimate"], 8), "exact": round(c["exact"], 8)} for c in res.verified]
        if res.verified:
            worst = max(abs(c["estimate"] - c["exact"]) for c in res.verified)
            doc["notes"].append(f"--verify {len(res.verified)}: the largest cells patched exactly; "
                                f"largest |estimate - exact| = {worst:.4f}")
    return doc
