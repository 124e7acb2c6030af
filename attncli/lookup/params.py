"""The lookup's tuned defaults, measured in docs/lookup.md.

Kept in a module with no imports so that ``cli_lookup`` can show them in ``--help`` without
loading NumPy on the startup path of every ``attn`` command.
"""

DEFAULT_TEMPERATURE = 0.15  # T in softmax(similarity / T)
NGRAM_WEIGHT = 0.6  # lambda in similarity = (1 - lambda) * cosine + lambda * ngram
NGRAM_MIN, NGRAM_MAX = 3, 6  # character n-gram lengths of the overlap score (fastText's)

# lambda for a sentence encoder, by the encoder's name (its directory's or hub id's last part,
# case-insensitive); one not listed gets NGRAM_WEIGHT (chosen earlier, on tests/lookup_eval.json,
# for the word vectors and all-MiniLM-L6-v2). Each entry here was chosen on
# tests/lookup_eval_heldout.json only, by `python bench/bench_encoder_blend.py --encoder DIR`
# (the most held-out hits over lambda = 0, 0.05, ..., 1; ties to the smaller n-gram weight);
# docs/lookup.md has the sweep and the figure on both evaluation sets.
ENCODER_NGRAM_WEIGHTS = {"all-mpnet-base-v2": 0.15}


def encoder_ngram_weight(encoder: str) -> float:
    """The default lambda for the sentence encoder named or found at ``encoder``."""
    name = encoder.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].lower()
    return ENCODER_NGRAM_WEIGHTS.get(name, NGRAM_WEIGHT)


POOLING = {
    "cls": "the last hidden state of the first token",
    "max": "the maximum of the last hidden state over the tokens (attention mask)",
    "mean": "the mean of the last hidden state over the tokens (attention mask)",
    "mean_sqrt_len": "the sum of the last hidden state over the tokens (attention mask) / sqrt(their number)",
}  # what each of sentence-transformers' poolings attn computes (attncli.hf.loader.pool) is
