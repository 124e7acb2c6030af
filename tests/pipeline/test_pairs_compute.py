"""``--pairs FILE`` (attncli/pipeline/pairs_compute.py): the mean over a file of prompt pairs equals a
plain loop over the pairs written here (each pair through the single-pair function, then
numpy's mean and standard error), to 1e-12, whether the pairs run in one process, in shards of
one or two pairs merged from their folder, in two worker processes, or killed after a shard and
resumed; damaged shards are named and computed again; pairs a grid over positions cannot average
are refused by their line. Built-in LM: ablate and patch; a tiny GPT-2: attribute and circuit."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest

from _stats_helpers import cli
from conftest import needed

from attncli.causal import grids
from attncli.causal.target import resolve
from attncli.errors import BadInput
from attncli.errors import RuntimeFailure
from attncli.pipeline.pairs_compute import PairsRequest as PairsRun, compute, load_pairs_model, merge_pairs


def compute_pairs(request: PairsRun, model) -> dict:
    return compute(request, model).document()
from attncli.tinylm.traced import load_builtin

BUILTIN_PAIRS = [  # the built-in LM's words: every clean/corrupt pair of 5 tokens
    ("the president of the united", "the president of the new", "states", "york"),
    ("the cat sat on the", "the dog sat on the", "table", "floor"),
    ("the man went to the", "the woman went to the", "church", "house"),
    ("she said that the old", "he said that the new", "man", "house"),
    ("in the middle of the", "at the end of the", "night", "day"),
]
TIGHT = 1e-12


def write_pairs(path: Path, rows, *, blank_after: int | None = None) -> Path:
    lines = []
    for i, (clean, corrupt, target, contrast) in enumerate(rows):
        obj = {"clean": clean, "corrupt": corrupt, "target": target}
        if contrast is not None:
            obj["contrast"] = contrast
        lines.append(json.dumps(obj))
        if blank_after == i:
            lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def brute_force(model, rows, one) -> dict[str, np.ndarray]:
    """{name: (mean, standard error)} over ``rows`` of ``one(model, clean_ids, corrupt_ids, target)``'s values."""
    values: dict[str, list] = {}
    for clean, corrupt, target, contrast in rows:
        c, k = model.encode(clean).ids, model.encode(corrupt).ids
        t = resolve(model, c, target=target, contrast=contrast)
        for name, v in one(model, c, k, t).items():
            values.setdefault(name, []).append(np.asarray(v, dtype=np.float64))
    return {name: (np.mean(vs, axis=0), np.std(vs, axis=0, ddof=1) / np.sqrt(len(vs))) for name, vs in values.items()}


def moved(grid, clean, corrupt) -> dict:
    """A patch or attribute pair's restored fractions, the same cells as the change patching makes
    (fraction x (clean - corrupt)), and its two metrics."""
    return {"grid": grid, "effect": np.asarray(grid) * (clean - corrupt), "clean": clean, "corrupt": corrupt}


def assert_equal_to(doc, expected, n):
    assert doc["pairs"] == n
    for name, (mean, err) in expected.items():
        got = np.asarray(doc["mean"][name])
        assert got.shape == mean.shape, name
        assert np.abs(got - mean).max() <= TIGHT * max(1.0, np.abs(mean).max()), name
        assert np.abs(np.asarray(doc["stderr"][name]) - err).max() <= 1e-9 * max(1.0, err.max()), name
    if "effect" in expected:  # the grid: the mean change over the mean difference, not the mean of fractions
        want = expected["effect"][0] / (expected["clean"][0] - expected["corrupt"][0])
        assert np.abs(np.asarray(doc["grid"]) - want).max() <= TIGHT * max(1.0, np.abs(want).max())


def _ablate(model, c, k, t):
    g = grids.ablate(model, c, t)
    return {"grid": g.values, "clean": g.clean}


def _patch(site):
    def one(model, c, k, t):
        g = grids.patch(model, c, k, t, where=site)
        return moved(g.values, g.clean, g.corrupt)
    return one


BUILTIN_CASES = [("ablate", "resid", _ablate), ("patch", "head", _patch("head")), ("patch", "resid", _patch("resid")),
                 ("patch", "mlp", _patch("mlp"))]


@pytest.fixture(scope="module")
def builtin():
    return load_builtin()


