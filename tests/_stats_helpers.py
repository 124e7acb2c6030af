"""What the ``attn stats`` tests share: a CLI call, a corpus with repeated words, and the
statistics counted plainly, query by query, from a model's attention (the reference); the local
Ray cluster the --ray tests of attn stats and --pairs start."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np

WORDS = "the cat sat on mat a dog and she sells sea shells time flies like an arrow".split()


def corpus_lines(n: int, seed: int = 0) -> list[str]:
    """``n`` short texts of 2-12 words from a small vocabulary (so words repeat within a text)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 12))) for _ in range(n)]


def write_corpus(path: Path, n: int, seed: int = 0) -> Path:
    path.write_text("\n".join(corpus_lines(n, seed)) + "\n", encoding="utf-8")
    return path


def cli(args: list[str], code: int = 0):
    """``attn ARGS`` in-process; asserts the exit code; returns the result (JSON parsed when asked)."""
    from typer.testing import CliRunner

    import attncli.cli.common as cli_app
    from attncli.cli.main import app

    cli_app._consoles.clear()
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == code, (result.exit_code, result.stdout[-2000:], result.stderr[-2000:])
    if code == 0 and "--json" in args:
        return json.loads(result.stdout)
    return result


def said(result, text: str) -> bool:
    """``text`` is on stderr, whitespace aside (rich wraps long lines, even inside a path)."""
    return "".join(text.split()) in "".join(result.stderr.split())


def brute_force(model, texts: list[str], *, top_k: int = 5, probe_every: int = 4, probe_length: int = 20,
                seed: int = 0) -> dict:
    """Every statistic's per-head mean and count, and each head's top examples, counted one query
    at a time from ``model.attentions`` (the probes from ``logits_and_attentions``)."""
    from attncli.stats.accumulate import Settings, probe_ids

    L, H, causal = model.layers, model.heads, bool(model.is_decoder)
    names = ("sink", "entropy", "distance", "previous_token", "duplicate_token", "induction")
    sums = {n: np.zeros((L, H)) for n in names}
    counts = dict.fromkeys(names, 0)
    cands: dict = {n: [[[] for _ in range(H)] for _ in range(L)] for n in ("sink", "previous_token", "duplicate_token")}
    for t, text in enumerate(texts):
        enc = model.encode(text, truncate=True)
        A = model.attentions(enc)  # (L, H, T, T)
        T, ids = len(enc.ids), enc.ids
        for i in range(T):
            keys = list(range(i + 1)) if causal else list(range(T))
            if enc.special[i] or len(keys) < 2:
                continue
            row = A[:, :, i, :]  # (L, H, T)
            values = {"sink": row[:, :, 0], "previous_token": row[:, :, i - 1] if i >= 1 else np.zeros((L, H))}
            p = row[:, :, keys]
            values["entropy"] = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0).sum(-1) / np.log(len(keys))
            values["distance"] = sum(row[:, :, j] * abs(i - j) for j in keys)
            copies = [j for j in keys if j != i and ids[j] == ids[i]]
            if copies:
                values["duplicate_token"] = sum(row[:, :, j] for j in copies)
            for name, v in values.items():
                sums[name] += v
                counts[name] += 1
                if name in cands:
                    for l in range(L):
                        for h in range(H):
                            cands[name][l][h].append((float(v[l, h]), t, i))
        if causal and t % probe_every == 0:
            a = model.encode("a")
            prefix = []
            for i, special in zip(a.ids, a.special):  # the model's leading special tokens (BOS)
                if not special:
                    break
                prefix.append(i)
            exclude = set(prefix) | {model.config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")
                                     if isinstance(model.config.get(k), int)}
            settings = Settings(top_k, probe_every, probe_length, seed)
            probe = probe_ids(t, settings, prefix, model.config["vocab_size"], exclude, model.max_positions)
            _, P = model.logits_and_attentions(probe)
            for i in range(1, len(probe)):
                after = [j for j in range(1, i + 1) if probe[j - 1] == probe[i]]
                if after:
                    sums["induction"] += sum(P[:, :, i, j] for j in after)
                    counts["induction"] += 1
    top = {n: [[sorted(c, key=lambda x: (-x[0], x[1], x[2]))[:top_k] for c in per_l] for per_l in cands[n]]
           for n in cands}
    return {"means": {n: (sums[n] / counts[n] if counts[n] else None) for n in names}, "counts": counts, "top": top}


def assert_same_stats(doc: dict, ref: dict, tol: float = 1e-12) -> None:
    """A result document (attn stats --json) equals the brute-force reference."""
    for name, stat in doc["stats"].items():
        assert stat["count"] == ref["counts"][name], name
        if ref["means"][name] is None:
            assert stat["mean"] is None, name
        else:
            np.testing.assert_allclose(np.asarray(stat["mean"]), ref["means"][name], rtol=0, atol=tol, err_msg=name)
    for name, heads in doc["top"].items():
        for entry in heads:
            want = ref["top"][name][entry["layer"]][entry["head"]]
            got = [(e["score"], e["text"], e["position"]) for e in entry["examples"]]
            assert len(got) == len(want), (name, entry["layer"], entry["head"])
            np.testing.assert_allclose([g[0] for g in got], [w[0] for w in want], rtol=0, atol=tol)
            if name != "duplicate_token":  # one key each: the same float, so the same order
                assert [g[1:] for g in got] == [w[1:] for w in want], (name, entry["layer"], entry["head"])


def assert_docs_equal(a: dict, b: dict, tol: float = 1e-12) -> None:
    """Two result documents hold the same statistics (to ``tol``) and the same top examples."""
    for key in ("texts", "texts_scored", "tokens", "probes"):
        assert a[key] == b[key], key
    for name in a["stats"]:
        assert a["stats"][name]["count"] == b["stats"][name]["count"], name
        if a["stats"][name]["mean"] is None:
            assert b["stats"][name]["mean"] is None
            continue
        np.testing.assert_allclose(np.asarray(a["stats"][name]["mean"]), np.asarray(b["stats"][name]["mean"]),
                                   rtol=0, atol=tol, err_msg=name)
    for name in a["top"]:
        for x, y in zip(a["top"][name], b["top"][name]):
            assert [(e["text"], e["position"], e["context"]) for e in x["examples"]] == \
                   [(e["text"], e["position"], e["context"]) for e in y["examples"]], name
            np.testing.assert_allclose([e["score"] for e in x["examples"]], [e["score"] for e in y["examples"]],
                                       rtol=0, atol=tol)


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def local_ray_cluster():
    """A module fixture's body: a local Ray cluster of 2 CPUs owned by this test process, its
    workers importing this attn (PYTHONPATH, restored after); yields the address attn joins."""
    import ray

    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([REPO, before or ""])  # the cluster's workers import this attn
    try:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before
