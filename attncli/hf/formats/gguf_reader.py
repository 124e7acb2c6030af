"""A GGUF file read for the NumPy forward passes as weights.py reads safetensors: tensors by
transformers' names, with the config transformers builds from its metadata (its tokenizer: gguf_tokenizer).

Names: llama.cpp's ``blk.N.attn_q.weight`` is transformers' ``layers.N.self_attn.q_proj.weight``
(GPT-2: ``h.N.attn.c_attn.weight``...). What llama.cpp's converter changed is put back as
transformers' loader does (modeling_gguf_pytorch_utils): Llama and Mistral's q and k rows were
permuted for its RoPE (rows (h, 2, d_head/2) -> (h, d_head/2, 2)); GPT-2's Conv1D weights were
transposed; Gemma 3's norm weights were stored as 1 + w (its ffn_norm is the pre-MLP norm, and
the local layers' RoPE base and their pattern are Gemma3TextConfig's defaults, as transformers reads them).

Every tensor is dequantized when a layer asks for it (gguf_dequantize, by blocks of rows) and kept
as weight_hold says: a model whose float32 tensors fit the budget (1 GiB, or ATTN_WEIGHTS_BUDGET:
SmolLM2-135M's 540 MB) is dequantized once, so a grid, a generation or a corpus does not do it
again on every pass; a larger one keeps only the layer at hand, so a pass holds one layer in float32
beside the mapped file. The embedding gives only the rows of the text's tokens, and the LM head is
dequantized by blocks of rows unless it is held. A NaN is looked for at load in the scales of
each quantized block (gguf_dequantize.nonfinite), not by dequantizing the file.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from attncli.errors import BadInput, RuntimeFailure
from attncli.hf.checks.config_check import damaged
from attncli.hf.formats.gguf_check import check_metadata
from attncli.hf.formats.gguf_file import CONVERT_HINT, GGUFFile, TensorInfo
from attncli.hf.formats.gguf_dequantize import dequantize, nonfinite
from attncli.hf.formats.weight_hold import Hold

# GGUF's general.architecture -> transformers' model_type, for the families attn's NumPy path runs
ARCHITECTURES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "phi3": "phi3", "gpt2": "gpt2",
                 "gemma3": "gemma3_text"}
LLAMA_PARTS = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
               "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
               "ffn_down": "mlp.down_proj"}
GEMMA3_PARTS = {**LLAMA_PARTS, "ffn_norm": "pre_feedforward_layernorm", "post_attention_norm": "post_attention_layernorm",
                "post_ffw_norm": "post_feedforward_layernorm", "attn_q_norm": "self_attn.q_norm",
                "attn_k_norm": "self_attn.k_norm"}  # llama.cpp's ffn_norm is Gemma 3's pre-MLP norm
PHI3_PARTS = {**LLAMA_PARTS, "attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}  # fused: q|k|v, gate|up
GPT2_PARTS = {"attn_norm": "ln_1", "ffn_norm": "ln_2", "attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj",
              "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}
LLAMA_TOP = {"token_embd": "embed_tokens", "output_norm": "norm"}
GPT2_TOP = {"token_embd": "wte", "position_embd": "wpe", "output_norm": "ln_f"}
TRANSPOSED = ("attn_qkv.weight", "attn_output.weight", "ffn_up.weight", "ffn_down.weight")  # GPT-2's Conv1D
# GGUF metadata key (after "<architecture>.") -> config.json field, as transformers' GGUF_CONFIG_MAPPING
LLAMA_CONFIG = {"context_length": "max_position_embeddings", "block_count": "num_hidden_layers",
                "feed_forward_length": "intermediate_size", "embedding_length": "hidden_size",
                "rope.freq_base": "rope_theta", "attention.head_count": "num_attention_heads",
                "attention.head_count_kv": "num_key_value_heads",
                "attention.layer_norm_rms_epsilon": "rms_norm_eps", "vocab_size": "vocab_size"}
GEMMA3_CONFIG = {**LLAMA_CONFIG, "attention.key_length": "head_dim", "attention.sliding_window": "sliding_window"}
GPT2_CONFIG = {"block_count": "n_layer", "context_length": "n_ctx", "embedding_length": "n_embd",
               "feed_forward_length": "feed_forward_length", "attention.head_count": "n_head",
               "attention.layer_norm_epsilon": "layer_norm_epsilon"}
ROW_BLOCK_BYTES = 8 * 2**20  # float32 bytes dequantized at once (rows of a big table)
BLOCK = re.compile(r"^blk\.(\d+)\.(\w+)\.(weight|bias)$")
LAYER = re.compile(r"^(model\.)?(layers|h)\.(\d+)\.")  # a tensor's layer, by transformers' name


def _escaped(name: str) -> str:
    """A stranger's tensor name as it may reach a terminal: control characters escaped, cut at 80."""
    return name.encode("unicode_escape").decode("ascii")[:80]