@pytest.mark.parametrize("kind,site,one", BUILTIN_CASES, ids=[f"{k}-{s}" for k, s, _ in BUILTIN_CASES])
def test_one_process_equals_merged_shards_equals_a_loop_over_the_pairs(builtin, kind, site, one, tmp_path):
    path = write_pairs(tmp_path / "pairs.jsonl", BUILTIN_PAIRS, blank_after=1)
    expected = brute_force(builtin, BUILTIN_PAIRS, one)
    whole = compute_pairs(PairsRun(path, kind, site=site), builtin)
    assert whole["shards"] == 1 and whole["computed"] == 1
    assert_equal_to(whole, expected, len(BUILTIN_PAIRS))
    out = tmp_path / "shards"
    sharded = compute_pairs(PairsRun(path, kind, site=site, out=out, shard_pairs=2), builtin)
    assert sharded["shards"] == 3 and sharded["ranges"] == [[0, 2], [2, 4], [4, 5]]
    assert_equal_to(sharded, expected, len(BUILTIN_PAIRS))
    merged = merge_pairs([out])
    assert merged.sums.count == len(BUILTIN_PAIRS) and merged.ranges == [(0, 2), (2, 4), (4, 5)]
    for name, (mean, _) in expected.items():
        assert np.abs(merged.sums.mean(name) - mean).max() <= TIGHT * max(1.0, np.abs(mean).max())
    # one shard holds its own pairs' sums, not the run's so far
    shard = json.loads((out / "shard-000000000002-000000000004.json").read_text())
    part = brute_force(builtin, BUILTIN_PAIRS[2:4], one)
    assert shard["count"] == 2
    assert np.abs(np.asarray(shard["sums"]["grid"]) / 2 - part["grid"][0]).max() <= TIGHT * 10


def test_the_command_line_prints_the_mean_and_two_workers_give_it(builtin, tmp_path):
    path = write_pairs(tmp_path / "pairs.jsonl", BUILTIN_PAIRS)
    expected = brute_force(builtin, BUILTIN_PAIRS, _patch("head"))
    doc = cli(["patch", "--pairs", path, "--site", "head", "--json"])
    assert_equal_to(doc, expected, 5)
    assert doc["metric"] == "logit_diff" and doc["columns"] == "heads" and doc["ran"] == {"on": "here", "workers": 1}
    two = cli(["patch", "--pairs", path, "--site", "head", "--json", "--workers", 2, "--shard-pairs", 2])
    assert two["ran"] == {"on": "processes", "workers": 2} and two["shards"] == 3
    assert_equal_to(two, expected, 5)
    table = cli(["patch", "--pairs", path, "--site", "head"]).stdout
    fraction = expected["effect"][0] / (expected["clean"][0] - expected["corrupt"][0])  # (L, h)
    assert "mean over 5 pairs" in table and f"{fraction[0, 1]:.3f}" in table


def test_killed_after_a_shard_and_resumed_equals_an_uninterrupted_run(builtin, tmp_path):
    from _pause import PYTHON, paused

    path = write_pairs(tmp_path / "pairs.jsonl", BUILTIN_PAIRS)
    expected = brute_force(builtin, BUILTIN_PAIRS, _ablate)
    out = tmp_path / "run"
    argv = [PYTHON, "-m", "attncli", "ablate", "--pairs", str(path), "--out", str(out), "--shard-pairs", "2", "--json"]
    with paused(argv, tmp_path / "home", "pairs-shard-written") as proc:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert [p.name for p in out.iterdir()] == ["shard-000000000000-000000000002.json"]
    resumed = cli(["ablate", "--pairs", path, "--out", out, "--shard-pairs", 2, "--json"])
    assert resumed["computed"] == 2 and resumed["shards"] == 3
    assert_equal_to(resumed, expected, 5)
    again = cli(["ablate", "--pairs", path, "--out", out, "--shard-pairs", 2, "--json"])
    assert again["computed"] == 0
    assert_equal_to(again, expected, 5)


