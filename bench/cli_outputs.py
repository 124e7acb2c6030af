"""Record what the CLI prints for a broad set of commands, and compare two records byte by byte.

A refactoring that should not change behaviour (options declared once, names moved) runs this
before and after:

    python bench/cli_outputs.py record /tmp/before      # builds the tiny models once, in --fixtures
    ... change the code ...
    python bench/cli_outputs.py record /tmp/after
    python bench/cli_outputs.py compare /tmp/before /tmp/after

Each case is one ``attn`` command run in a child process (``python -m attncli``, COLUMNS=100, no
terminal): its stdout, stderr and exit code are stored under the case's name. The cases are every
command's ``--help`` and representative runs on the tiny random GPT-2, Llama and BERT the tests build
(tests/_transformer_fixtures.py, tests/_llama_fixtures.py) and on the built-in word vectors and LM,
with ``--json`` and without, and their refusals. The fixtures and ATTN_HOME live at fixed paths
(``--fixtures``, default /tmp/attn_cli_fixtures), so the paths printed are the same in both records.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HELP = ["lookup", "matrix", "explore", "compare", "generate", "lens", "ablate", "patch", "attribute", "circuit", "dla",
        "qk", "stats", "stats run", "stats merge", "variants", "demo", "scale", "train", "import", "models", "eval",
        "similar", "train-attention", "heads"]
SENT = "time flies like an arrow"
CLEAN, CORRUPT = "the cat sat on the mat and the dog", "the dog sat on the mat and the cat"


def cases(fx: Path) -> dict[str, list[str]]:
    """name -> the arguments of ``attn``."""
    gpt2, llama, bert = str(fx / "gpt2"), str(fx / "llama"), str(fx / "bert")
    pairs, corpus, queries = str(fx / "pairs.jsonl"), str(fx / "corpus.txt"), str(fx / "queries.txt")
    c: dict[str, list[str]] = {"help": ["--help"]}
    c.update({f"help-{name.replace(' ', '-')}": [*name.split(), "--help"] for name in HELP})
    runs = {
        # the word-vector matrix
        "matrix": [SENT], "matrix-json": [SENT, "--json"], "matrix-scores": [SENT, "--show", "scores"],
        "matrix-output-json": [SENT, "--show", "output", "--json"],
        "matrix-multihead": [SENT, "--variant", "multihead", "--heads", "2", "--json"],
        "matrix-causal-explain": [SENT, "--causal", "--explain", "1", "2"],
        "matrix-window": [SENT, "--window", "1", "--pad-to", "7", "--positions", "none"],
        "matrix-random": [SENT, "--proj", "random", "--d-k", "4", "--seed", "3", "--json"],
        "matrix-context": [SENT, "--context", "fruit flies like a banana"],
        "matrix-rows": [SENT, "--rows", "1:3", "--cols", "0:2"],
        "matrix-bad-layer": [SENT, "--layer", "1"], "matrix-bad-norms": [SENT, "--show", "norms"],
        "matrix-bad-filter": [SENT, "--filter", "a-b"], "matrix-bad-variant": [SENT, "--variant", "nope"],
        "matrix-bad-width": [SENT, "--width", "50"], "matrix-bad-show": [SENT, "--show", "nope"],
        # a pretrained model's matrix
        "tm-gpt2": [SENT, "--transformer", gpt2], "tm-gpt2-json": [SENT, "--transformer", gpt2, "--json"],
        "tm-gpt2-head": [SENT, "--transformer", gpt2, "--layer", "0", "--head", "1", "--show", "scores"],
        "tm-llama-norms": [SENT, "--transformer", llama, "--show", "norms"],
        "tm-llama-json": [SENT, "--transformer", llama, "--json", "--layer", "1"],
        "tm-bert-pair": [SENT, "--transformer", bert, "--pair", "the cat sat", "--filter", "a-b", "--json"],
        "tm-bert-specials": [SENT, "--transformer", bert, "--pair", "the cat sat", "--filter", "a-b",
                             "--filter-specials", "bertviz"],
        "tm-bert-words": [SENT, "--transformer", bert, "--words", "--hide-special"],
        "tm-model-view": [SENT, "--transformer", gpt2, "--model-view"],
        "tm-rollout": [SENT, "--transformer", gpt2, "--rollout", "--json"],
        "tm-flow": [SENT, "--transformer", gpt2, "--flow"],
        "tm-alti": [SENT, "--transformer", bert, "--show", "alti"],
        "tm-globenc-json": [SENT, "--transformer", bert, "--show", "globenc", "--json"],
        "tm-vz": [SENT, "--transformer", gpt2, "--show", "value-zeroing"],
        "tm-long-topk": [SENT, "--transformer", gpt2, "--rows", "1-3", "--top-k", "2"],
        "tm-long-pool": [SENT, "--transformer", gpt2, "--pool", "2", "--json"],
        "tm-explain": [SENT, "--transformer", gpt2, "--explain", "2", "1", "--head", "0"],
        "tm-torch": [SENT, "--transformer", gpt2, "--backend", "torch", "--json"],
        "tm-bad-filter": [SENT, "--transformer", bert, "--filter", "a-b"],
        "tm-bad-rollout-head": [SENT, "--transformer", gpt2, "--rollout", "--head", "0"],
        "tm-bad-variant": [SENT, "--transformer", gpt2, "--variant", "additive"],
        "tm-bad-layers": [SENT, "--transformer", gpt2, "--layers", "0-1"],
        "tm-bad-stack": [SENT, "--transformer", gpt2, "--stack", "cross"],
        "tm-bad-backend": [SENT, "--transformer", gpt2, "--backend", "nope"],
        "tm-bad-missing": [SENT, "--transformer", str(fx / "nope")],
    }
    c.update({name: ["matrix", *args] for name, args in runs.items()})
    more = {
        "lens": ["lens", "time flies like an"], "lens-json": ["lens", "time flies like an", "--json", "-k", "2"],
        "lens-gpt2": ["lens", SENT, "--transformer", gpt2, "--token", "the"],
        "lens-gpt2-json": ["lens", SENT, "--transformer", gpt2, "--json"],
        "lens-bad": ["lens", SENT, "--transformer", gpt2, "--model", "x"],
        "lens-bad-topk": ["lens", SENT, "--top-k", "0"],
        "compare": ["compare", "the cat sat", "the dog sat"], "compare-json": ["compare", "the cat sat", "the dog sat", "--json"],
        "compare-variant": ["compare", SENT, "--variant-b", "additive"],
        "compare-causal-json": ["compare", SENT, "--causal-b", "--json"],
        "compare-gpt2": ["compare", "the cat sat", "the dog ran", "--transformer", gpt2, "--layer", "0"],
        "compare-two-models": ["compare", SENT, "--transformer", gpt2, "--transformer-b", llama, "--align", "position", "--json"],
        "compare-bad": ["compare", SENT], "compare-bad-b": ["compare", SENT, "--transformer-b", gpt2],
        "compare-bad-words": ["compare", SENT, "x", "--words"],
        "heads": ["heads"], "heads-json": ["heads", "--json", "--sentences", "5"],
        "heads-gpt2": ["heads", "--transformer", gpt2, "--file", corpus],
        "heads-gpt2-json": ["heads", "--transformer", gpt2, "--file", corpus, "--json", "--exclude-first"],
        "heads-bad": ["heads", "--exclude-first"], "heads-bad-backend": ["heads", "--backend", "torch"],
        "heads-bad-amw": ["heads", "--allow-missing-weights"],
        "generate": ["generate", "the cat", "-n", "3", "--seed", "1"],
        "generate-json": ["generate", "the cat", "-n", "3", "--seed", "1", "--json"],
        "generate-jsonl": ["generate", "the cat", "-n", "3", "--seed", "1", "--jsonl", "--lens"],
        "generate-gpt2": ["generate", "the cat", "--transformer", gpt2, "-n", "3", "--greedy", "--top", "2"],
        "generate-gpt2-json": ["generate", "the cat", "--transformer", gpt2, "-n", "3", "--seed", "2", "--json"],
        "generate-llama-chat": ["generate", "the cat", "--transformer", llama, "-n", "2", "--greedy", "--chat", "--lens"],
        "generate-bad-both": ["generate", "the cat", "--json", "--jsonl"],
        "generate-bad-amw": ["generate", "the cat", "--allow-missing-weights"],
        "generate-bad-top": ["generate", "the cat", "--top", "0"],
        "generate-bad-backend": ["generate", "the cat", "--transformer", gpt2, "--backend", "nope"],
        "dla": ["dla", "time flies like an", "--target", "the"],
        "dla-json": ["dla", "time flies like an", "--target", "the", "--json"],
        "dla-gpt2": ["dla", SENT, "--transformer", gpt2, "--target", " the", "--contrast", " a"],
        "dla-bad": ["dla", "time flies"], "dla-bad-backend": ["dla", "time flies", "--target", "the", "--backend", "torch"],
        "ablate": ["ablate", "the cat sat on the", "--target", "the"],
        "ablate-json": ["ablate", "the cat sat on the", "--target", "the", "--json"],
        "ablate-gpt2": ["ablate", SENT, "--transformer", gpt2, "--target-id", "5", "--position", "2"],
        "ablate-bad-ref": ["ablate", "the cat", "--target", "the", "--reference", corpus],
        "ablate-bad-mode": ["ablate", "the cat", "--target", "the", "--mode", "x"],
        "ablate-pairs": ["ablate", "--pairs", pairs, "--transformer", gpt2, "--json"],
        "ablate-pairs-bad": ["ablate", "--pairs", pairs, "--target", "x"],
        "patch": ["patch", "the cat sat on the", "the dog sat on the", "--target", "the"],
        "patch-json": ["patch", "the cat sat on the", "the dog sat on the", "--target", "the", "--json", "--site", "head"],
        "patch-gpt2": ["patch", CLEAN, CORRUPT, "--transformer", gpt2, "--target-id", "7", "--site", "attn"],
        "patch-bad-site": ["patch", "a b", "c d", "--target", "x", "--site", "x"],
        "patch-bad-workers": ["patch", "a b", "c d", "--target", "x", "--workers", "2"],
        "patch-pairs": ["patch", "--pairs", pairs, "--transformer", gpt2],
        "attribute": ["attribute", CLEAN, CORRUPT, "--transformer", gpt2, "--target-id", "7"],
        "attribute-json": ["attribute", CLEAN, CORRUPT, "--transformer", gpt2, "--target-id", "7", "--json",
                           "--site", "head", "--verify", "2"],
        "attribute-bad": ["attribute", CLEAN, CORRUPT, "--target", "x"],
        "attribute-pairs": ["attribute", "--pairs", pairs, "--transformer", gpt2, "--json"],
        "circuit": ["circuit", CLEAN, CORRUPT, "--transformer", gpt2, "--target-id", "7"],
        "circuit-json": ["circuit", CLEAN, CORRUPT, "--transformer", gpt2, "--target-id", "7", "--json", "--steps", "2"],
        "circuit-bad": ["circuit", CLEAN, CORRUPT, "--transformer", gpt2, "--target", "x", "--steps", "0"],
        "circuit-pairs": ["circuit", "--pairs", pairs, "--transformer", gpt2],
        "qk": ["qk", SENT, "--transformer", gpt2, "--layer", "1", "--head", "2"],
        "qk-json": ["qk", SENT, "--transformer", gpt2, "--json", "--query", "3", "--key", "1", "--top", "4"],
        "qk-bert-pair": ["qk", SENT, "--transformer", bert, "--pair", "the cat"],
        "qk-bad": ["qk", SENT], "qk-bad-layer": ["qk", SENT, "--transformer", gpt2, "--layer", "-1"],
        "stats": ["stats", corpus, "--transformer", gpt2, "--probe-every", "2"],
        "stats-json": ["stats", corpus, "--transformer", gpt2, "--json", "--top-k", "1", "--probe-length", "4"],
        "stats-bad": ["stats", corpus], "stats-bad-prec": ["stats", corpus, "--transformer", gpt2, "--precision", "x"],
        "stats-bad-explore": ["stats", corpus, "--transformer", gpt2, "--json", "--explore"],
        "stats-merge-bad": ["stats", "merge", str(fx / "nope")],
        "lookup": ["lookup", "colour"], "lookup-json": ["lookup", "colour", "--json"],
        "lookup-explain": ["lookup", "top speed", "--explain", "--top-k", "3", "--rows", "2"],
        "lookup-queries": ["lookup", "--queries", queries, "--json"],
        "lookup-encoder": ["lookup", "colour", "--encoder", bert, "--json"],
        "lookup-bad": ["lookup"], "lookup-bad-amw": ["lookup", "x", "--allow-missing-weights"],
        "lookup-bad-t": ["lookup", "x", "-t", "0"],
        "variants": ["variants"], "variants-json": ["variants", "--json"], "demo": ["demo"], "demo-json": ["demo", "--json"],
        "scale": ["scale"], "scale-json": ["scale", "--json", "--factor", "10"],
        "models-json": ["models", "--json"], "similar": ["similar", "cat", "-k", "3"],
        "similar-json": ["similar", "cat", "--json"],
        "explore-bad-host": ["explore", "--host", "0.0.0.0"], "explore-bad-stdin": ["explore", "-"],
        "explore-bad-filter": ["explore", SENT, "--transformer", gpt2, "--filter", "a-b"],
        "unknown": ["matrx"], "version-bad": ["--threads", "0", "matrix", "x"],
    }
    c.update(more)
    return c


def build_fixtures(fx: Path) -> None:
    sys.path[:0] = [str(ROOT / "tests")]
    fx.mkdir(parents=True, exist_ok=True)
    if not (fx / "gpt2" / "config.json").is_file():
        from _llama_fixtures import build_decoder
        from _transformer_fixtures import build_bert, build_gpt2

        build_gpt2(fx / "gpt2")
        build_decoder("llama", fx / "llama")
        build_bert(fx / "bert")
    lines = [{"clean": CLEAN, "corrupt": CORRUPT, "target": "at"},
             {"clean": "the dog sat on the mat and the cat", "corrupt": CLEAN, "target": "og"}]
    (fx / "pairs.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (fx / "corpus.txt").write_text("the cat sat on the mat\ntime flies like an arrow\nfruit flies like a banana\n"
                                   "she sells sea shells by the sea shore\n")
    (fx / "queries.txt").write_text("colour\nmake\ntop speed\n")
    (fx / "home").mkdir(exist_ok=True)


def run_case(args: list[str], fx: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100", "ATTN_HOME": str(fx / "home"),
           "NO_COLOR": "1", "TERM": "dumb"}
    env.pop("FORCE_COLOR", None)
    done = subprocess.run([sys.executable, "-m", "attncli", *args], capture_output=True, env=env, cwd=fx,
                          stdin=subprocess.DEVNULL, timeout=600)
    return {"stdout": done.stdout, "stderr": done.stderr, "code": done.returncode}


def record(out: Path, fx: Path, only: list[str], jobs: int) -> None:
    build_fixtures(fx)
    out.mkdir(parents=True, exist_ok=True)
    todo = {name: args for name, args in cases(fx).items() if not only or any(o in name for o in only)}
    with ThreadPoolExecutor(jobs) as pool:
        for name, result in zip(todo, pool.map(lambda a: run_case(a, fx), todo.values())):
            (out / f"{name}.out").write_bytes(result["stdout"])
            (out / f"{name}.err").write_bytes(result["stderr"])
            (out / f"{name}.code").write_text(f"{result['code']}\n")
            print(f"{result['code']} {name}", file=sys.stderr)
    if not only:
        (out / "cases.json").write_text(json.dumps(todo, indent=1))


def compare(a: Path, b: Path) -> int:
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    differ = 0
    for name in names:
        x = (a / name).read_bytes() if (a / name).exists() else b"<missing>\n"
        y = (b / name).read_bytes() if (b / name).exists() else b"<missing>\n"
        if x != y:
            differ += 1
            print(f"=== {name}")
            sys.stdout.writelines(difflib.unified_diff(x.decode(errors="replace").splitlines(True),
                                                       y.decode(errors="replace").splitlines(True), n=1))
    print(f"{differ} of {len(names)} files differ", file=sys.stderr)
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("out", type=Path)
    rec.add_argument("--fixtures", type=Path, default=Path("/tmp/attn_cli_fixtures"))
    rec.add_argument("--only", nargs="*", default=[], help="only the cases whose name holds one of these")
    rec.add_argument("--jobs", type=int, default=2)
    cmp = sub.add_parser("compare")
    cmp.add_argument("a", type=Path)
    cmp.add_argument("b", type=Path)
    ns = parser.parse_args()
    if ns.what == "record":
        record(ns.out, ns.fixtures, ns.only, ns.jobs)
        return 0
    return compare(ns.a, ns.b)


if __name__ == "__main__":
    raise SystemExit(main())
