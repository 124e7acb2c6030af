"""A brute-force edge-patched forward through transformers' own Llama-family modules (Gemma 3's
included), written with torch hooks: the reference attn's circuit (attncli/hf/methods/edges.py,
attncli/causal/circuit.py) is held to.

Every reader's input is made separately from a recorded corrupted run,

    input_v = corrupt_stream_v + sum_u w[u, v] (u_run - u_corrupt) + delta_v          (T, d)

and put into the pass by hooks: each head's q, k and v projection's output replaced by that head's
columns of the projection of its own normed input, the MLP's norm and the final norm given their
own inputs. A writer's output: the embeddings (the embedding module's output), a head's
z_h W_O^h times, where the layer norms the attention's output (Gemma 3's post_attention_layernorm),
that norm's gain over the rms of this run's summed attention output, an MLP's output (after
Gemma 3's post_feedforward_layernorm). ``delta_v`` (zeros needing grad) give each reader's input
gradient by autograd; ``w`` a leaf gives d metric / d w[u, v] = EAP's score at w = 1. The readers'
order is edges.py's (a head's per query head: a model with grouped keys and values cannot be run
per head here, so the fixtures give every head its own). Shapes: T tokens, d width, h heads,
U writers, D readers."""

from __future__ import annotations


def _parts(ref):
    """(layers, embedding module, final norm, per layer the norm in front of the MLP, its output norm or None)."""
    inner = ref.model
    mlp_norm = [getattr(b, "pre_feedforward_layernorm", None) or b.post_attention_layernorm for b in inner.layers]
    out_norm = [getattr(b, "post_feedforward_layernorm", None) for b in inner.layers]
    return inner.layers, inner.embed_tokens, inner.norm, mlp_norm, out_norm


def _rms_gain(norm, o):
    """(T, d) what ``norm`` (Gemma 3's RMSNorm: (1 + w) / rms) multiplies ``o`` (1, T, d) by."""
    import torch

    return (1.0 + norm.weight) * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + norm.eps)