def test_a_damaged_shard_is_named_and_computed_again(builtin, tmp_path):
    path = write_pairs(tmp_path / "pairs.jsonl", BUILTIN_PAIRS)
    expected = brute_force(builtin, BUILTIN_PAIRS, _ablate)
    out = tmp_path / "run"
    cli(["ablate", "--pairs", path, "--out", out, "--shard-pairs", 2])
    victim = out / "shard-000000000002-000000000004.json"
    original = victim.read_text()
    doc = json.loads(original)
    doc["sums"]["grid"][0][0] += 1.0  # a lie the checksum catches
    victim.write_text(json.dumps(doc))
    result = cli(["ablate", "--pairs", path, "--out", out, "--shard-pairs", 2])
    assert "damaged" in result.stderr and victim.name in "".join(result.stderr.split())
    assert json.loads(victim.read_text()) == json.loads(original)  # computed again
    again = cli(["ablate", "--pairs", path, "--out", out, "--shard-pairs", 2, "--json"])
    assert again["computed"] == 0
    assert_equal_to(again, expected, 5)
    victim.write_text(json.dumps(doc))
    with pytest.raises(RuntimeFailure, match=f"{victim.name} is damaged.*skip-damaged"):
        merge_pairs([out])  # a merge names it and stops: it would leave its pairs out
    skipped = merge_pairs([out], skip_damaged=True)  # asked: named, left out and counted
    assert skipped.sums.count == 3 and len(skipped.skipped) == 1 and victim.name in skipped.skipped[0]
    assert skipped.damaged == 1
    # shards of another job in the folder: refused, not mixed in
    r = cli(["patch", "--pairs", path, "--site", "head", "--out", out, "--shard-pairs", 2], code=2)
    assert "another run" in r.stderr


def test_a_grid_over_positions_refuses_another_length_by_its_line(builtin, tmp_path):
    rows = BUILTIN_PAIRS[:2] + [("the cat sat on the big", "the dog sat on the big", "table", "floor")]
    path = write_pairs(tmp_path / "pairs.jsonl", rows)
    with pytest.raises(BadInput, match=r"line 3 has 6 tokens, line 1 has 5"):
        compute_pairs(PairsRun(path, "patch", site="resid"), builtin)
    doc = compute_pairs(PairsRun(path, "patch", site="head"), builtin)  # a grid over heads takes any length
    assert_equal_to(doc, brute_force(builtin, rows, _patch("head")), 3)
    bad = write_pairs(tmp_path / "bad.jsonl", BUILTIN_PAIRS[:1] + [("the cat sat", "the dog sat on", "table", "floor")])
    with pytest.raises(BadInput, match=r"--pairs line 2: the clean and corrupted texts must have the same number"):
        compute_pairs(PairsRun(bad, "patch", site="head"), builtin)
    same = write_pairs(tmp_path / "same.jsonl", BUILTIN_PAIRS[:1] + [("the cat sat on the", "the cat sat on the",
                                                                        "table", "floor")])
    with pytest.raises(BadInput, match=r"--pairs line 2: the clean and corrupted texts give the same"):
        compute_pairs(PairsRun(same, "patch", site="head"), builtin)


# --- attribute and circuit: a checkpoint with gradients -------------------------------------------

WORDS = "the cat sat on mat a dog and she sells sea shells time flies like an arrow".split()


@pytest.fixture(scope="module")
def gpt2(tiny_gpt2_dir):
    needed("tokenizers")
    return load_pairs_model(PairsRun("-", "attribute", transformer=str(tiny_gpt2_dir)).spec)


def gpt2_pairs(model, n=4):
    """``n`` pairs of 6-word texts whose clean and corrupted tokenizations have one length, with
    the model's own tokens as targets."""
    rng = np.random.default_rng(0)
    rows, length = [], None
    while len(rows) < n:
        words = list(rng.choice(WORDS, 6))
        other = words[:2] + [str(rng.choice(WORDS))] + words[3:]
        clean, corrupt = " ".join(words), " ".join(other)
        c, k = model.encode(clean).ids, model.encode(corrupt).ids
        if len(c) != len(k) or c == k or (length is not None and len(c) != length):
            continue
        length = len(c)
        target, contrast = model.token_strings([int(rng.integers(10, 200)), int(rng.integers(10, 200))])
        if target != contrast and model.vocab_id(target) is not None and model.vocab_id(contrast) is not None:
            rows.append((clean, corrupt, target, contrast))
    return rows


@pytest.mark.parametrize("site", ["resid", "head", "key"])
def test_attribute_pairs_equal_a_loop_and_merged_shards(gpt2, tiny_gpt2_dir, site, tmp_path):
    from attncli.causal.attribution import attribute

    rows = gpt2_pairs(gpt2)
    path = write_pairs(tmp_path / "pairs.jsonl", rows)

    def one(model, c, k, t):
        a = attribute(model, c, k, t, where=site)
        return moved(a.values, a.clean, a.corrupt)

    expected = brute_force(gpt2, rows, one)
    whole = compute_pairs(PairsRun(path, "attribute", site=site, transformer=str(tiny_gpt2_dir)), gpt2)
    assert_equal_to(whole, expected, len(rows))
    out = tmp_path / "out"
    compute_pairs(PairsRun(path, "attribute", site=site, transformer=str(tiny_gpt2_dir), out=out, shard_pairs=1), gpt2)
    merged = merge_pairs([out])
    assert merged.sums.count == len(rows) and len(merged.ranges) == len(rows)
    assert np.abs(merged.sums.mean("grid") - expected["grid"][0]).max() <= TIGHT * max(1, np.abs(expected["grid"][0]).max())


