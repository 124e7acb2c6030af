"""The n-gram weight of ``attn lookup --encoder``, chosen on the held-out evaluation set only.

    python bench/bench_encoder_blend.py --encoder DIR [--step 0.05] [--verbose] [--json]

similarity = (1 - lambda) * cosine + lambda * ngram (attncli/lookup/encoder.py). For every lambda
of a grid from 0 to 1, top-1 accuracy on tests/lookup_eval_heldout.json (111 cases written blind
by a helper and committed before anything was measured on them): the CHOICE is the lambda with
the most hits there, ties going to the smaller n-gram weight. Then the chosen lambda's accuracy
on tests/lookup_eval.json (104 cases), which only reports: it plays no part in the choice. Each
text is embedded once through the lookup's own ``EncoderIndex`` (the cosines and n-gram scores of
``score``, blended here for every lambda), and a case is a hit when the key with the largest
similarity is the expected one, as in bench/bench_lookup_quality.py.

The weight stored for an encoder is in attncli/lookup/params.py (ENCODER_NGRAM_WEIGHTS), with
the command and the figures in docs/lookup.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from attncli.lookup.encoder import EncoderIndex, load_encoder  # noqa: E402

HELDOUT, PROJECT = REPO / "tests" / "lookup_eval_heldout.json", REPO / "tests" / "lookup_eval.json"


def case_scores(enc, spec: dict) -> list[tuple[np.ndarray, np.ndarray, int, list[str], str]]:
    """Per case: (cosine (N,), ngram (N,), index of the expected key, the keys, the query)."""
    indexes = {name: EncoderIndex(enc, keys, ngram_weight=0.0) for name, keys in spec["dictionaries"].items()}
    out = []
    for case in spec["cases"]:
        index = indexes[case["dict"]]
        _, cosine, ngram, _ = index.score(case["query"])
        out.append((np.asarray(cosine, float), np.asarray(ngram, float), index.keys.index(case["expected"]),
                    index.keys, case["query"]))
    return out


def hits(scores, lam: float) -> tuple[int, list[str]]:
    """Top-1 hits at ``lam`` and the misses as 'query->chosen key'."""
    n, misses = 0, []
    for cosine, ngram, expected, keys, query in scores:
        best = int(np.argmax((1 - lam) * cosine + lam * ngram))
        n += best == expected
        if best != expected:
            misses.append(f"{query}->{keys[best]}")
    return n, misses


def choose(heldout_hits: dict[float, int]) -> float:
    """The lambda with the most held-out hits; a tie goes to the smaller n-gram weight."""
    return min(heldout_hits, key=lambda lam: (-heldout_hits[lam], lam))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", required=True, help="a sentence encoder directory (e.g. all-mpnet-base-v2)")
    ap.add_argument("--step", type=float, default=0.05, help="the grid's step from 0 to 1")
    ap.add_argument("--verbose", action="store_true", help="list the chosen lambda's misses on both sets")
    ap.add_argument("--json", action="store_true", help="the sweep and the choice as JSON")
    args = ap.parse_args()
    enc = load_encoder(args.encoder)
    sets = {name: case_scores(enc, json.loads(path.read_text(encoding="utf-8")))
            for name, path in (("heldout", HELDOUT), ("project", PROJECT))}
    grid = [round(x, 4) for x in np.arange(0.0, 1.0 + args.step / 2, args.step)]
    table = {lam: {name: hits(scores, lam)[0] for name, scores in sets.items()} for lam in grid}
    chosen = choose({lam: row["heldout"] for lam, row in table.items()})
    n = {name: len(scores) for name, scores in sets.items()}
    if args.json:
        print(json.dumps({"encoder": Path(args.encoder).name, "chosen": chosen, "cases": n,
                          "sweep": [{"lambda": lam, **row} for lam, row in table.items()]}, allow_nan=False))
        return
    print(f"encoder {Path(args.encoder).name}: top-1 hits per n-gram weight lambda")
    print(f"| lambda | held-out (chooses), of {n['heldout']} | project's (reports), of {n['project']} |")
    print("| ---: | ---: | ---: |")
    for lam, row in table.items():
        mark = "**" if lam == chosen else ""
        print(f"| {mark}{lam:g}{mark} | {mark}{row['heldout']} ({100 * row['heldout'] / n['heldout']:.1f}%){mark} "
              f"| {mark}{row['project']} ({100 * row['project'] / n['project']:.1f}%){mark} |")
    print(f"chosen on the held-out set: lambda = {chosen:g} (ties -> the smaller n-gram weight)")
    if args.verbose:
        for name, scores in sets.items():
            print(f"misses on {name} at {chosen:g}: " + ", ".join(hits(scores, chosen)[1]))


if __name__ == "__main__":
    main()
