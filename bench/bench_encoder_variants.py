"""Ways to score keys with a sentence encoder, on the two lookup evaluation sets.

    python bench/bench_encoder_variants.py --encoder DIR [--background 2000] [--layers]

The question (issue 16): can all-MiniLM-L6-v2 reach 95% of tests/lookup_eval.json by a scoring
that was *not* chosen on those cases? The protocol: the variants below were fixed first; the
choice among them is made on tests/lookup_eval_heldout.json (111 cases written blind by a helper
and committed before anything was measured on them); the figure reported is then the chosen
variant's on tests/lookup_eval.json. Every variant keeps the lookup's n-gram blend,
similarity = (1 - lambda) * cosine + lambda * ngram, for lambda in 0.5, 0.6 (the default), 0.7.

Variants of the cosine:

* ``text``: e(key) and e(query) of the text as given (what ``attn lookup --encoder`` does);
* ``"the {}"``: each text wrapped in a template, so that a lone word reads as a noun phrase;
* ``centred``: unit embeddings minus the mean unit embedding of a background of common words (the
  built-in model's most frequent ``--background`` alphabetic words), renormalised: the correction
  that the word-vector lookup makes (Mu & Viswanath 2018), applied to the encoder;
* both;
* with ``--layers`` (needs torch and transformers): mean pooling of other hidden layers than the
  last (each layer, the first and last averaged, all averaged), for the plain text.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from attncli.lookup.encoder import load_encoder, unit  # noqa: E402
from attncli.lookup.keyindex import KeyTokens  # noqa: E402
from attncli.vectors.model import load_vectors  # noqa: E402
from attncli.vectors.tokenize import tokenize  # noqa: E402

SETS = {"held-out (choose)": REPO / "tests" / "lookup_eval_heldout.json", "project's (report)": REPO / "tests" / "lookup_eval.json"}
LAMBDAS = (0.5, 0.6, 0.7)


def accuracy(spec: dict, cosine, lam: float) -> tuple[int, list[str]]:
    """Top-1 hits of similarity = (1 - lam) cosine(query, keys) + lam ngram, and the misses."""
    ngrams = {d: KeyTokens(keys) for d, keys in spec["dictionaries"].items()}
    hits, misses = 0, []
    for case in spec["cases"]:
        keys = spec["dictionaries"][case["dict"]]
        sim = (1 - lam) * cosine(case["query"], keys) + lam * ngrams[case["dict"]].ngram_scores(tokenize(case["query"]))
        best = keys[int(np.argmax(sim))]
        hits += best == case["expected"]
        if best != case["expected"]:
            misses.append(f"{case['query']}->{best}")
    return hits, misses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", required=True, help="a sentence encoder directory (e.g. all-MiniLM-L6-v2)")
    ap.add_argument("--background", type=int, default=2000, help="common words whose mean embedding is removed")
    ap.add_argument("--layers", action="store_true", help="also pool other layers (torch + transformers)")
    ap.add_argument("--verbose", action="store_true", help="list the misses")
    args = ap.parse_args()
    specs = {name: json.loads(path.read_text(encoding="utf-8")) for name, path in SETS.items()}
    enc = load_encoder(args.encoder)
    cache: dict[str, np.ndarray] = {}

    def emb(texts: list[str]) -> np.ndarray:  # (n, D) unit rows, each text embedded once
        todo = [t for t in dict.fromkeys(texts) if t not in cache]
        for i in range(0, len(todo), 64):
            cache.update(zip(todo[i : i + 64], enc.embed(todo[i : i + 64])))
        return unit(np.stack([cache[t] for t in texts]))


    background = [w for w in load_vectors("default").words if w.isalpha()][: args.background]
    start = time.perf_counter()
    mu = {tpl: emb([tpl.format(w) for w in background]).mean(axis=0) for tpl in ("{}", "the {}")}  # (D,) each
    print(f"encoder {args.encoder}; background of {len(background)} words embedded in {time.perf_counter() - start:.1f} s",
          file=sys.stderr)

    def variant(tpl: str, centre: bool):
        def cosine(query: str, keys: list[str]) -> np.ndarray:  # (N,)
            q, k = emb([tpl.format(query)]), emb([tpl.format(key) for key in keys])  # (1, D), (N, D)
            if centre:
                q, k = unit(q - mu[tpl]), unit(k - mu[tpl])
            return k @ q[0]
        return cosine

    rows = {f"{'text' if tpl == '{}' else repr(tpl)}{', centred' if centre else ''}": variant(tpl, centre)
            for tpl in ("{}", "the {}") for centre in (False, True)}
    if args.layers:
        rows.update(layer_variants(args.encoder))
    print("| cosine from | " + " | ".join(f"{s}, lambda {lam:g}" for s in specs for lam in LAMBDAS) + " |")
    print("|---|" + "---:|" * (len(specs) * len(LAMBDAS)))
    for name, cosine in rows.items():
        cells, misses = [], []
        for s, spec in specs.items():
            for lam in LAMBDAS:
                hits, miss = accuracy(spec, cosine, lam)
                cells.append(f"{hits}/{len(spec['cases'])} ({hits / len(spec['cases']):.1%})")
                misses.append(f"{s} {lam:g}: {' '.join(miss)}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
        if args.verbose:
            print("\n".join(f"|   {m} |" for m in misses))


def layer_variants(path: str) -> dict:
    """Mean pooling of hidden layers other than the last, through transformers (plain text)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    cache: dict[str, np.ndarray] = {}

    def layers(text: str) -> np.ndarray:  # (L + 1, D): the embeddings' output, then each layer's
        if text not in cache:
            with torch.no_grad():
                hidden = model(**tok([text], return_tensors="pt"), output_hidden_states=True).hidden_states
            cache[text] = np.stack([h[0].double().mean(0).numpy() for h in hidden])
        return cache[text]

    def pooled(pick):
        return lambda query, keys: unit(np.stack([pick(layers(k)) for k in keys])) @ unit(pick(layers(query)))

    n = model.config.num_hidden_layers
    out = {("the embeddings' output" if i == 0 else f"layer {i} of {n}"): pooled(lambda h, i=i: h[i]) for i in range(n)}
    out["first and last layers averaged"] = pooled(lambda h: (h[1] + h[-1]) / 2)
    out["all layers averaged"] = pooled(lambda h: h[1:].mean(0))
    return out


if __name__ == "__main__":
    main()
