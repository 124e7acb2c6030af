"""attn's own NumPy forward passes, one file per family (gpt2, llama with llama_config, qwen3, bert,
distilbert, mpnet), each with ``parts(config)``, the description of its parts the methods read
(parts.py), and the one registry (registry.py) the loader consults: model_type -> family, and why
attn's NumPy pass cannot run a config."""
