"""The circuit's graph (hf/methods/edges.py) on the torch backend: transformers' own modules under
torch hooks, for the families torch_families maps as pre-norm decoders (GPT-2, Llama, Mistral, Qwen2,
Gemma, Phi-3) and Gemma 3 (EDGE_FAMILIES: its modules named here, the trace does not map it).

Writers: the layer stack's input (the embeddings), each head's z_h W_O^h (the output projection run
on z with every other head's columns zeroed, less its bias, which every run shares), each MLP's
output (Gemma 3: each head's times its post-attention norm's gain over the rms of this pass's
summed attention output, (1 + w) / sqrt(mean(o^2) + eps), so the heads add up to what the
attention writes; the MLP's after its post-feedforward norm: hf/methods/edges.py's docstring). Readers: each head's query, key and value input apart, each MLP's input, the final norm's.
The hooks give every reader its own input,

    input_v = stream_v + delta_v                                              (a plain pass)
    input_v = corrupt_stream_v + sum_u w[u, v] (u_run - u_corrupt)            (an edge-patched pass)

a head's through the layer's input norm and its own columns of the q, k or v projection (a key or
value head is read per query head: the projection's output is widened to one head per query head,
the attention module told it has no groups for the pass), the MLP's as the input of the norm in
front of it, the logits' as the final norm's. ``delta`` (D, T, d), zeros, gives each reader's
input gradient by autograd (torch.autograd.grad: no gradient on the weights). EAP's scores are
hf/methods/edges.py's (u_clean - u_corrupt) . d metric / d input_v; EAP-IG's average the
gradients over the passes from the embeddings e_corrupt + (k / N)(e_clean - e_corrupt), put in as the
stack's input. Everything runs in the model's dtype (--dtype; float32 by default).

Shapes: T tokens, d width, h heads, d_head a head's width, U writers, D readers, V the vocabulary.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from attncli.errors import BadInput
from attncli.hf.backends.torch_families import Family, family, maps, submodule
from attncli.io.textio import visible


@dataclass
class Run:
    """One hooked pass of ``ids``: each layer's input and MLP-norm input (L, T, d), the final norm's
    input (T, d), every writer's output (U, T, d), as tensors in the model's dtype, and the metric's
    logits at ``position`` (V,) in float64."""

    ids: list[int]
    position: int
    x: Any
    mid: Any
    final: Any
    out: Any
    row: np.ndarray

    def logits(self, position: int) -> np.ndarray:
        if position != self.position:
            raise ValueError(f"the run kept the logits at position {self.position}, not {position}")
        return self.row

    @property
    def nbytes(self) -> int:
        """The bytes the run holds (what an edge-patched pass reads of it)."""
        return sum(t.element_size() * t.nelement() for t in (self.x, self.mid, self.final, self.out))

    def outputs(self) -> np.ndarray:
        """(U, T, d) every writer's output, float64."""
        return self.out.detach().double().cpu().numpy()


# decoders the trace does not map whose modules the edges name: Gemma 3's MLP writer is its
# post-feedforward norm's output, its MLP reader the pre-feedforward norm's input
EDGE_FAMILIES = {"gemma3_text": Family("layers", "self_attn", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                                       "self_attn.o_proj", "pre_feedforward_layernorm", "post_feedforward_layernorm",
                                       "norm", n1="input_layernorm")}
OUT_NORMS = {"gemma3_text": "post_attention_layernorm"}  # a Gemma RMSNorm ((1 + w) / rms) on the attention's output


def _family(model: Any) -> Family:
    if model.is_decoder and model.model_type in EDGE_FAMILIES:
        return EDGE_FAMILIES[model.model_type]
    if not model.is_decoder or not maps(model.model_type, model.is_decoder):
        raise BadInput(f"attn circuit on the torch backend gives each head's query, key and value its own input "
                       f"through the modules it names (GPT-2, Llama, Mistral, Qwen2, Gemma, Phi-3, Gemma 3); model "
                       f"'{visible(str(model.name))}' ({visible(str(model.model_type))}) is not one of them: use "
                       "--backend numpy where it runs the model")
    return family(model.model_type, model.is_decoder)