def architecture(gguf: GGUFFile) -> str:
    arch = gguf.metadata.get("general.architecture")
    if arch not in ARCHITECTURES:
        shown = str(arch)[:40].encode("unicode_escape").decode()
        raise BadInput(f"{gguf.path.name} holds a '{shown}' model, which attn's NumPy path does not run from GGUF "
                       f"(it runs {', '.join(ARCHITECTURES)}); {CONVERT_HINT}")
    return arch


def config_of(gguf: GGUFFile) -> dict[str, Any]:
    """config.json's fields from the file's metadata, as transformers' load_gguf_checkpoint builds them
    (each field checked first: gguf_check)."""
    arch = architecture(gguf)
    check_metadata(gguf, arch)
    config: dict[str, Any] = {"model_type": ARCHITECTURES[arch]}
    for key, field in {"gpt2": GPT2_CONFIG, "gemma3": GEMMA3_CONFIG}.get(arch, LLAMA_CONFIG).items():
        if f"{arch}.{key}" in gguf.metadata:
            config[field] = gguf.metadata[f"{arch}.{key}"]
    if arch != "gpt2" and f"{arch}.rope.dimension_count" in gguf.metadata and arch in ("llama", "mistral"):
        config["head_dim"] = gguf.metadata[f"{arch}.rope.dimension_count"]
    if arch == "gpt2":
        config["n_positions"] = config.get("n_ctx")
        inner = config.pop("feed_forward_length", None)
        if inner is not None and inner != 4 * config.get("n_embd", 0):
            config["n_inner"] = inner
    if "vocab_size" not in config:  # transformers: the tokenizer's length
        tokens = gguf.metadata.get("tokenizer.ggml.tokens")
        if isinstance(tokens, list):
            config["vocab_size"] = len(tokens)
    config["tie_word_embeddings"] = "output.weight" not in gguf.tensors
    for key, name in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id")):
        if f"tokenizer.ggml.{key}" in gguf.metadata:
            config[name] = gguf.metadata[f"tokenizer.ggml.{key}"]
    return config