def run(ref, ids, corrupt=None, w=None, delta=None, embed=None):
    """One pass of ``ids`` (1 T list) through ``ref`` (float64, eager); returns (logits (T, V),
    record) with record's "embed" (T, d), "x" / "mid" per layer (T, d), "final" (T, d),
    "out" (U, T, d) every writer's output and (Gemma 3) "attn_out" per layer (T, d), the
    post-attention norm's output. ``corrupt``: a record: the readers' inputs made from it
    with ``w`` (U, D) and ``delta`` (D, T, d) (the module's docstring); ``embed`` (T, d) the
    embeddings used in place of ``ids``'."""
    import torch

    layers, emb, final_norm, mlp_norm, mlp_out_norm = _parts(ref)
    attn0 = layers[0].self_attn
    h, dh = ref.config.num_attention_heads, attn0.head_dim
    L = len(layers)
    rec = {"x": [], "mid": [], "out": []}
    hooks = []

    def reader(v):
        """reader v's input: the corrupted stream plus w's share of every writer's shift so far."""
        base = corrupt["x"][v // (3 * h + 1)] if v < L * (3 * h + 1) and v % (3 * h + 1) < 3 * h else None
        if v == L * (3 * h + 1):
            base = corrupt["final"]
        elif base is None:
            base = corrupt["mid"][v // (3 * h + 1)]
        diff = torch.stack(rec["out"]) - corrupt["out"][:len(rec["out"])]  # (n, T, d)
        return base + torch.einsum("n,ntd->td", w[:len(rec["out"]), v], diff) + delta[v]

    def hook_embed(module, args, out):
        e = out if embed is None else embed[None].to(out.dtype)
        rec["embed"] = e[0]
        rec["out"].append(e[0])
        return e

    hooks.append(emb.register_forward_hook(hook_embed))
    for l, block in enumerate(layers):
        attn = block.self_attn
        hooks.append(block.register_forward_pre_hook(lambda m, a, l=l: rec["x"].append(a[0][0])))
        if corrupt is not None:
            for c, proj in (("q", attn.q_proj), ("k", attn.k_proj), ("v", attn.v_proj)):
                def per_head(module, args, out, l=l, c=c, block=block):
                    cols = []
                    for i in range(h):
                        v = l * (3 * h + 1) + "qkv".index(c) * h + i
                        y = torch.nn.functional.linear(block.input_layernorm(reader(v)[None]), module.weight,
                                                       module.bias)  # (1, T, h d_head), the hook not run again
                        cols.append(y[..., i * dh:(i + 1) * dh])
                    return torch.cat(cols, dim=-1)
                hooks.append(proj.register_forward_hook(per_head))

        def heads(module, args, l=l, block=block):
            z = args[0][0]  # (T, h d_head)
            raw = torch.stack([z[:, i * dh:(i + 1) * dh] @ module.weight[:, i * dh:(i + 1) * dh].T
                               for i in range(h)])  # (h, T, d)
            if hasattr(block, "pre_feedforward_layernorm"):  # Gemma 3: the attention's output normed
                raw = raw * _rms_gain(block.post_attention_layernorm, raw.sum(0))
            rec["out"].extend(raw)
        hooks.append(attn.o_proj.register_forward_pre_hook(heads))
        if hasattr(block, "pre_feedforward_layernorm"):  # what the attention adds to the stream, as transformers makes it
            hooks.append(block.post_attention_layernorm.register_forward_hook(
                lambda m, a, out: rec.setdefault("attn_out", []).append(out[0])))

        def mlp_in(module, args, l=l):
            rec["mid"].append(args[0][0])
            if corrupt is not None:
                return (reader(l * (3 * h + 1) + 3 * h)[None],)
        hooks.append(mlp_norm[l].register_forward_pre_hook(mlp_in))
        last = mlp_out_norm[l] if mlp_out_norm[l] is not None else block.mlp
        hooks.append(last.register_forward_hook(lambda m, a, out: rec["out"].append(out[0])))

    def final_in(module, args):
        rec["final"] = args[0][0]
        if corrupt is not None:
            return (reader(L * (3 * h + 1))[None],)
    hooks.append(final_norm.register_forward_pre_hook(final_in))
    try:
        logits = ref(torch.tensor([list(ids)])).logits[0]  # (T, V)
    finally:
        for hk in hooks:
            hk.remove()
    rec["out"] = torch.stack(rec["out"])
    return logits, rec


def load_reference(path):
    """transformers' model of ``path`` in float64, eager attention, its RoPE's angles in float64 too
    and its RMSNorms (transformers makes both in float32 even in a float64 model: ~1e-7 relative,
    which would hide what a float64 comparison shows): the default RoPE only, written from the
    paper, inv_freq_i = theta^(-2i / d_head); RMSNorm x / sqrt(mean(x^2) + eps) * w (Gemma: 1 + w))."""
    import torch
    import transformers

    ref = transformers.AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="sdpa",
                                                            dtype=torch.float64).eval()
    cfg = ref.config

    def rope(x, position_ids, layer_type=None):
        params = cfg.rope_parameters[layer_type] if layer_type else cfg.rope_parameters
        assert params["rope_type"] == "default" and params.get("partial_rotary_factor", 1.0) == 1.0, params
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        inv_freq = 1.0 / (params["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        angles = position_ids[..., None].double() * inv_freq  # (1, T, d_head / 2)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    ref.model.rotary_emb.forward = rope
    for module in ref.modules():  # transformers' RMSNorms compute in float32 too: the formula, in float64
        if type(module).__name__.endswith("RMSNorm"):
            gemma = "Gemma" in type(module).__name__  # weight applied as 1 + w
            eps = module.eps if gemma else module.variance_epsilon
            module.forward = lambda x, m=module, eps=eps, gemma=gemma: (
                x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * ((1.0 + m.weight) if gemma else m.weight))
    return ref
