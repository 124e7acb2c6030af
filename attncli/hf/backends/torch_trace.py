"""The torch backend's traced forward pass: transformers' own modules run under forward hooks that
record the sites of ``attncli.model.trace`` and make interventions where a site is computed.

Nothing of the model is re-implemented on the clean path: the model runs with its own (SDPA)
attention. q and k are its projections' outputs rotated by the family's own
``apply_rotary_pos_emb`` with the ``position_embeddings`` the attention module is given; the
scores and pattern are recomputed from them (float64) for the kept query rows, in chunks of rows
on the layer's own device (torch_rows), with the layer's scale (the attention module's
``scaling``), the causal mask and the layer's sliding window. A layer's projections are dropped
once its rows are made. The family mappings are in torch_families. An
intervention on q, k, v, scores or pattern makes that one layer's z from the intervened pattern
and values, fed to the output projection in place of the model's own.

Where each site is read (one mapping per family, ``FAMILIES``; names inside one layer):

    embed, resid_pre        the layer's input (a forward pre-hook on the layer)
    attn.q, attn.k, attn.v  the q/k/v projections' outputs (GPT-2's c_attn, Phi-3's qkv_proj split)
    attn.z                  the output projection's input (o_proj, c_proj, attention.output.dense)
    attn.out                the output projection's output
    resid_mid               pre-LN: the input of the norm before the MLP; post-LN: the attention block's
                            output (BERT), the norm after attention (DistilBERT)
    mlp.out                 the MLP's output (BERT: output.dense, before its dropout and LayerNorm)
    resid_post              the layer's output
    final_norm, logits      the final norm's output (BERT: the last resid_post), the model's logits
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Sequence

import numpy as np

from attncli.errors import BadInput
from attncli.io.textio import visible
from attncli.hf.backends import torch_rows
from attncli.hf.backends.torch_families import FAMILIES, Family, family, maps, module, submodule  # noqa: F401 - re-exported
from attncli.model.trace import Intervention, Keep, Trace, split
from attncli.hf.checks.weight_check import check_finite
from attncli.hf.text.encoding import Encoding

MODEL_OUT = ("final_norm", "logits")  # model sites after every layer
CORE = ("attn.q", "attn.k", "attn.v", "attn.scores", "attn.pattern")  # an intervention here remakes z


def _np(t: Any) -> np.ndarray:
    return t.detach().cpu().to(dtype=_torch().float64).numpy()


def _torch() -> Any:
    import torch

    return torch


def intervene(x: Any, name: str, ivs: Sequence[Intervention]) -> Any:
    """``x`` (a torch tensor in the site's shape, no batch axis) with every intervention on ``name``
    made, in order: a new tensor, or ``x`` itself when there is none."""
    torch = _torch()
    for iv in ivs:
        if iv.site != name:
            continue
        x = x.clone()
        where = iv.index(tuple(x.shape))
        if iv.mode == "zero":
            x[where] = 0
            continue
        value = np.asarray(iv.value, dtype=np.float64)
        try:
            value = np.broadcast_to(value, tuple(x[where].shape))
        except ValueError:
            raise BadInput(f"the value for {iv.site} has shape {value.shape}, the slice it replaces "
                           f"{tuple(x[where].shape)}") from None
        x[where] = torch.from_numpy(np.array(value)).to(dtype=x.dtype, device=x.device)
    return x


class TracedRun:
    """One traced pass of ``model`` (a TorchPretrained): ``run(inputs)`` -> the kept sites."""

    def __init__(self, model: Any, keep: Keep, interventions: Sequence[Intervention],
                 start: tuple[int, np.ndarray] | None):
        self.tp = model
        self.fam = family(model.model_type, model.is_decoder)
        self.keep = keep
        self.ivs = list(interventions)
        for iv in self.ivs:
            layer, _ = split(iv.site)
            if layer is not None:
                model.check_layer(layer)
        self.start = start
        if start is not None:
            model.check_layer(start[0])
            early = [iv.site for iv in self.ivs if (split(iv.site)[0] or 0) < start[0] and iv.site not in MODEL_OUT]
            if early:
                raise BadInput(f"an intervention on {early[0]} lies before layer {start[0]}, where the pass resumes "
                               "from the cached stream: it would change nothing")
        self.base = model.model.base_model
        self.layer_modules = submodule(self.base, self.fam.layers, model.name)
        self.sites: dict[str, np.ndarray] = {}
        self.raw: dict[int, dict[str, Any]] = {}  # per layer: the projections' outputs, cos and sin
        self.rope: Callable | None = None
        if self.fam.rope:
            self.rope = importlib.import_module(f"transformers.models.{self.fam.rope}.modeling_{self.fam.rope}"
                                                ).apply_rotary_pos_emb

    # which sites a layer must read ---------------------------------------------------------
    def kept(self, name: str) -> bool:
        return name in self.keep

    def touched(self, name: str) -> bool:
        return any(iv.site == name for iv in self.ivs)

    def needed(self, name: str) -> bool:
        return self.kept(name) or self.touched(name)

    def record(self, name: str, t: Any) -> None:
        if self.kept(name):
            self.sites[name] = _np(t)

    # the pass --------------------------------------------------------------------------------
    def run(self, inputs: dict[str, Any]) -> tuple[dict[str, np.ndarray], Any]:
        first = 0 if self.start is None else self.start[0]
        handles: list[Any] = []
        skipped: list[Any] = []
        try:
            for l in range(first, self.tp.layers):
                handles += self._hook_layer(l, first)
            if self.fam.final_norm is not None and self.needed("final_norm"):
                norm = submodule(self.base, self.fam.final_norm, self.tp.name)
                handles.append(norm.register_forward_hook(lambda m, a, out: self._final(out)))
            for l in range(first):  # resumed at layer `first`: the layers before it return their input
                layer = self.layer_modules[l]
                skipped.append((layer, layer.__dict__.get("forward")))  # accelerate's wrapper, under --device-map
                layer.forward = lambda hidden_states, *a, **k: hidden_states
            out = self.tp._forward(inputs, use_cache=False, **self._logits_kwargs())
        finally:
            for h in handles:
                h.remove()
            for layer, own in skipped:
                del layer.forward
                if own is not None:
                    layer.forward = own
        return self.sites, out

    def _logits_kwargs(self) -> dict[str, Any]:
        """logits_to_keep=1 when no logits are kept: (T, V) logits of a long text are bigger than the rest."""
        if self.needed("logits") or "logits_to_keep" not in inspect.signature(self.tp.model.forward).parameters:
            return {}
        return {"logits_to_keep": 1}

    def _final(self, out: Any) -> Any:
        x = intervene(out[0], "final_norm", self.ivs)
        self.record("final_norm", x)
        return x[None] if x is not out[0] else None

    def _hook_layer(self, l: int, first: int) -> list[Any]:
        fam, p = self.fam, f"blocks.{l}."
        layer = self.layer_modules[l]

        def sub(dotted: str) -> Any:  # a module of this layer, named in full when missing
            return submodule(layer, dotted, self.tp.name, f"{fam.layers}.{l}.")

        attn = sub(fam.attn)
        hooks = []
        core = any(self.needed(p + s) for s in CORE)
        if (l == first and self.start is not None) or self.needed(p + "resid_pre") or \
                (l == 0 and self.needed("embed")) or (fam.pre_ln and self.touched(p + "resid_mid")):
            hooks.append(layer.register_forward_pre_hook(lambda m, a, k: self._layer_in(l, a, k), with_kwargs=True))
        last = l == self.tp.layers - 1 and fam.final_norm is None
        if self.needed(p + "resid_post") or (last and self.needed("final_norm")):
            hooks.append(layer.register_forward_hook(lambda m, a, out: self._layer_out(l, out, last)))
        if core:
            if self.rope is not None:
                hooks.append(attn.register_forward_pre_hook(lambda m, a, k: self._rope_in(l, k), with_kwargs=True))
            for role, name in zip(("q", "k", "v") if len(fam.qkv) == 3 else ("qkv",), fam.qkv):
                hooks.append(sub(name).register_forward_hook(
                    lambda m, a, out, role=role: self.raw.setdefault(l, {}).__setitem__(role, out)))
        out_proj = sub(fam.out)
        # every layer's attention is checked as it runs, kept or not: damage is named where it starts
        hooks.append(out_proj.register_forward_hook(lambda m, a, out: self._finite(l, out)))
        if core or self.needed(p + "attn.z"):
            hooks.append(out_proj.register_forward_pre_hook(lambda m, a: self._z(l, attn, a)))
        if self.needed(p + "attn.out") or (fam.pre_ln and self.touched(p + "resid_mid")):
            hooks.append(out_proj.register_forward_hook(lambda m, a, out: self._attn_out(l, out)))
        if self.needed(p + "resid_mid"):
            mid = sub(fam.mid)
            if fam.pre_ln:
                hooks.append(mid.register_forward_pre_hook(lambda m, a: self.record(p + "resid_mid", a[0][0])))
            else:
                hooks.append(mid.register_forward_hook(lambda m, a, out: self._post_ln_mid(l, out)))
        if self.needed(p + "mlp.out"):
            hooks.append(sub(fam.mlp).register_forward_hook(lambda m, a, out: self._site_out(p + "mlp.out", out)))
        return hooks

    def _layer_in(self, l: int, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        x = args[0] if args else kwargs["hidden_states"]  # (1, T, d)
        h = x[0]
        if self.start is not None and l == self.start[0]:
            given = np.asarray(self.start[1])
            if given.shape != tuple(h.shape):
                raise BadInput(f"the cached resid_pre of layer {l} has shape {given.shape}, the text needs "
                               f"{tuple(h.shape)}")
            h = _torch().from_numpy(np.ascontiguousarray(given, dtype=np.float64)).to(dtype=h.dtype, device=h.device)
        if l == 0:
            h = intervene(h, "embed", self.ivs)
            self.record("embed", h)
        h = intervene(h, f"blocks.{l}.resid_pre", self.ivs)
        self.record(f"blocks.{l}.resid_pre", h)
        self.raw.setdefault(l, {})["resid_pre"] = h
        if h is x[0]:
            return args, kwargs
        return ((h[None],) + tuple(args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": h[None]})

    def _layer_out(self, l: int, out: Any, last: bool) -> Any:
        x = intervene(out[0], f"blocks.{l}.resid_post", self.ivs)
        self.record(f"blocks.{l}.resid_post", x)
        if last:
            x = intervene(x, "final_norm", self.ivs)
            self.record("final_norm", x)
        return x[None] if x is not out[0] else None

    def _site_out(self, name: str, out: Any) -> Any:
        x = intervene(out[0], name, self.ivs)
        self.record(name, x)
        return x[None] if x is not out[0] else None

    def _post_ln_mid(self, l: int, out: Any) -> Any:
        """BERT's attention block returns (LayerNorm(x + attn.out), weights), DistilBERT's
        sa_layer_norm that tensor alone: resid_mid is it."""
        mid = out[0] if isinstance(out, tuple) else out  # (1, T, d)
        x = intervene(mid[0], f"blocks.{l}.resid_mid", self.ivs)
        self.record(f"blocks.{l}.resid_mid", x)
        if x is mid[0]:
            return None
        return (x[None],) + tuple(out[1:]) if isinstance(out, tuple) else x[None]

    @staticmethod
    def _finite(l: int, out: Any) -> None:
        """RuntimeFailure naming layer l's attention when its output holds NaN or infinity."""
        torch = _torch()
        if not bool(torch.isfinite(out).all()):
            check_finite(_np(out), f"layer {l}'s attention")

    def _attn_out(self, l: int, out: Any) -> Any:
        p = f"blocks.{l}."
        x = intervene(out[0], p + "attn.out", self.ivs)  # (T, d)
        self.record(p + "attn.out", x)
        if self.fam.pre_ln and self.touched(p + "resid_mid"):
            # pre-LN: resid_mid = resid_pre + attn.out, so the output that makes the intervened stream is
            # intervened(resid_pre + attn.out) - resid_pre
            pre = self.raw[l]["resid_pre"]
            x = intervene(pre + x, p + "resid_mid", self.ivs) - pre
        return x[None] if x is not out[0] else None

    def _rope_in(self, l: int, kwargs: dict) -> None:
        cos, sin = kwargs["position_embeddings"]
        self.raw.setdefault(l, {})["rope"] = (cos, sin)

    def _qkv(self, l: int, attn: Any) -> tuple[Any, Any, Any]:
        """Layer ``l``'s q (h, T, d_head), k and v (h, S, d_head), k and v repeated per query head,
        q and k after RoPE."""
        raw, h = self.raw[l], self.tp.heads
        if "qkv" in raw:
            fused = raw["qkv"][0]  # (T, width)
            if self.fam.rope is None:  # GPT-2's c_attn: q | k | v of equal width
                q, k, v = fused.split(fused.shape[-1] // 3, dim=-1)
            else:  # Phi-3: q (h d_head) | k (kv d_head) | v (kv d_head)
                d_head = attn.head_dim
                kv = (fused.shape[-1] - h * d_head) // 2
                q, k, v = fused.split([h * d_head, kv, kv], dim=-1)
        else:
            q, k, v = raw["q"][0], raw["k"][0], raw["v"][0]
        d_head = q.shape[-1] // h
        T = q.shape[0]
        q, k, v = (t.reshape(T, -1, d_head).transpose(0, 1) for t in (q, k, v))  # (heads, T, d_head)
        if self.rope is not None:
            cos, sin = raw["rope"]
            q, k = self.rope(q[None], k[None], cos, sin)
            q, k = q[0], k[0]
        group = h // k.shape[0]
        if group > 1:
            k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)  # (h, S, d_head)
        return q, k, v

    def _window(self, attn: Any) -> int | None:
        if self.fam.window == "module":
            return getattr(attn, "sliding_window", None)
        if self.fam.window == "config":
            return getattr(self.tp.model.config, "sliding_window", None)
        return None

    def scores(self, q: Any, k: Any, attn: Any) -> Any:
        """(h, T, S) q k^T * scale of every query row, -inf where masked: what an intervention remakes z from."""
        qi = _torch().arange(q.shape[1])
        return torch_rows.scores(q, k, attn.scaling, qi, causal=self.tp.is_decoder, window=self._window(attn))

    def _z(self, l: int, attn: Any, args: tuple) -> Any:
        p = f"blocks.{l}."
        x = args[0]  # (1, T, h d_head)
        T = x.shape[1]
        z = x[0].reshape(T, self.tp.heads, -1)  # (T, h, d_head)
        remake = any(self.touched(p + s) for s in CORE)
        if any(self.needed(p + s) for s in CORE):
            q, k, v = self._qkv(l, attn)
            q, k, v = (intervene(t, p + n, self.ivs) for t, n in ((q, "attn.q"), (k, "attn.k"), (v, "attn.v")))
            for t, n in ((q, "attn.q"), (k, "attn.k"), (v, "attn.v")):
                self.record(p + n, t)
            if remake:  # every row: z is made from the intervened pattern
                s = intervene(self.scores(q, k, attn), p + "attn.scores", self.ivs)
                a = intervene(s.softmax(dim=-1), p + "attn.pattern", self.ivs)  # (h, T, S)
                z = (a @ v.to(a.dtype)).transpose(0, 1).to(x.dtype)  # (T, h, d_head)
                if self.keep.rows is not None:
                    s, a = s[:, list(self.keep.rows)], a[:, list(self.keep.rows)]
                if self.keep.heads is not None:
                    s, a = s[list(self.keep.heads)], a[list(self.keep.heads)]
                self.record(p + "attn.scores", s)
                self.record(p + "attn.pattern", a)
            elif self.kept(p + "attn.scores") or self.kept(p + "attn.pattern"):  # the kept rows, chunk by chunk
                heads = slice(None) if self.keep.heads is None else list(self.keep.heads)  # k is per query head
                s_rows, a_rows = torch_rows.rows_of(q[heads], k[heads], attn.scaling, self.keep.rows,
                                                    causal=self.tp.is_decoder,
                                                    window=self._window(attn), want_scores=self.kept(p + "attn.scores"),
                                                    want_pattern=self.kept(p + "attn.pattern"))
                for name, arr in ((p + "attn.scores", s_rows), (p + "attn.pattern", a_rows)):
                    if arr is not None:
                        self.sites[name] = arr
            for role in ("q", "k", "v", "qkv", "rope"):  # this layer's projections are no longer needed
                self.raw.get(l, {}).pop(role, None)
        if self.touched(p + "attn.z"):
            z = intervene(z, p + "attn.z", self.ivs)
            remake = True
        self.record(p + "attn.z", z)
        if not remake:
            return None
        return (z.reshape(1, T, -1).contiguous(),) + tuple(args[1:])


def _described(name: str) -> str:
    """A site as a damage message names it: "layer 0's attention" for blocks.0.attn.pattern."""
    layer, site = split(name)
    if layer is None:
        return f"the {site.replace('_', ' ')}"
    return f"layer {layer}'s " + ("attention" if site == "attn.pattern" else site)


def trace(model: Any, enc: Any, keep: Any = None, *, rows: Sequence[int] | None = None,
          interventions: Sequence[Intervention] = (), start: tuple[int, np.ndarray] | None = None) -> Trace:
    """TorchPretrained.trace (see there)."""
    if isinstance(enc, Encoding):
        if not enc.ids:
            raise BadInput("trace() takes an Encoding from encode() or a list of token ids")
        ids, type_ids = np.asarray([enc.ids]), np.asarray([enc.type_ids])
    else:
        ids, type_ids = model.check_ids(enc)[None], None
    T = ids.shape[1]
    keep = Keep.of(keep, rows)
    keep.check(T, model.heads)
    for pattern in keep.patterns:
        if not any(c in pattern for c in "*?["):
            split(pattern)  # a name that is no site is BadInput
    run = TracedRun(model, keep, interventions, start)
    sites, out = run.run(model._inputs(ids, type_ids, np.ones_like(ids, dtype=bool)))
    logits = getattr(out, "logits", None)
    if logits is None and ("logits" in keep.patterns or run.touched("logits")):
        raise BadInput(f"model '{visible(model.name)}' ({visible(model.model_type)}) was loaded without an LM "
                       "head: it has no logits")
    if logits is not None and run.needed("logits"):
        x = intervene(logits[0], "logits", run.ivs)
        run.record("logits", x)
    for name, arr in sites.items():
        if not name.endswith("attn.scores"):  # scores hold -inf where masked
            check_finite(arr, _described(name))
    return Trace(ids[0].tolist(), sites, rows=keep.rows, backend="torch", heads=keep.heads)
