"""transformers itself, under forward hooks on its own modules, as the reference for attn's traced
NumPy pass: every site of trace.py read off the modules that compute it, and interventions made
by hooks that zero or replace a slice of a module's input or output. Importing this module imports
neither torch nor transformers.

    FAMILIES[kind]                      which module computes each site, per architecture
    build_mlm(kind, dir)                tiny BertForMaskedLM / RobertaForMaskedLM / DistilBertForMaskedLM / MPNetForMaskedLM
    drawn_mlm(kind, dir)                the same with every parameter drawn
    reference_sites(model, kind, ids)   {site: array (per-text shape)} float64
    hooked_logits(model, kind, ids, z=..., site=...)   logits (T, V) with hooks replacing slices
    d_log_p(target)                     d log softmax(logits)[target] / d logits, a tape's d_logits
    autograd_sites(ref, ids, position, target, hook_sites)   {site: d log p / d site} by torch autograd
    assert_gradients_close(ours, want, atol)   every site of autograd's within atol x its size
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# per family: the layer list (from the loaded model), and per site (module path in a layer, "in" / "out")
FAMILIES = {
    "bert": dict(layers=lambda m: _base(m).encoder.layer, q="attention.self.query", k="attention.self.key",
                 v="attention.self.value", o="attention.output.dense", mid=("attention.output.LayerNorm", "out"),
                 mlp="output.dense"),
    "distilbert": dict(layers=lambda m: _base(m).transformer.layer, q="attention.q_lin", k="attention.k_lin",
                       v="attention.v_lin", o="attention.out_lin", mid=("sa_layer_norm", "out"), mlp="ffn"),
    "mpnet": dict(layers=lambda m: _base(m).encoder.layer, q="attention.attn.q", k="attention.attn.k",
                  v="attention.attn.v", o="attention.attn.o", mid=("attention.LayerNorm", "out"), mlp="output.dense"),
    "gpt2": dict(layers=lambda m: m.transformer.h, qkv="attn.c_attn", o="attn.c_proj", mid=("ln_2", "in"), mlp="mlp",
                 norm=lambda m: m.transformer.ln_f),
    "llama": dict(layers=lambda m: m.model.layers, q="self_attn.q_proj", k="self_attn.k_proj", v="self_attn.v_proj",
                  o="self_attn.o_proj", mid=("post_attention_layernorm", "in"), mlp="mlp", norm=lambda m: m.model.norm),
}
FAMILIES["qwen2"] = FAMILIES["llama"]
FAMILIES["roberta"] = FAMILIES["bert"]


def _base(model):
    for name in ("bert", "roberta", "distilbert", "mpnet"):
        if hasattr(model, name):
            return getattr(model, name)
    return model


def build_mlm(kind: str, directory: Path) -> Path:
    """A tiny random encoder WITH its masked-LM head (the fixtures' base models have none)."""
    import torch
    import transformers

    from _llama_fixtures import build_mpnet
    from _transformer_fixtures import BUILDERS, _seed

    directory = Path(directory)
    (build_mpnet if kind == "mpnet" else BUILDERS[kind])(directory)  # the tokenizer and config
    config = transformers.AutoConfig.from_pretrained(directory)
    _seed()
    cls = {"bert": "BertForMaskedLM", "roberta": "RobertaForMaskedLM", "distilbert": "DistilBertForMaskedLM",
           "mpnet": "MPNetForMaskedLM"}[kind]
    model = getattr(transformers, cls)(config).eval()
    with torch.no_grad():  # biases start at 0: move them, so they bite
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.add_(torch.randn_like(param) * 0.2)
        if kind == "mpnet":
            model.mpnet.encoder.relative_attention_bias.weight.normal_(0.0, 1.0)
    for old in directory.glob("model*.safetensors*"):
        old.unlink()
    model.save_pretrained(directory)
    return directory


def drawn_mlm(kind: str, directory: Path, std: float = 0.5, seed: int = 1) -> Path:
    """build_mlm's model with every parameter (LayerNorm weights too) drawn from N(0, std^2): a
    LayerNorm weight read as its bias, or a dropped bias, shows in the numbers."""
    import torch
    import transformers

    path = build_mlm(kind, directory)
    model = transformers.AutoModelForMaskedLM.from_pretrained(str(path))
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, std)
    model.eval().save_pretrained(path)
    return path


def load_reference(path, kind: str):
    import torch
    import transformers

    auto = transformers.AutoModelForCausalLM if kind in ("gpt2", "llama", "qwen2") else transformers.AutoModelForMaskedLM
    try:
        model = auto.from_pretrained(path, attn_implementation="eager", dtype=torch.float32)
    except ValueError:  # a base encoder without a head
        model = transformers.AutoModel.from_pretrained(path, attn_implementation="eager", dtype=torch.float32)
    return model.double().eval()  # float64: the reference's own rounding stays far below 1e-5


def _get(layer, path: str):
    for part in path.split("."):
        layer = getattr(layer, part)
    return layer


def _first(x):
    return x[0] if isinstance(x, tuple) else x