@contextmanager
def _no_groups(attns: list[Any], h: int) -> Iterator[None]:
    """The attention modules told each query head has its own key and value head for the pass (the
    hooked projections give them so), restored after."""
    saved = [(a, getattr(a, "num_key_value_groups", None), getattr(a, "num_key_value_heads", None)) for a in attns]
    for a, groups, heads in saved:
        if groups is not None:
            a.num_key_value_groups = 1
        if heads is not None:
            a.num_key_value_heads = h
    try:
        yield
    finally:
        for a, groups, heads in saved:
            if groups is not None:
                a.num_key_value_groups = groups
            if heads is not None:
                a.num_key_value_heads = heads


def run(model: Any, ids: Sequence[int], position: int, *, delta: Any = None, embed: Any = None,
        corrupt: Run | None = None, w: Any = None, d_metric: Callable[[np.ndarray], np.ndarray] | None = None
        ) -> tuple[Run, Any]:
    """One hooked pass of ``ids`` (the module docstring): (its Run, d metric / d delta (D, T, d) as
    float64 NumPy when ``d_metric`` and ``delta`` are given, else None). ``embed`` (T, d): the stack's
    input in place of the embeddings; ``corrupt`` and ``w`` (U, D): an edge-patched pass."""
    import torch

    fam, base = _family(model), model.model.base_model
    h, L = model.heads, model.layers
    layers = submodule(base, fam.layers, model.name)
    cfg = model.model.config
    dh = getattr(cfg, "head_dim", None) or cfg.hidden_size // h
    kv = getattr(cfg, "num_key_value_heads", None) or h
    group = h // kv
    step = 3 * h + 1
    rec: dict[str, list] = {"x": [], "mid": [], "out": []}
    final: list[Any] = []
    hooks = []

    def reader(v: int, own: Any) -> Any:
        """reader v's input (T, d): its own stream ``own`` in a plain pass, else the patched sum."""
        if corrupt is None:
            x = own
        else:
            if v == L * step:
                base_v = corrupt.final
            else:
                base_v = (corrupt.x if v % step < 3 * h else corrupt.mid)[v // step]
            n = len(rec["out"])  # the writers so far
            x = base_v + torch.tensordot(w[:n, v], torch.stack(rec["out"]) - corrupt.out[:n], dims=1)  # (T, d)
        return x if delta is None else x + delta[v]

    def stack_input(m: Any, args: tuple, kwargs: dict) -> Any:
        x = args[0] if args else kwargs["hidden_states"]  # (1, T, d)
        if embed is not None:
            x = embed[None].to(x.dtype)
            args, kwargs = ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})
        rec["out"].append(x[0])
        return args, kwargs

    hooks.append(layers[0].register_forward_pre_hook(stack_input, with_kwargs=True))
    for l, layer in enumerate(layers):
        hooks.append(layer.register_forward_pre_hook(
            lambda m, a, kw: rec["x"].append((a[0] if a else kw["hidden_states"])[0]), with_kwargs=True))
        n1 = submodule(layer, fam.n1, model.name)
        projs = [submodule(layer, p, model.name) for p in fam.qkv]
        roles = [[("q", 0), ("k", h * dh), ("v", (h + kv) * dh)]] if len(projs) == 1 else [[(c, 0)] for c in "qkv"]
        for proj, parts in zip(projs, roles):
            def per_head(module, args, out, l=l, parts=parts, n1=n1):
                cols = []
                for c, offset in parts:
                    first = l * step + "qkv".index(c) * h
                    inp = torch.stack([reader(first + i, rec["x"][l]) for i in range(h)])  # (h, T, d)
                    y = module.forward(n1(inp))  # (h, T, out): the module itself, its hook not run again
                    for i in range(h):
                        j = offset + (i if c == "q" else i // group) * dh  # a query head's key-value head
                        cols.append(y[i, :, j:j + dh])
                return torch.cat(cols, dim=-1)[None]  # (1, T, 3 h d_head) or (1, T, h d_head)
            hooks.append(proj.register_forward_hook(per_head))

        out_norm = submodule(layer, OUT_NORMS[model.model_type], model.name) if model.model_type in OUT_NORMS else None

        def heads(module, args, out_norm=out_norm):
            z = args[0][0]  # (T, h d_head)
            keep = torch.zeros(h, 1, h * dh, dtype=z.dtype, device=z.device)
            for i in range(h):
                keep[i, :, i * dh:(i + 1) * dh] = 1
            raw = module.forward(z[None] * keep) - module.forward(torch.zeros_like(z))  # (h, T, d)
            if out_norm is not None:  # this pass's attention output o (T, d), normed: each head's share of it
                o = module.forward(z)
                raw = raw * ((1.0 + out_norm.weight) * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + out_norm.eps))
            rec["out"].extend(raw)
        hooks.append(submodule(layer, fam.out, model.name).register_forward_pre_hook(heads))

        def mlp_in(module, args, l=l):
            rec["mid"].append(args[0][0])
            return (reader(l * step + 3 * h, args[0][0])[None], *args[1:])
        hooks.append(submodule(layer, fam.mid, model.name).register_forward_pre_hook(mlp_in))
        hooks.append(submodule(layer, fam.mlp, model.name).register_forward_hook(
            lambda m, a, out: rec["out"].append(out[0])))

    def final_in(module, args):
        final.append(args[0][0])
        return (reader(L * step, args[0][0])[None], *args[1:])
    hooks.append(submodule(base, fam.final_norm, model.name).register_forward_pre_hook(final_in))
    attns = [submodule(layer, fam.attn, model.name) for layer in layers]
    try:
        with _no_groups(attns, h), torch.enable_grad() if d_metric is not None else torch.no_grad():
            logits = model.model(input_ids=torch.tensor([list(ids)], device=model.device)).logits[0, position]  # (V,)
            row = logits.detach().double().cpu().numpy()
            grad = None
            if d_metric is not None and delta is not None:
                g = torch.from_numpy(np.ascontiguousarray(d_metric(row))).to(dtype=logits.dtype, device=logits.device)
                grad = torch.autograd.grad((logits * g).sum(), delta)[0].double().cpu().numpy()  # (D, T, d)
    finally:
        for hk in hooks:
            hk.remove()
    out = Run(list(ids), position, torch.stack(rec["x"]).detach(), torch.stack(rec["mid"]).detach(),
              final[0].detach(), torch.stack(rec["out"]).detach(), row)
    return out, grad


