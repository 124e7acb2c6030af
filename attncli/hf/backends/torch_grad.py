"""Gradients of a metric at the sites of a pre-norm decoder run by transformers' own modules:
torch's autograd under forward hooks (the torch backend's counterpart of hf/methods/backward.py).

One forward pass with the layer stack's input made a leaf that requires a gradient (the weights
need none), hooks holding the site tensors (torch_families names the modules), then one backward
from ``d metric / d logits[position] . logits[position]``; each held tensor's ``.grad`` is the
site's gradient:

    embed, blocks.l.resid_pre    the layer's input (a forward pre-hook on the layer)
    blocks.l.attn.z              the output projection's input, (T, h, d_head)
    blocks.l.attn.out            the output projection's output (= d resid_mid in a pre-norm decoder)
    blocks.l.mlp.out             the MLP's output (= d resid_post)

A family torch_families does not map (OPT, GPT-NeoX, ... : every decoder transformers runs) has its
layers found as the base model's list of ``layers`` modules, and only the stream's sites (embed,
blocks.l.resid_pre) are held: its attention and MLP modules have no names here.
:func:`site_gradients` also gives each held site's value (the attribution's clean and corrupted
activations come from the same hooked pass).

Shapes: T tokens, d width, h heads, d_head a head's width, V the vocabulary.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from attncli.errors import BadInput
from attncli.hf.backends.torch_families import family, maps, submodule
from attncli.model.trace import site
from attncli.io.textio import visible


def gradients(model: Any, ids: Sequence[int], position: int,
              d_metric: Callable[[np.ndarray], np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(d metric / d site by name (float64), the logits at ``position`` (float64)) of token ids ``ids``
    on ``model`` (a TorchPretrained decoder)."""
    _, grads, row = site_gradients(model, ids, position, d_metric)
    return grads, row


def layer_list(model: Any) -> Any:
    """The ModuleList of ``model``'s layers: its family's (torch_families), else the base model's one
    list of ``model.layers`` modules (OPT's decoder.layers, GPT-NeoX's layers, ...)."""
    import torch

    base = model.model.base_model
    if maps(model.model_type, model.is_decoder):
        return submodule(base, family(model.model_type, model.is_decoder).layers, model.name)
    found = [m for _, m in base.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) == model.layers]
    if len(found) != 1:
        raise BadInput(f"model '{visible(str(model.name))}' ({visible(str(model.model_type))}): the torch backend "
                       f"finds no single list of its {model.layers} layers, where the gradients are held")
    return found[0]


def site_gradients(model: Any, ids: Sequence[int], position: int,
                   d_metric: Callable[[np.ndarray], np.ndarray] | None = None
                   ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """(each held site's value, d metric / d each held site (empty when ``d_metric`` is None: no
    backward), the logits at ``position``), all float64, of token ids ``ids`` on ``model`` (a
    TorchPretrained decoder); the sites the module docstring names."""
    import torch

    if not model.is_decoder:
        raise BadInput(f"gradients on the torch backend are written for pre-norm decoders; model "
                       f"'{visible(str(model.name))}' ({visible(str(model.model_type))}) is an encoder")
    mapped = maps(model.model_type, model.is_decoder)
    fam = family(model.model_type, model.is_decoder) if mapped else None
    layers = layer_list(model)
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
        if fam is None:  # a family without named modules: the stream's sites only
            continue
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
            if d_metric is not None:
                g = torch.from_numpy(np.ascontiguousarray(d_metric(row))).to(dtype=logits.dtype, device=logits.device)
                (logits * g).sum().backward()
    finally:
        for h in handles:
            h.remove()

    def as_array(t: Any, name: str) -> np.ndarray:
        a = t[0].detach().to(torch.float64).cpu().numpy()  # (T, ...)
        return a.reshape(a.shape[0], model.heads, -1) if name.endswith("attn.z") else a  # z: (T, h, d_head)

    values = {name: as_array(t, name) for name, t in held.items()}
    grads = {name: as_array(t.grad, name) for name, t in held.items() if d_metric is not None}
    for d in (values, grads):
        if d:
            d["embed"] = d.get("embed", d.get(site(0, "resid_pre")))
    return values, grads, row