def _heads(x, h: int):
    """(1, T, h d_head) -> (h, T, d_head) float64."""
    T = x.shape[1]
    return x[0].detach().double().numpy().reshape(T, h, -1).transpose(1, 0, 2)


def reference_sites(model, kind: str, ids: list[int]) -> dict[str, np.ndarray]:
    """Every site of one pass of ``ids``, read off transformers' modules by forward hooks (q and k
    rotated by transformers' own apply_rotary_pos_emb), float64, per-text shapes."""
    import torch

    fam, config = FAMILIES[kind], model.config
    h = config.num_attention_heads if hasattr(config, "num_attention_heads") else config.n_head
    raw: dict[str, object] = {}
    handles = []

    def keep(name, where):
        def hook(module, args, kwargs, out=None):
            x = (args[0] if args else next(iter(kwargs.values()))) if where == "in" else _first(out)
            raw[name] = x.detach().double().numpy()[0]
        return hook

    layers = fam["layers"](model)
    for l, layer in enumerate(layers):
        handles.append(layer.register_forward_pre_hook(keep(f"blocks.{l}.resid_pre", "in"), with_kwargs=True))
        handles.append(layer.register_forward_hook(keep(f"blocks.{l}.resid_post", "out"), with_kwargs=True))
        for site, path in (("q", fam.get("q")), ("k", fam.get("k")), ("v", fam.get("v")), ("qkv", fam.get("qkv")),
                           ("attn.out", fam["o"]), ("mlp.out", fam["mlp"])):
            if path:
                name = f"blocks.{l}.{site}" if "." in site else f"{l}.{site}"
                handles.append(_get(layer, path).register_forward_hook(keep(name, "out"), with_kwargs=True))
        handles.append(_get(layer, fam["o"]).register_forward_pre_hook(keep(f"blocks.{l}.attn.z", "in"), with_kwargs=True))
        mid, where = fam["mid"]
        register = "register_forward_pre_hook" if where == "in" else "register_forward_hook"
        handles.append(getattr(_get(layer, mid), register)(keep(f"blocks.{l}.resid_mid", where), with_kwargs=True))
    if "norm" in fam:
        handles.append(fam["norm"](model).register_forward_hook(keep("final_norm", "out"), with_kwargs=True))
    try:
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    finally:
        for handle in handles:
            handle.remove()
    sites = {name: x for name, x in raw.items() if name.startswith("blocks.") or name == "final_norm"}
    sites["embed"] = out.hidden_states[0][0].double().numpy()
    if "norm" not in fam:
        sites["final_norm"] = sites[f"blocks.{len(layers) - 1}.resid_post"]
    if hasattr(out, "logits"):
        sites["logits"] = out.logits[0].double().numpy()
    T = len(ids)
    for l in range(len(layers)):
        sites[f"blocks.{l}.attn.pattern"] = out.attentions[l][0].double().numpy()
        sites[f"blocks.{l}.attn.z"] = sites[f"blocks.{l}.attn.z"].reshape(T, h, -1)
        if "qkv" in fam:
            q, k, v = raw[f"{l}.qkv"].reshape(T, 3, h, -1).transpose(1, 2, 0, 3)  # (3, h, T, d_head)
        else:
            q, k, v = (raw[f"{l}.{s}"] for s in "qkv")  # (T, n d_head)
            if kind in ("llama", "qwen2"):
                q, k, v = _rope(model, q, k, v, T)
            else:
                q, k, v = (x.reshape(T, h, -1).transpose(1, 0, 2) for x in (q, k, v))
        sites.update({f"blocks.{l}.attn.q": q, f"blocks.{l}.attn.k": k, f"blocks.{l}.attn.v": v})
    return sites


