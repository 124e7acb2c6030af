"""Pretrained Hugging Face models: their attention as NumPy arrays, on one of two backends.

    >>> from attncli.hf import load
    >>> model = load("path/to/model")                       # doctest: +SKIP
    >>> enc = model.encode("time flies like an arrow", pair="fruit flies like a banana")  # doctest: +SKIP
    >>> model.attentions(enc).shape                         # doctest: +SKIP
    (6, 12, 17, 17)
    >>> from attncli.hf import NUMPY_MODEL_TYPES
    >>> sorted(NUMPY_MODEL_TYPES)[:3]
    ['bert', 'camembert', 'distilbert']

API (shapes: L layers, h heads, T tokens, d model width, d_head = d / h, V vocabulary):

``load(name_or_path, *, backend="auto", allow_missing_weights=False, device=None, dtype=None, device_map=None,
max_memory=None) -> Pretrained``
    ``name_or_path`` is a local directory written by ``save_pretrained`` (config.json and weights)
    or a hub id, looked up in the local Hugging Face cache (downloaded only when the hub is
    reachable and ``HF_HUB_OFFLINE`` is unset). ``backend`` is ``"numpy"`` (attn's own forward pass
    from ``model.safetensors`` (or sharded) and ``tokenizer.json``: neither torch nor transformers
    is imported; BERT, RoBERTa / XLM-R / CamemBERT, ELECTRA, DistilBERT, GPT-2, and Llama, Mistral,
    Qwen2, Gemma, Phi-3, Qwen3, Gemma 3), ``"torch"`` (transformers: the
    families torch_trace.py maps keep their sdpa attention and are read by one traced pass of
    forward hooks; any other architecture that returns attentions runs eager) or ``"auto"`` (numpy when the
    model is supported and has those files, else torch). ``device`` ("cpu", "cuda", "mps", "auto")
    and ``dtype`` ("float32", "bfloat16", "float16") place the torch backend's model;
    ``device_map="auto"`` with ``max_memory`` ("0=20GiB,cpu=64GiB,disk") lets accelerate split it
    across GPUs, the CPU and the disk (placement.py); given for a model the numpy backend runs,
    they are ``BadInput`` pointing to ``backend="torch"``. Raises ``BadInput`` for a missing model
    or directory, a directory that is not a model, ``backend="numpy"`` on an unsupported model, a
    missing optional package (the ``pretrained`` extra for numpy, ``transformers`` for torch: the
    message says how to install it, attncli.env.extras); ``RuntimeFailure`` for a hub id that is not cached
    while offline, or a model whose attentions do not come back.

    A model directory is hostile input (config_check.py, weight_check.py; docs/transformers.md):
    ``BadInput`` for a model that needs its own code (``auto_map``, a model_type transformers does
    not know) or has only pickled weights; ``RuntimeFailure`` "damaged model: ..." for a damaged
    config.json field, a FIFO / device / oversized file, a weight of the wrong shape, NaN in a
    weight or (later, in any call) an activation; ``RuntimeFailure`` naming the tensors when the
    checkpoint lacks weights the model needs or holds ones it does not use (a warning instead
    with ``allow_missing_weights``), or when the tokenizer knows no word of a plain sentence.

``Pretrained`` (what ``load`` returns)
    ``name`` (as given), ``path`` (the resolved directory), ``backend`` ("numpy" | "torch"),
    ``model_type`` (config's, e.g. "bert"), ``is_decoder`` (causal, e.g. GPT-2), ``layers`` (L),
    ``heads`` (h), ``max_positions`` (most tokens one input may hold, special tokens included),
    ``has_pairs`` (the tokenizer has a sentence-pair format: False for decoders), ``kv_heads`` and
    ``kv_head(head)`` (grouped-query attention: the key-value head a query head reads).

    ``encode(text, pair=None, *, truncate=False, special=True) -> Encoding`` tokenizes with the
    model's own tokenizer and special tokens (none with ``special=False``: a rendered chat
    template holds its own); a pair is ONE input (``tokenizer(text, pair)``). An input longer
    than ``max_positions`` is ``BadInput`` naming the limit and ``--truncate`` (``truncate=True``
    cuts it, longest sequence first). ``pair`` on a model without pairs is ``BadInput``.

    ``attentions(enc) -> np.ndarray`` (L, h, T, T) float64: every layer's and head's post-softmax
    weights, row = query, column = key; what transformers' ``output_attentions`` returns.

    ``qk(enc, layer) -> (q, k)`` each (h, T, d_head) float64 (on torch, for the families the trace
    maps; ``BadInput`` for the rest): the layer's queries and keys per head, so that
    ``softmax(q[head] @ k[head].T * scale(layer) + mask)`` is ``attentions(enc)[layer, head]``;
    ``scale(layer)`` is ``model.scale(layer)`` (1/sqrt(d_head) for BERT and GPT-2) and the mask is
    the causal one when ``is_decoder``.

    ``embed(texts) -> np.ndarray`` (n, d) float64: mean of the last hidden state over each text's
    tokens (attention mask), as sentence-transformers pools all-MiniLM-L6-v2; not normalised. Texts
    are cut to the model's sequence limit (sentence_bert_config.json's ``max_seq_length`` if present)
    and run in padded batches; the numpy backend computes them in float32 (within 1e-5 of transformers).

    ``logits_and_attentions(ids, cache=None) -> (logits, attentions)`` decoders only: (T, V)
    next-token logits (GPT-2's LM head is tied to ``wte``) and (L, h, T, T) attentions, float64, for
    a list of token ids (e.g. ``encode(text).ids`` plus generated ones). ``cache = new_cache()``
    (numpy backend; None on torch, which recomputes) makes each call run only the tokens past the
    prefix already seen, with the same result as a full recompute (tested to 1e-9); a sequence
    that diverges keeps the common prefix.
    ``decode(ids) -> str`` and ``token_strings(ids)`` turn ids back into text / pieces.

    ``trace(enc_or_ids, keep=None, *, rows=None, interventions=(), start=None) -> Trace``: one
    forward pass that holds the named sites ``keep`` asks for (trace.py names them, with their
    shapes) and makes ``interventions`` where each site is computed; ``start=(l, resid_pre)``
    resumes at layer l. Every view above reads one; docs/causal.md.

``Encoding`` (a frozen dataclass; every list has one entry per token)
    ``ids`` (int), ``tokens`` (the model's own pieces, e.g. "##ies", "Ġflies", "[CLS]"),
    ``segments`` ("a" | "b" | None for a special token; from the tokenizer's sequence ids, not
    ``token_type_ids``), ``special`` (bool), ``word_ids`` (index into ``words`` of the word the
    token belongs to, None for special tokens; numbered across both sentences of a pair),
    ``words`` (the words' text as written), ``type_ids`` (what the model is fed as
    token_type_ids), ``text``, ``pair``, ``truncated`` (bool).

See docs/transformers.md for what runs where and how each path is checked.
"""

from attncli.lazy import exports

__all__, __getattr__, __dir__ = exports(__name__, {
    "load": "loader",
    "Pretrained": "backends.pretrained_base",
    "Encoding": "text.encoding",
    "NUMPY_MODEL_TYPES": "families.registry",
})