class GGUFWeights:
    """The tensors of one GGUF file by transformers' names (the prefix "model." left out for the
    Llama family), dequantized when first asked for and kept as weight_hold.Hold says."""

    def __init__(self, gguf: GGUFFile, config: dict[str, Any], dtype: type = np.float32):
        self.gguf, self.path, self.dtype = gguf, gguf.path, np.dtype(dtype)
        self.arch = architecture(gguf)
        self.gpt2 = self.arch == "gpt2"
        self.prefix = "" if self.gpt2 else "model."
        self.config = config
        self._names: dict[str, TensorInfo] = {}  # transformers' full name -> the file's tensor
        for info in gguf.tensors.values():
            self._names[self._hf_name(info.name)] = info
        self._hold = Hold(self.dequantized_bytes())  # the dequantized tensors kept

    def _hf_name(self, name: str) -> str:
        if name == "output.weight":
            return "lm_head.weight"
        if name == "rope_freqs.weight":  # Llama 3.1's RoPE factors, which transformers' GGUF loader leaves out
            return self.prefix + "rotary_emb.inv_freq"  # too: a frequencies buffer (llama.UNUSED_OK)
        block = BLOCK.match(name)
        if block:
            parts = {"gpt2": GPT2_PARTS, "phi3": PHI3_PARTS, "gemma3": GEMMA3_PARTS}.get(self.arch, LLAMA_PARTS)
            if block.group(2) not in parts:
                return "?" + _escaped(name)  # not one attn reads: reported as unused
            layer = ("h." if self.gpt2 else "layers.") + block.group(1)
            return f"{self.prefix}{layer}.{parts[block.group(2)]}.{block.group(3)}"
        top, _, kind = name.rpartition(".")
        tops = GPT2_TOP if self.gpt2 else LLAMA_TOP
        return f"{self.prefix}{tops[top]}.{kind}" if top in tops else "?" + _escaped(name)

    def __contains__(self, name: str) -> bool:
        return self.prefix + name in self._names

    def base_shapes(self) -> dict[str, tuple[int, ...]]:
        n = len(self.prefix)
        return {name[n:]: self._shape(info, name) for name, info in self._names.items()
                if name.startswith(self.prefix) and name != "lm_head.weight" and not name.startswith("?")} | \
            {name: info.shape for name, info in self._names.items() if name.startswith("?")}

    def _shape(self, info: TensorInfo, name: str) -> tuple[int, ...]:
        return info.shape[::-1] if self.gpt2 and info.name.endswith(TRANSPOSED) else info.shape

    def dequantized_bytes(self) -> int:
        """Bytes of every tensor attn reads, dequantized to the compute dtype (from the header)."""
        return sum(math.prod(info.shape) * self.dtype.itemsize for name, info in self._names.items()
                   if not name.startswith("?"))

    def hold_widened(self, budget: int | None = None) -> None:
        """Keep dequantized tensors across passes up to ``budget`` bytes (weights.Weights' twin)."""
        self._hold.extend(budget)

    def check_finite(self, names: Sequence[str]) -> None:
        """Every tensor ``names`` and the LM head holds no NaN or infinity once dequantized: damage
        naming the file and the tensor as the file names it. A float tensor's exponent bits are
        read, a quantized one's block scales only (gguf_dequantize.nonfinite); nothing is dequantized."""
        fulls = [self.prefix + name for name in names] + ["lm_head.weight"]
        for full in dict.fromkeys(fulls):
            if full not in self._names:
                continue
            info = self._names[full]
            kind = nonfinite(self.gguf.raw(info), info.kind)
            self.gguf.release(info)
            if kind is not None:
                where = "" if info.type_name in ("F32", "F16", "BF16") else f"the {info.type_name} block scales of "
                raise damaged(self.path.name, f"{kind} in {where}tensor '{_escaped(info.name)}'")

    def get(self, name: str, dtype: type | None = None) -> np.ndarray:
        return self.get_exact(self.prefix + name, dtype)

    def has_exact(self, full: str) -> bool:
        return full in self._names

    def get_exact(self, full: str, dtype: type | None = None) -> np.ndarray:
        """Tensor ``full`` dequantized, kept across passes within the budget, else while its layer
        runs (a table outside the layers, the embedding or the head, then not at all)."""
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        block = LAYER.match(full)
        layer = block.group(0) if block else None
        held = self._hold.find((full, dtype), layer)
        if held is not None:
            return held
        return self._hold.keep((full, dtype), layer, self._read(full, dtype))

    def rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows ``ids`` of a 2-D table (the embedding), only those dequantized: (*ids.shape, d)."""
        info = self._info(self.prefix + name)
        flat = np.asarray(ids).ravel()
        if flat.size and (flat.min() < 0 or flat.max() >= info.shape[0]):
            raise IndexError(f"row {flat.max()} of {name}, which has {info.shape[0]}")
        held = self._hold.find((self.prefix + name, self.dtype), None)
        if held is not None:  # the table held (a tied head): no row dequantized again
            return held[flat].reshape(*np.shape(ids), -1)
        unique, inverse = np.unique(flat, return_inverse=True)
        picked = np.stack([self._dequantize(info, slice(int(i), int(i) + 1))[0] for i in unique]) if unique.size \
            else np.zeros((0, info.shape[-1]), np.float32)  # (n, d)
        return picked[inverse].astype(self.dtype, copy=False).reshape(*np.shape(ids), -1)

    def head_rows(self, tied: bool) -> int:
        """V: the rows of the LM head (the embedding when ``tied``)."""
        return self._info(self.prefix + "embed_tokens.weight" if tied else "lm_head.weight").shape[0]

    def head_blocks(self, name: str):
        """(start, rows (n, d) float32) of the LM head by blocks of rows: ``name`` is a base tensor's
        name, or "/" and a full one. Dequantized whole and held when it fits the budget's room (a
        generation reads it at every token), else by blocks of rows, never whole."""
        full = name[1:] if name.startswith("/") else self.prefix + name
        info = self._info(full)
        step = max(1, ROW_BLOCK_BYTES // (4 * info.shape[-1]))
        held = self._hold.find((full, self.dtype), None)
        if held is None and self._hold.fits(math.prod(info.shape) * self.dtype.itemsize):
            held = self.get_exact(full)
        for start in range(0, info.shape[0], step):
            yield start, (held[start: start + step] if held is not None else
                          self._dequantize(info, slice(start, start + step)).astype(self.dtype, copy=False))
        self.gguf.release(info)

    def _info(self, full: str) -> TensorInfo:
        if full not in self._names:
            raise RuntimeFailure(f"{self.path} has no tensor '{full}' (its GGUF name) that attn needs")
        return self._names[full]

    def _dequantize(self, info: TensorInfo, rows: slice | None = None) -> np.ndarray:
        """Tensor ``info`` (or its ``rows``) in float32, dequantized by blocks of rows."""
        raw = self.gguf.raw(info, rows)  # (..., row_bytes) uint8, a view of the map
        out = dequantize(raw.reshape(-1, raw.shape[-1]), info.kind, info.shape[-1])  # (rows, n)
        return out.reshape(*raw.shape[:-1], info.shape[-1])

    def _read(self, full: str, dtype: np.dtype) -> np.ndarray:
        info = self._info(full)
        tensor = self._dequantize(info)
        self.gguf.release(info)
        if self.gpt2 and info.name.endswith(TRANSPOSED):
            tensor = np.ascontiguousarray(tensor.T)  # llama.cpp stored Conv1D's (in, out) as (out, in)
        elif self.arch in ("llama", "mistral") and info.name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = self.config["num_attention_heads" if ".attn_q." in info.name else "num_key_value_heads"]
            tensor = unpermute(tensor, heads)
        elif self.arch == "gemma3" and info.name.endswith("norm.weight"):
            tensor = tensor - np.float32(1.0)  # llama.cpp stored Gemma's 1 + w (transformers subtracts it too)
        return tensor.astype(dtype, copy=False)


def unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's permutation of q / k rows: (h, 2, d_head/2, ...) -> (h, d_head/2, 2, ...) back
    to transformers' rotate_half order. weight (h * d_head, ...)."""
    half = weight.shape[0] // heads // 2
    if half * 2 * heads != weight.shape[0]:
        raise RuntimeFailure(f"a q / k weight of {weight.shape[0]} rows is not {heads} heads of an even size")
    return weight.reshape(heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def gguf_file_in(name: str | Path) -> Path | None:
    """The .gguf file ``name`` names, or the one .gguf file in folder ``name`` (None: not a GGUF model)."""
    try:
        path = Path(name).expanduser()
    except RuntimeError:  # ~nosuchuser/...: source.resolve says so
        return None
    if path.suffix.lower() == ".gguf" and not path.exists():
        raise BadInput(f"no such model file: '{path}'")
    if path.is_file() or path.suffix.lower() == ".gguf":
        return path if path.suffix.lower() == ".gguf" else None
    if path.is_dir():
        if (path / "config.json").exists():  # a transformers folder (which may also hold a .gguf): not this path
            return None
        found = sorted(p for p in path.iterdir() if p.suffix.lower() == ".gguf")
        if len(found) > 1:
            raise BadInput(f"'{path}' holds {len(found)} .gguf files: pass the one to run")
        return found[0] if found else None
    return None