def test_circuit_pairs_average_the_edge_scores(gpt2, tiny_gpt2_dir, tmp_path):
    from attncli.causal.circuit import edge_scores

    rows = gpt2_pairs(gpt2, 3)
    path = write_pairs(tmp_path / "pairs.jsonl", rows)

    def one(model, c, k, t):
        scores, clean, corrupt = edge_scores(model, c, k, t)
        return {"scores": scores, "clean": float(t.metric(clean.logits(t.position))),
                "corrupt": float(t.metric(corrupt.logits(t.position)))}

    expected = brute_force(gpt2, rows, one)
    doc = cli(["circuit", "--pairs", path, "--transformer", tiny_gpt2_dir, "--json", "--shard-pairs", 2])
    assert_equal_to(doc, expected, 3)
    mean = expected["scores"][0]
    top = doc["top"][0]
    assert abs(top["mean"]) == pytest.approx(np.abs(mean).max(), abs=1e-12) and doc["edges"][0] == top
    # the circuit over the pairs: the core's search on the same pairs, its keys those of attn circuit
    from attncli.hf.methods.edges import down_names, up_names
    from attncli.causal.pairs_circuit import find_pairs_circuit

    items = []
    for clean, corrupt, target, contrast in rows:
        c, k = gpt2.encode(clean).ids, gpt2.encode(corrupt).ids
        items.append((c, k, resolve(gpt2, c, target=target, contrast=contrast)))
    for f in (0.9, 0.5):
        got = doc if f == 0.9 else cli(["circuit", "--pairs", path, "--transformer", tiny_gpt2_dir, "--json",
                                        "--faithfulness", f])
        found = find_pairs_circuit(gpt2, items, mean, expected["clean"][0], expected["corrupt"][0], faithfulness=f)
        up, down = up_names(gpt2.layers, gpt2.heads), down_names(gpt2.layers, gpt2.heads)
        assert [(e["from"], e["to"] + ("" if e["input"] in ("mlp", "logits") else "." + e["input"]))
                for e in got["edges"]] == [(up[u], down[v]) for u, v in found.kept]
        assert got["faithfulness"] == pytest.approx(found.faithfulness, abs=1e-12) and got["faithfulness"] >= f
        assert got["faithfulness_asked"] == f and got["search_steps"] == found.checks
        assert got["checks"] == found.checks * len(rows)  # edge-patched passes, as attn circuit's checks
    table = " ".join(cli(["circuit", "--pairs", path, "--transformer", tiny_gpt2_dir]).stdout.split())  # wrapped anywhere
    assert f"{len(doc['edges'])} of {doc['edges_total']:,} edges" in table and "faithfulness" in table


def test_a_merge_of_folders_counts_a_repeated_shard_once(builtin, tmp_path):
    path = write_pairs(tmp_path / "pairs.jsonl", BUILTIN_PAIRS)
    expected = brute_force(builtin, BUILTIN_PAIRS, _ablate)
    a, b = tmp_path / "a", tmp_path / "b"
    compute_pairs(PairsRun(path, "ablate", out=a, shard_pairs=2), builtin)
    b.mkdir()
    name = "shard-000000000002-000000000004.json"
    (b / name).write_text((a / name).read_text())  # the same pairs computed on a second machine
    merged = merge_pairs([a, b])
    assert merged.sums.count == 5 and merged.ranges == [(0, 2), (2, 4), (4, 5)]
    assert np.abs(merged.sums.mean("grid") - expected["grid"][0]).max() <= TIGHT
    with pytest.raises(BadInput, match="no shard to merge"):
        merge_pairs([tmp_path / "pairs.jsonl"][:0])


def test_attribute_pairs_on_the_command_line_take_no_qk_fix(gpt2, tiny_gpt2_dir, tmp_path):
    from attncli.causal.attribution import attribute

    rows = gpt2_pairs(gpt2, 3)
    path = write_pairs(tmp_path / "pairs.jsonl", rows)

    def one(model, c, k, t):
        a = attribute(model, c, k, t, where="head", qk_fix=False)
        return moved(a.values, a.clean, a.corrupt)

    doc = cli(["attribute", "--pairs", path, "--transformer", tiny_gpt2_dir, "--site", "head", "--no-qk-fix", "--json"])
    assert doc["qk_fix"] is False and doc["site"] == "head" and doc["columns"] == "heads"
    assert_equal_to(doc, brute_force(gpt2, rows, one), 3)


