"""Gradients of a metric at the sites of a pre-norm decoder run by transformers' own modules:
torch's autograd under forward hooks (the torch backend's counterpart of hf/backward.py).

One forward pass with the layer stack's input made a leaf that requires a gradient (the weights
need none), hooks holding the site tensors (torch_families names the modules), then one backward
from ``d metric / d logits[position] . logits[position]``; each held tensor's ``.grad`` is the
site's gradient:

    embed, blocks.l.resid_pre    the layer's input (a forward pre-hook on the layer)
    blocks.l.attn.z              the output projection's input, (T, h, d_head)
    blocks.l.attn.out            the output projection's output (= d resid_mid in a pre-norm decoder)
    blocks.l.mlp.out             the MLP's output (= d resid_post)

Shapes: T tokens, d width, h heads, d_head a head's width, V the vocabulary.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from attncli.errors import BadInput
from attncli.hf.torch_families import family, submodule
from attncli.model.trace import site


def gradients(model: Any, ids: Sequence[int], position: int,
              d_metric: Callable[[np.ndarray], np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(d metric / d site by name (float64), the logits at ``position`` (float64)) of token ids ``ids``
    on ``model`` (a TorchPretrained decoder whose family torch_families maps)."""
    import torch

    if not model.is_decoder:
        raise BadInput(f"gradients on the torch backend are written for pre-norm decoders; model '{model.name}' "
                       f"({model.model_type}) is an encoder")
    fam = family(model.model_type, model.is_decoder)
    base = model.model.base_model
    layers = submodule(base, fam.layers, model.name)
    held: dict[str, Any] = {}
    handles = []

    def hold(name: str, t: Any) -> None:
        if t.requires_grad:
            t.retain_grad()
            held[name] = t

    def first_input(m: Any, args: tuple, kwargs: dict) -> Any:  # the stack's input: a leaf that needs a gradient
        if args:
            x = args[0].detach().requires_grad_(True)
            hold("embed", x)
            return (x, *args[1:]), kwargs
        x = kwargs["hidden_states"].detach().requires_grad_(True)
        hold("embed", x)
        return args, {**kwargs, "hidden_states": x}

    for l, layer in enumerate(layers):
        if l == 0:
            handles.append(layer.register_forward_pre_hook(first_input, with_kwargs=True))
        handles.append(layer.register_forward_pre_hook(
            lambda m, args, kw, l=l: hold(site(l, "resid_pre"), args[0] if args else kw["hidden_states"]),
            with_kwargs=True))
        out = submodule(layer, fam.out, model.name)
        handles.append(out.register_forward_pre_hook(lambda m, args, l=l: hold(site(l, "attn.z"), args[0])))
        handles.append(out.register_forward_hook(lambda m, args, o, l=l: hold(site(l, "attn.out"), o)))
        handles.append(submodule(layer, fam.mlp, model.name).register_forward_hook(
            lambda m, args, o, l=l: hold(site(l, "mlp.out"), o)))
    ids_t = torch.tensor([list(ids)], device=model.device)
    try:
        with torch.enable_grad():
            logits = model.model(input_ids=ids_t).logits[0, position]  # (V,)
            row = logits.detach().to(torch.float64).cpu().numpy()
            g = torch.from_numpy(np.ascontiguousarray(d_metric(row))).to(dtype=logits.dtype, device=logits.device)
            (logits * g).sum().backward()
    finally:
        for h in handles:
            h.remove()
    grads = {}
    for name, t in held.items():
        grad = t.grad[0].detach().to(torch.float64).cpu().numpy()  # (T, ...)
        if name.endswith("attn.z"):
            grad = grad.reshape(grad.shape[0], model.heads, -1)  # (T, h, d_head) as the trace names it
        grads[name] = grad
    grads["embed"] = grads.get("embed", grads.get(site(0, "resid_pre")))
    return grads, row
