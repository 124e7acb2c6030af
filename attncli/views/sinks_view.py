"""The view of ``attn sinks``: each layer's largest residual channels (value, ratio to the median,
token), the massive channels and the layer they appear at, their carrier tokens, the heads with
the largest sink share, the secondary sinks and the causal test (attncli.causal.massive_activations)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from attncli.io.textio import visible
from attncli.views.head_drawing import head_map_svg, report_page
from attncli.views.result import DocumentView, OwnDrawings, shown

TOP_HEADS = 8  # the heads listed by sink share


def _tok(entry: dict[str, Any]) -> str:
    return shown(repr(entry["token"]))


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.1f}"


def draw(doc: dict[str, Any], width: Optional[int]) -> list:
    from rich.table import Table
    from rich.text import Text

    out: list = []
    crit = f"|x| >= {doc['ratio']:g} x median |x| and |x| >= {doc['min_value']:g}"
    layers = Table(title=shown(f"residual stream (resid_post) of {doc['model']}: the largest channels, "
                               f"{doc['texts']} texts"))
    for name in ("layer", "median |x|", "channel", "value", "x median", "pos", "token", "massive"):
        layers.add_column(name, justify="left" if name in ("token", "massive") else "right", no_wrap=True)
    for row in doc["layers"]:
        e = row["top"][0]
        massive = ",".join(str(c) for c in row["massive_channels"][:3]) or "-"
        layers.add_row(*(shown(cell) for cell in (str(row["layer"]), f"{row['median']:.3g}", str(e["channel"]),
                                                  _num(e["value"]), f"{e['ratio']:,.0f}", str(e["position"]), _tok(e),
                                                  massive)))
    out.append(layers)
    if doc["appear"] is None:
        out.append(Text(shown(f"no massive activation ({crit}): sink shares are on the first token")))
    else:
        carriers = ", ".join(f"{_tok(t)} x{t['count']}" for t in doc["carriers"]["tokens"])
        out.append(Text(shown(f"massive ({crit}): channels {', '.join(map(str, doc['channels']))} appear at layer "
                        f"{doc['appear']}; carried by {carriers} (the first token in "
                        f"{doc['carriers']['texts_with_first_token']} of {doc['texts']} texts)")))
    heads = Table(title=shown(f"sink share: mean attention of a query on the {doc['sink_keys']} tokens"))
    for name in ("layer", "head", "sink share", "first token"):
        heads.add_column(name, justify="right", no_wrap=True)
    flat = sorted(((l, h, s, doc["first_token_share"][l][h]) for l, row in enumerate(doc["sink_share"])
                   for h, s in enumerate(row)), key=lambda r: -r[2])
    for l, h, s, f in flat[:TOP_HEADS]:
        heads.add_row(*(shown(cell) for cell in (str(l), str(h), f"{s:.3f}", f"{f:.3f}")))
    mean = sum(r[2] for r in flat) / max(len(flat), 1)
    first = sum(r[3] for r in flat) / max(len(flat), 1)
    heads.add_row("", "all heads", shown(f"{mean:.3f}"), shown(f"{first:.3f}"), style="dim")
    out.append(heads)
    if doc["secondary"]:
        out.append(Text(shown("secondary sinks (mean attention received from later queries, every head): " +
                              ", ".join(f"{_tok(e)} {e['received']:.3f} (x{e['count']})" for e in doc["secondary"]))))
    c = doc.get("causal")
    if c is not None:
        out.append(Text(shown(f"causal test on {c['texts']} texts ({c['tokens']} predicted tokens): channels "
                        f"{', '.join(map(str, c['channels']))} of layer {c['layer']} set to their mean: loss "
                        f"{c['loss']:.4f} -> {c['loss_mean']:.4f} nats ({c['loss_mean'] - c['loss']:+.4f}); sink share "
                        f"of the later layers {c['sink_share']:.3f} -> {c['sink_share_mean']:.3f}")))
    return out


def sink_map_svg(doc: dict[str, Any]) -> str:
    """Each head's sink share as a head map (attncli.views.head_drawing)."""
    return head_map_svg(np.asarray(doc["sink_share"], dtype=np.float64).reshape(len(doc["sink_share"]), -1),
                        title=visible(f"{doc['model']}: sink share, the mean attention of a query on the {doc['sink_keys']} tokens"),
                        score="sink share", decimals=2)


class SinksView(OwnDrawings, DocumentView):
    """``attn sinks``' report, drawn from its document: in a terminal and a PNG its tables; as SVG
    each head's sink share as a head map; as HTML that map over the report."""
    draw = staticmethod(draw)

    def svg(self, width: Optional[int] = None, *, command: bool = True) -> str:
        return sink_map_svg(self.doc)

    def html(self, width: Optional[int] = None, *, command: bool = True) -> str:
        return report_page(self.title, [sink_map_svg(self.doc)], self.renderables, width)