@pytest.mark.parametrize("signum, code, said", [(signal.SIGINT, 130, "interrupted"),
                                                (signal.SIGTERM, 143, "terminated by SIGTERM")])
def test_attribute_pairs_stopped_by_a_signal_keep_their_shards_and_resume(gpt2, tiny_gpt2_dir, tmp_path, signum,
                                                                         code, said):
    """Ctrl-C (or SIGTERM) in an attn attribute --pairs run after its first shard: one line, the
    exit code of the signal, the written shard kept whole (no .tmp left), and the run started
    again computes only the rest and equals a loop over the pairs."""
    from _pause import PYTHON, paused

    from attncli.causal.attribution import attribute

    rows = gpt2_pairs(gpt2)
    path = write_pairs(tmp_path / "pairs.jsonl", rows)
    out = tmp_path / "run"
    argv = [PYTHON, "-m", "attncli", "attribute", "--pairs", str(path), "--transformer", str(tiny_gpt2_dir),
            "--out", str(out), "--shard-pairs", "1", "--json"]
    with paused(argv, tmp_path / "home", "pairs-shard-written") as proc:
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    last = stderr.strip().splitlines()[-1]
    assert proc.returncode == code and stdout == "", (proc.returncode, stderr[-600:])
    assert last == f"{said}; the finished shards are kept in {out}: the same command resumes from them", last
    assert "Traceback" not in stderr
    assert [p.name for p in out.iterdir()] == ["shard-000000000000-000000000001.json"]
    resumed = cli(["attribute", "--pairs", path, "--transformer", tiny_gpt2_dir, "--out", out, "--shard-pairs", 1,
                   "--json"])
    assert resumed["computed"] == len(rows) - 1 and resumed["shards"] == len(rows)

    def one(model, c, k, t):
        a = attribute(model, c, k, t, where="resid")
        return moved(a.values, a.clean, a.corrupt)

    assert_equal_to(resumed, brute_force(gpt2, rows, one), len(rows))


def test_the_fraction_over_pairs_whose_differences_cancel_is_refused():
    """Two pairs, clean - corrupt +1 and -1: the mean difference is 0 and no fraction of it is defined."""
    from attncli.causal.pair_sums import PairSums, fractions
    from attncli.errors import BadInput
    from attncli.pipeline.pairs_document import restored

    sums = PairSums()
    sums.add(fractions(np.array([[0.5]]), 2.0, 1.0))
    sums.add(fractions(np.array([[0.25]]), 1.0, 2.0))
    with pytest.raises(BadInput, match="mean clean and corrupted metrics are equal"):
        restored(sums)
    sums.add(fractions(np.array([[1.0]]), 3.0, 0.0))  # differences 1, -1, 3; changes 0.5, -0.25, 3
    assert restored(sums)[0, 0] == pytest.approx((0.5 - 0.25 + 3.0) / 3 / ((1 - 1 + 3) / 3), rel=1e-15)


def test_shards_of_other_definitions_are_refused_by_their_own_version(builtin, tmp_path):
    """A --pairs shard whose values are of another definitions version (an older attn's, checksum
    valid): a resume and a merge refuse it by name, whatever version attn stats' shards are at."""
    from attncli.pipeline.pairs_shards import PAIRS_VERSION
    from attncli.stats.accumulate import STATS_VERSION
    from attncli.stats.shards import checksum

    path = write_pairs(tmp_path / "pairs.jsonl", BUILTIN_PAIRS)
    out = tmp_path / "run"
    compute_pairs(PairsRun(path, "ablate", out=out, shard_pairs=2), builtin)
    assert compute_pairs(PairsRun(path, "ablate", out=out, shard_pairs=2), builtin)["computed"] == 0
    shard = out / "shard-000000000000-000000000002.json"
    doc = json.loads(shard.read_text())
    assert doc["stats_version"] == PAIRS_VERSION
    doc["stats_version"] = PAIRS_VERSION - 1 if PAIRS_VERSION - 1 != STATS_VERSION else PAIRS_VERSION + 1
    doc["checksum"] = checksum(doc)
    shard.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=f"definitions version {doc['stats_version']}, these are {PAIRS_VERSION}"):
        compute_pairs(PairsRun(path, "ablate", out=out, shard_pairs=2), builtin)
    with pytest.raises(BadInput, match="definitions version"):
        merge_pairs([out])