def edge_scores(model: Any, clean_ids: Sequence[int], corrupt_ids: Sequence[int], target: Any, steps: int,
                mask: np.ndarray) -> tuple[np.ndarray, Run, Run]:
    """(U, D) every edge's EAP (``steps`` 1) or EAP-IG score (float64), 0 off ``mask``; the clean and
    corrupted Runs (the module docstring)."""
    import torch

    corrupt, _ = run(model, corrupt_ids, target.position)
    clean = None
    D = mask.shape[1]
    grad = np.zeros((D,) + tuple(corrupt.final.shape))
    e_corrupt = corrupt.out[0]
    for k in range(steps, 0, -1):  # the clean end first: its pass gives the clean writers
        delta = torch.zeros((D,) + tuple(corrupt.final.shape), dtype=e_corrupt.dtype, device=e_corrupt.device,
                            requires_grad=True)
        embed = None if k == steps else e_corrupt + k / steps * (clean.out[0] - e_corrupt)
        made, g = run(model, clean_ids, target.position, delta=delta, embed=embed, d_metric=target.gradient)
        clean = made if k == steps else clean
        grad += g / steps
    shift = clean.outputs() - corrupt.outputs()  # (U, T, d)
    scores = shift.reshape(len(shift), -1) @ grad.reshape(D, -1).T  # (U, D)
    return np.where(mask, scores, 0.0), clean, corrupt


def patched_logits(model: Any, clean_ids: Sequence[int], corrupt: Run, weights: np.ndarray) -> np.ndarray:
    """(V,) the logits at the corrupted run's position of the edge-patched pass of ``clean_ids`` with
    edge weights ``weights`` (U, D), float64 (hf/methods/edges.py's edge_patched_logits on
    transformers' modules)."""
    import torch

    w = torch.from_numpy(np.ascontiguousarray(weights)).to(dtype=corrupt.out.dtype, device=corrupt.out.device)
    return run(model, clean_ids, corrupt.position, corrupt=corrupt, w=w)[0].row
