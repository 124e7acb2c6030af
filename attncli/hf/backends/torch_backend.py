"""The torch backend: any Hugging Face model through transformers.

A family whose modules the traced pass maps (torch_trace.FAMILIES: BERT-like encoders, DistilBERT,
GPT-2, Llama, Mistral, Qwen2, Gemma, Phi-3) runs its own fast attention (sdpa): its weights, q, k,
v, scores and value vectors come from one traced pass (``trace``), forward hooks on transformers'
own modules. Any other model is loaded with ``attn_implementation="eager"``, because sdpa returns
NO attentions (silently), and every forward pass checks that one (1, h, T, T) tensor per layer came
back. torch and transformers are imported only inside these functions.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable, Sequence

import numpy as np

from attncli.errors import AttnError, BadInput, RuntimeFailure
from attncli.io.textio import visible
from attncli.hf.backends import capabilities, placement as placing, torch_families, torch_grad, torch_trace
from attncli.hf.checks import config_check
from attncli.hf.text.encoding import Encoding, tokenized, tokenizer_errors
from attncli.hf.backends.pretrained_base import Pretrained
from attncli.model.interface import require
from attncli.model.trace import Intervention, Keep, Trace
from attncli.hf.checks.weight_check import check_finite, report_unused
from attncli.hf.formats.weights import checkpoint_file, read_header, shard_files

NEVER_REMOTE = dict(trust_remote_code=False)  # on every transformers call: no code from a model directory
# attn reads the last hidden state and the masked-LM head: a pooler or next-sentence head is never used
UNUSED_OK = ("pooler.", "cls.seq_relationship.")

DECODER_TYPES = {"gpt2", "gpt_neo", "gpt_neox", "gptj", "openai-gpt", "ctrl", "codegen", "opt", "bloom", "llama",
                 "mistral", "mixtral", "falcon", "phi", "phi3", "qwen2", "qwen3", "gemma", "gemma2", "olmo",
                 "gpt_bigcode", "xglm", "mpt", "stablelm", "starcoder2", "smollm3"}


def _is_decoder(config: Any) -> bool:
    architectures = getattr(config, "architectures", None) or []
    return bool(getattr(config, "is_decoder", False)
                or config.model_type in DECODER_TYPES
                or any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures))


class TorchPretrained(Pretrained):
    backend = "torch"
    encoder_decoder = False  # T5, BART: attncli.hf.backends.seq2seq

    def __init__(self, name: str, path: Path, config: dict[str, Any], *, allow_missing_weights: bool = False,
                 placement: placing.Placement = placing.Placement()):
        super().__init__(name, path, config)
        config_check.check_trust(config, self.path)  # load() did; again for a direct construction
        placement.check()
        import torch
        import transformers

        self.torch = torch
        self.placement = placement
        self.device = placing.torch_device(torch, placement.device or "cpu")
        self.dtype = dtype = placement.dtype or "float32"
        where = placement.load_kwargs(torch)  # accelerate's device_map and max_memory, or nothing
        if where:
            where["offload_folder"] = placing.offload_folder(self)
            placing.quiet_accelerate()
        transformers.utils.logging.set_verbosity_error()  # stderr stays for attn's own messages
        transformers.utils.logging.disable_progress_bar()
        if self.model_type not in transformers.CONFIG_MAPPING:
            raise BadInput(f"model '{visible(name)}' has model_type '{visible(self.model_type)}', which transformers "
                           f"{transformers.__version__} does not know: it would need code from the model directory, "
                           "and attn never runs code that comes with a model")
        try:
            hf_config = transformers.AutoConfig.from_pretrained(self.path, **NEVER_REMOTE)
        except Exception as exc:  # noqa: BLE001 - transformers raises anything on a damaged directory
            raise RuntimeFailure(f"transformers could not load '{visible(name)}': {first_line(exc)}") from None
        if bool(getattr(hf_config, "is_encoder_decoder", False)) != self.encoder_decoder:  # load() picks the class
            what = "an encoder-decoder" if not self.encoder_decoder else "not an encoder-decoder"
            raise BadInput(f"model '{visible(name)}' ({visible(hf_config.model_type)}) is {what}: load it with "
                           "attncli.hf.load, which picks the class that reads it")
        self.is_decoder = _is_decoder(hf_config) and not self.encoder_decoder
        self.has_mlm_head = not self.is_decoder and not self.encoder_decoder and _has_mlm_head(self.path)
        try:
            auto = transformers.AutoModelForCausalLM if self.is_decoder else transformers.AutoModel
            if self.has_mlm_head:  # its logits: what an ablation or a patch of an encoder reads
                auto = transformers.AutoModelForMaskedLM
            # a family the trace maps keeps its fast attention: its weights come from the traced q and k
            self.traced = torch_trace.maps(self.model_type, self.is_decoder) and not self.encoder_decoder
            self.model, info = auto.from_pretrained(self.path, attn_implementation=self.attention_implementation(),
                                                    dtype=getattr(torch, dtype),
                                                    use_safetensors=True, output_loading_info=True,
                                                    ignore_mismatched_sizes=True,  # reported below, by name
                                                    **where, **NEVER_REMOTE)
            if not where:
                self.model.to(self.device)
        except Exception as exc:  # noqa: BLE001 - as above
            raise RuntimeFailure(f"transformers could not load '{visible(name)}': {first_line(exc)}") from None
        device_map = getattr(self.model, "hf_device_map", None)
        if where and device_map:  # the inputs go where the embeddings run; accelerate moves the rest
            placing.check_disk(placement, device_map, name)
            self.device = placing.execution_device(device_map)
        with tokenizer_errors(name, "load"):
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(self.path, **NEVER_REMOTE)
        self._check_loading(info, allow_missing_weights)
        self.model.eval()
        text_config = getattr(self.model.config, "get_text_config", lambda: self.model.config)()
        self.layers = int(getattr(text_config, "num_hidden_layers"))
        self.heads = int(getattr(text_config, "num_attention_heads"))
        self.use_type_ids = "token_type_ids" in getattr(self.tokenizer, "model_input_names", [])

    @cached_property
    def _reasons(self) -> dict[str, str]:
        return capabilities.torch_reasons(self)

    def attention_implementation(self) -> str:
        """sdpa where the trace reads the weights from q and k, else eager (output_attentions)."""
        return "sdpa" if self.traced else "eager"

    def _check_loading(self, info: dict[str, Any], allow: bool) -> None:
        """transformers' loading info: a weight it made up (missing) or dropped (unexpected, in the
        base model: a task head's is not counted) is an error or a warning; a NaN weight is damage."""
        model = self.model
        prefix = getattr(model, "base_model_prefix", "") + "."
        parts = {n for n, _ in model.named_children()} | {n for n, _ in model.base_model.named_children()}

        def in_model(key: str) -> bool:
            return key.removeprefix(prefix).split(".")[0] in parts

        def used(key: str) -> bool:
            return not key.removeprefix(prefix).startswith(UNUSED_OK)

        for entry in sorted(info.get("mismatched_keys", ()), key=str):  # (name, checkpoint's shape, config's)
            key, got, want = (entry, "?", "?") if isinstance(entry, str) else (entry + ("?", "?"))[:3]
            raise RuntimeFailure(f"damaged model: {visible(str(key))}: shape {tuple(got)}, but config.json implies "
                                 f"{tuple(want)}")
        report_unused(self.name, missing=[k for k in info.get("missing_keys", ()) if used(k)],
                      unexpected=[k for k in info.get("unexpected_keys", ()) if in_model(k) and used(k)],
                      allow=allow)
        torch = self.torch
        offloaded = False
        for key, tensor in model.state_dict().items():
            if tensor.device.type == "meta":  # on the disk under --device-map: read below, one at a time
                offloaded = True
            elif tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                check_finite(tensor.float().cpu().numpy(), f"the weight {key}")
        if offloaded:
            _check_checkpoint_finite(self.path)

    @tokenized("split the text into tokens")
    def _tokenize(self, texts: list[str], max_length: int | None, special: bool = True) -> Any:
        kwargs = dict(truncation="longest_first", max_length=max_length) if max_length is not None else {}
        kwargs["add_special_tokens"] = special
        batch = self.tokenizer(*texts, return_special_tokens_mask=True, return_offsets_mapping=self.tokenizer.is_fast,
                               **kwargs)
        if self.tokenizer.is_fast and batch.encodings:
            return batch.encodings[0]  # a tokenizers.Encoding, as on the numpy path
        return _slow_encoding(self.tokenizer, batch, len(texts))

    def _untraced(self, what: str) -> BadInput:
        return BadInput(f"{what} on the torch backend come from the traced pass, which knows the modules of "
                        f"{', '.join(sorted(torch_trace.FAMILIES))}, not '{visible(self.model_type)}': use "
                        "--backend numpy where it runs the model")

    def scale(self, layer: int) -> float:
        """The factor q k^T is multiplied by in ``layer``: its attention module's own ``scaling``."""
        if not self.traced:
            raise self._untraced("q and k")
        self.check_layer(layer)
        return float(torch_trace.module(self, layer, "attn").scaling)

    def qk(self, enc: Encoding, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """q, k (h, T, d_head) of ``layer`` after RoPE, k repeated per query head, from the traced pass."""
        if not self.traced:
            raise self._untraced("q and k")
        self.check_layer(layer)
        trace = self.trace(enc, [f"blocks.{layer}.attn.q", f"blocks.{layer}.attn.k"])
        return trace[f"blocks.{layer}.attn.q"], trace[f"blocks.{layer}.attn.k"]

    def _projections(self, enc: Encoding, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Layer ``layer``'s attentions (h, T, T), v (h, T, d_head) from the traced pass, and W_O
        (h d_head, d) as z @ W_O."""
        self.check_layer(layer)
        if not self.traced:
            raise self._untraced("--show norms")
        trace = self.trace(enc, [f"blocks.{layer}.attn.pattern", f"blocks.{layer}.attn.v"])
        weights, v = trace[f"blocks.{layer}.attn.pattern"], trace[f"blocks.{layer}.attn.v"]
        out = torch_trace.module(self, layer, "out")
        w_o = torch_families.weight(out).detach().float().cpu().numpy().astype(np.float64)
        if type(out).__name__ != "Conv1D":
            w_o = w_o.T  # nn.Linear stores (out, in)
        return weights, v, w_o

    def value_vectors(self, enc: Encoding, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """As the numpy backend's: A (h, T, T) and f^h(x_j) = v^h_j W_O^h (h, T, d)."""
        weights, v, w_o = self._projections(enc, layer)
        h, _, d_head = v.shape
        return weights, np.einsum("htk,hkd->htd", v, w_o.reshape(h, d_head, -1))  # (h, T, d)

    def scores(self, enc: Encoding, layer: int) -> np.ndarray:
        """(h, T, T) q k^T * scale of ``layer``, -inf where masked (causal, the layer's sliding window)."""
        if not self.traced:
            raise self._untraced("scores")
        self.check_layer(layer)
        return self.trace(enc, f"blocks.{layer}.attn.scores")[f"blocks.{layer}.attn.scores"]

    def _inputs(self, ids: np.ndarray, type_ids: np.ndarray | None, mask: np.ndarray) -> dict[str, Any]:
        torch = self.torch
        inputs = {"input_ids": torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)),
                  "attention_mask": torch.from_numpy(mask.astype(np.int64))}
        if self.use_type_ids and type_ids is not None:
            inputs["token_type_ids"] = torch.from_numpy(np.ascontiguousarray(type_ids, dtype=np.int64))
        return {k: v.to(self.device) for k, v in inputs.items()}

    def trace(self, enc: Encoding | Sequence[int], keep: Keep | Iterable[str] | str | None = None, *,
              rows: Sequence[int] | None = None, interventions: Sequence[Intervention] = (),
              start: tuple[int, np.ndarray] | None = None) -> Trace:
        """One forward pass of transformers' own model under forward hooks (torch_trace): the sites
        ``keep`` names (attncli.model.trace), float64, for one text; pattern and scores only for
        the query ``rows`` if given; ``interventions`` made where each site is computed;
        ``start=(l, resid_pre)`` resumes at layer l from a cached stream (the layers before it are
        skipped). BadInput for a family whose modules torch_trace does not map."""
        return torch_trace.trace(self, enc, keep, rows=rows, interventions=interventions, start=start)

    def site_gradients(self, ids: Sequence[int], position: int, d_metric: Any = None
                       ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
        """"grad": torch's autograd through transformers' own modules (hf/backends/torch_grad.py)."""
        require(self, "grad", "gradients of a metric")
        return torch_grad.site_gradients(self, ids, position, d_metric)

    def _forward(self, inputs: dict[str, Any], **flags: bool) -> Any:
        with self.torch.inference_mode():
            try:
                return self.model(**inputs, **flags)
            except AttnError:  # a trace's hook refused an intervention
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. CLIP, fed no pixel_values, raises anything
                raise RuntimeFailure(f"model '{visible(self.name)}' failed to run: {first_line(exc)}") from None

    def _stacked(self, out: Any, T: int) -> np.ndarray:
        attentions = getattr(out, "attentions", None)
        if attentions is None or len(attentions) != self.layers or any(a is None for a in attentions):
            got = "none" if attentions is None else f"{sum(a is not None for a in attentions)} tensors"
            raise RuntimeFailure(f"model '{self.name}' returned {got} for its {self.layers} layers' attentions: "
                                 "its attention implementation cannot return weights")
        stacked = np.stack([a[0].float().cpu().numpy() for a in attentions]).astype(np.float64)  # (L, h, T, T)
        for layer, weights in enumerate(stacked):
            check_finite(weights, f"layer {layer}'s attention")
        if stacked.shape[1:] != (self.heads, T, T):
            raise RuntimeFailure(f"model '{self.name}' returned attentions of shape {stacked.shape[1:]}, "
                                 f"expected ({self.heads}, {T}, {T})")
        return stacked

    def attentions(self, enc: Encoding) -> np.ndarray:
        """(L, h, T, T) float64 (computed in float32 by torch): ``output_attentions`` of the eager model."""
        if not isinstance(enc, Encoding) or not enc.ids:
            raise BadInput("attentions() takes an Encoding from encode()")
        if self.traced:  # recomputed from the traced q and k; the model keeps its sdpa attention
            return self.trace(enc, "blocks.*.attn.pattern").stack("attn.pattern", self.layers)
        ids = np.asarray([enc.ids])
        out = self._forward(self._inputs(ids, np.asarray([enc.type_ids]), np.ones_like(ids, dtype=bool)),
                            output_attentions=True)
        return self._stacked(out, len(enc.ids))

    def _last_hidden(self, ids: np.ndarray, type_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out = self._forward(self._inputs(ids, type_ids, mask), output_hidden_states=True)
        for layer, hidden in enumerate(out.hidden_states[1:]):
            check_finite(hidden.float().cpu().numpy(), f"layer {layer}'s output")
        return out.hidden_states[-1].float().cpu().numpy()  # (B, T, d)

    def new_cache(self) -> None:
        """The torch backend keeps no cache: ``logits_and_attentions`` recomputes (cache=None is fine)."""
        self.check_decoder()
        return None

    def logits_and_attentions(self, ids: Sequence[int], cache: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """Decoders: (T, V) logits and (L, h, T, T) attentions; ``cache`` is accepted and ignored."""
        self.check_decoder()
        if self.traced:
            trace = self.trace(list(ids), ["logits", "blocks.*.attn.pattern"])
            return trace["logits"], trace.stack("attn.pattern", self.layers)
        arr = self.check_ids(ids)[None]  # (1, T)
        out = self._forward(self._inputs(arr, None, np.ones_like(arr, dtype=bool)), output_attentions=True)
        attentions = self._stacked(out, arr.shape[1])
        logits = out.logits[0].float().cpu().numpy().astype(np.float64)  # (T, V)
        check_finite(logits, "the logits")
        return logits, attentions

    @tokenized("turn token ids back into text")
    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    @tokenized("name its tokens")
    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return list(self.tokenizer.convert_ids_to_tokens([int(i) for i in ids]))


# the first weight of each family's masked-LM head (BERT, RoBERTa / XLM-R / CamemBERT, ELECTRA's
# generator, DistilBERT): a checkpoint that holds it holds the head (a stray cls.predictions.bias does not)
MLM_HEADS = ("cls.predictions.transform.dense.weight", "lm_head.dense.weight",
             "generator_predictions.dense.weight", "vocab_transform.weight")


def _has_mlm_head(directory: Path) -> bool:
    """The checkpoint holds a masked-LM head (by its tensors' names, from the safetensors headers)."""
    found = checkpoint_file(Path(directory))
    if found is None:
        return False
    return any(name in MLM_HEADS for shard in shard_files(found) for name in read_header(shard)[0])


def _slow_encoding(tokenizer: Any, batch: Any, n_texts: int) -> SimpleNamespace:
    """A slow (Python) tokenizer has no word ids or offsets: every piece is its own word, and a
    pair's second sentence starts after the first special token that follows the first's pieces."""
    ids = list(batch["input_ids"])
    special = list(batch.get("special_tokens_mask") or [0] * len(ids))
    tokens = tokenizer.convert_ids_to_tokens(ids)
    sequence_ids: list[int | None] = []
    seq, seen = 0, False
    for s in special:
        if s:
            sequence_ids.append(None)
            if seen and n_texts > 1:
                seq = 1
        else:
            sequence_ids.append(seq)
            seen = True
    return SimpleNamespace(ids=ids, tokens=tokens, special_tokens_mask=special, sequence_ids=sequence_ids,
                           word_ids=list(range(len(ids))), offsets=[(0, 0)] * len(ids),
                           type_ids=list(batch.get("token_type_ids") or [0] * len(ids)))


def _check_checkpoint_finite(directory: Path) -> None:
    """NaN in a weight that stays on the disk (--device-map): each checkpoint tensor, one at a time."""
    from safetensors import safe_open

    found = checkpoint_file(Path(directory))
    for shard in shard_files(found) if found is not None else ():
        with safe_open(str(shard), framework="pt") as f:
            for key in f.keys():
                tensor = f.get_tensor(key)
                if tensor.is_floating_point() and not bool(tensor.isfinite().all()):
                    check_finite(tensor.float().numpy(), f"the weight {key}")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return visible(text[0][:300]) if text else exc.__class__.__name__