def _rope(model, q, k, v, T):
    """q, k rotated by transformers' own rotary embedding; k, v repeated per query head."""
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

    c = model.config
    h, kv = c.num_attention_heads, c.num_key_value_heads
    dh = getattr(c, "head_dim", None) or c.hidden_size // h
    t = lambda x, n: torch.tensor(x.reshape(T, n, dh).transpose(1, 0, 2)[None])  # noqa: E731  (1, n, T, d_head)
    qt, kt, vt = t(q, h), t(k, kv), t(v, kv)
    pos = torch.arange(T)[None]
    cos, sin = model.model.rotary_emb(qt.float(), pos)
    qt, kt = apply_rotary_pos_emb(qt, kt, cos.double(), sin.double())
    return qt[0].numpy(), repeat_kv(kt, h // kv)[0].numpy(), repeat_kv(vt, h // kv)[0].numpy()


def hooked_logits(model, kind: str, ids: list[int], *, z: dict | None = None, out: dict | None = None,
                  resid: dict | None = None) -> np.ndarray:
    """Logits (T, V) float64 of one pass with hooks replacing slices: ``z[(l, head)]`` = a value
    (or 0.0) for the head's slice of o_proj's input (all positions, or ``(l, head, pos)``);
    ``out[(l, "attn"|"mlp")]`` = (T, d) for that module's output; ``resid[l]`` = (T, d) for the
    layer's input."""
    import torch

    fam = FAMILIES[kind]
    c = model.config
    h = getattr(c, "num_attention_heads", None) or c.n_head
    layers = fam["layers"](model)
    handles = []

    def z_hook(l):
        def hook(module, args):
            x = args[0].clone()  # (1, T, h d_head)
            T, dh = x.shape[1], x.shape[2] // h
            for key, value in (z or {}).items():
                if key[0] != l:
                    continue
                pos = key[2] if len(key) > 2 else slice(None)
                part = torch.as_tensor(np.asarray(value), dtype=x.dtype)
                x[0, pos, key[1] * dh:(key[1] + 1) * dh] = part
            return (x,) + tuple(args[1:])
        return hook

    def out_hook(value):
        def hook(module, args, output):
            new = torch.as_tensor(value, dtype=torch.float64)[None]
            return (new,) + tuple(output[1:]) if isinstance(output, tuple) else new
        return hook

    def resid_hook(value):
        def hook(module, args, kwargs):
            new = torch.as_tensor(value, dtype=torch.float64)[None]
            if args:
                return (new,) + tuple(args[1:]), kwargs
            key = next(iter(kwargs))
            return args, {**kwargs, key: new}
        return hook

    for l, layer in enumerate(layers):
        if any(key[0] == l for key in (z or {})):
            handles.append(_get(layer, fam["o"]).register_forward_pre_hook(z_hook(l)))
        for (ol, part), value in (out or {}).items():
            if ol == l:
                handles.append(_get(layer, fam["o"] if part == "attn" else fam["mlp"]).register_forward_hook(out_hook(value)))
        if resid and l in resid:
            handles.append(layer.register_forward_pre_hook(resid_hook(resid[l]), with_kwargs=True))
    try:
        with torch.no_grad():
            result = model(torch.tensor([ids]))
    finally:
        for handle in handles:
            handle.remove()
    return result.logits[0].double().numpy()


def bias_gpt2(directory: Path) -> Path:
    """tests/_transformer_fixtures.build_gpt2's model with every bias and LayerNorm weight moved off
    its initial 0 / 1, so that b_O, the MLP's biases and ln_f's bias bite (a DLA that forgot one
    would still add up on the fixture as built)."""
    import torch
    import transformers

    from _transformer_fixtures import _seed, build_gpt2

    build_gpt2(directory)
    model = transformers.GPT2LMHeadModel.from_pretrained(directory)
    _seed()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                param.add_(torch.randn_like(param) * 0.2)
    model.save_pretrained(directory)
    return directory


# --- gradients: torch autograd through transformers' own modules, the reference of attn's tapes ---


def d_log_p(target: int):
    """The gradient of log softmax(logits)[target] with respect to the logits (V,): the d_logits a
    tape's backward takes for the metric log p(target)."""
    def grad(logits):
        p = np.exp(logits - logits.max())
        return np.eye(len(logits))[target] - p / p.sum()
    return grad


def autograd_sites(ref, ids: list[int], position: int, target: int, hook_sites) -> tuple[dict, np.ndarray]:
    """d log p(target) at ``position`` / d site by torch autograd through ``ref`` (a transformers model
    in float64), for each tensor the hooks that ``hook_sites(keep)`` registers (and returns) hand to
    ``keep(name, tensor)`` (a tuple: its first), and for each layer's pattern; per-text shapes, a
    head's z (T, h, d_head) and q, k, v (h, T, d_head) as the trace names them. Also the logits at
    ``position`` (V,)."""
    import torch

    kept = {}

    def keep(name, t):
        t = t[0] if isinstance(t, tuple) else t
        t.retain_grad()
        kept[name] = t

    handles = hook_sites(keep)
    try:
        out = ref(input_ids=torch.tensor([ids]), output_attentions=True)
        for l, a in enumerate(out.attentions):
            keep(f"blocks.{l}.attn.pattern", a)
        torch.log_softmax(out.logits[0, position], dim=-1)[target].backward()
    finally:
        for handle in handles:
            handle.remove()
    got = {name: t.grad[0].numpy() for name, t in kept.items()}
    T, heads = len(ids), ref.config.num_attention_heads
    for name in list(got):
        if name.endswith("attn.z"):
            got[name] = got[name].reshape(T, heads, -1)  # (T, h, d_head)
        elif name[-6:-1] == "attn.":  # q, k, v
            got[name] = got[name].reshape(T, heads, -1).transpose(1, 0, 2)  # (h, T, d_head)
    return got, out.logits[0, position].detach().numpy()


def assert_gradients_close(ours: dict, want: dict, atol: float) -> None:
    """Every site of ``want`` (autograd's) in ``ours`` within ``atol`` times the site's largest
    gradient (at least 1), the site named on failure."""
    for name, g in want.items():
        scale = max(1.0, np.abs(g).max())
        np.testing.assert_allclose(ours[name], g, rtol=0, atol=atol * scale, err_msg=name)
