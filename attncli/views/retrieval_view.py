"""The view of ``attn retrieval``: the heads with the largest retrieval score (Wu et al. 2024),
the model's recall of the needle by length and depth, how many needles the top heads took to
settle, and the causal test of masking them (attncli.causal.retrieval_heads)."""

from __future__ import annotations

from typing import Any, Optional

from attncli.views.result import DocumentView, shown


def _score(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.3f}"


def draw(doc: dict[str, Any], width: Optional[int]) -> list:
    from rich.table import Table
    from rich.text import Text

    out: list = []
    lengths = ", ".join(f"{n:,}" for n in doc["lengths"])
    top = Table(title=shown(f"retrieval heads of {doc['model']}: {doc['needles']} needles x {len(doc['depths'])} "
                            f"depths x {len(doc['lengths'])} lengths ({lengths} tokens)"))
    for name in ("layer", "head", "retrieval", "recalled only"):
        top.add_column(name, justify="right", no_wrap=True)
    for e in doc["top"]:
        top.add_row(*(shown(cell) for cell in (str(e["layer"]), str(e["head"]), _score(e["retrieval"]),
                                              _score(e["retrieval_recalled"]))))
    out.append(top)
    zero = sum(e["retrieval"] == 0 for e in doc["heads"])
    out.append(Text(shown(f"retrieval score: the share of the needle's tokens a head copied and pasted (its top-1 "
                          f"key the needle token the model wrote), the mean over {doc['samples']} samples; "
                          f"'recalled only': over the {doc['recalled_samples']} whose answer held more than half "
                          f"the needle's words. {zero} of {len(doc['heads'])} heads scored 0.")))
    recall = Table(title=shown("needle recall (share of the needle's words in the answer)"))
    recall.add_column("length", justify="right", no_wrap=True)
    for depth in doc["depths"]:
        recall.add_column(f"depth {depth:.2f}", justify="right", no_wrap=True)
    for length in doc["lengths"]:
        cells = [e for e in doc["recall"] if e["length"] == length]
        recall.add_row(shown(f"{length:,}"), *(shown(f"{e['recall']:.2f}") for e in cells))
    out.append(recall)
    s = doc["stability"]
    if s["k"]:
        fewer = "".join(f"; the top {e['k']} from {e['stable_at']}" for e in s.get("by_k", []) if e["k"])
        out.append(Text(shown(f"stable from {s['stable_at']} of {s['needles']} needles on: the top {s['k']} heads "
                              f"the same set, each score within {s['tolerance']:g} of the last{fewer}")))
    c = doc.get("causal")
    if c is not None:
        heads = ", ".join(f"L{h['layer']}H{h['head']}" for h in c["random"]["heads"])
        out.append(Text(shown(f"masked (output zeroed): recall {c['recall_clean']:.2f} -> {c['top']['recall']:.2f} "
                              f"with the top {c['k']} retrieval heads, -> {c['random']['recall']:.2f} with {c['k']} "
                              f"random others ({heads}; seed {c['seed']})")))
    return out


class RetrievalView(DocumentView):
    """``attn retrieval``'s report, drawn from its document."""
    draw = staticmethod(draw)
