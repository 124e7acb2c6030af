"""attn generate: streamed rows == one pass over the final text, greedy == torch's argmax,
seeds reproduce across processes, strict JSON, no torch import, bad input exits 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import needed

from typer.testing import CliRunner

from _attention_fixtures import make_random_attention, make_vectors, widest
from _tolerance import f32_close
from attncli.cli.main import app
from attncli.generate import sampling
from attncli.generate.decoders import load_decoder
from attncli.generate.run import MAX_NEW, Settings, document, generate
from attncli.generate.step_view import rollout
from attncli.tinylm import model as trained
from _probe import imported_by

runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


def strict_json(text: str):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def reference_view(att, tokens, layer=None, head=None, use_rollout=False) -> np.ndarray:
    """(T, T) by an independent path: the token strings through att.attention / att.trace,
    and the rollout written out as in the paper: 0.5 W + 0.5 I per layer, multiplied through."""
    if use_rollout:
        R = np.eye(len(tokens))
        for tr in att.trace(tokens):
            R = (0.5 * tr.weights.astype(np.float64).mean(0) + 0.5 * np.eye(len(tokens))) @ R
        return R
    layer = att.layers - 1 if layer is None else layer
    w = att.attention(tokens, layer, head)
    return w if head is not None else w.mean(0)


# --- the streamed rows are the rows of one pass over the finished text --------------------------


@pytest.mark.parametrize("opts", [{}, {"layer": 0, "head": 2}, {"rollout": True}], ids=["mean", "head", "rollout"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_streamed_rows_equal_one_pass_over_the_final_text(opts, seed):
    make_random_attention("rand", layers=3, heads=4)
    att = trained.load_trained("rand")
    streamed = []
    gen = generate(load_decoder("rand"), "the old man saw", Settings(n=8, seed=seed, top_k=0, **opts),
                   on_step=lambda g, s: streamed.append((len(g.tokens), s)))
    assert gen.steps and len(streamed) == len(gen.steps)
    ref = reference_view(att, gen.tokens, opts.get("layer"), opts.get("head"), opts.get("rollout", False))
    assert np.all(np.triu(ref, 1) == 0)
    # float32 passes over T and over q + 1 tokens: weights per element (a rollout multiplies them through)
    size = dict(depth=opts.get("layer", att.layers - 1) + 1, length=widest(att.config), per_element="rollout" not in opts)
    f32_close(gen.weights, ref, **size)
    for k, (seen, step) in enumerate(streamed):
        assert step.query == 3 + k  # the prompt has 4 tokens: step k is chosen by position 3 + k
        assert step.attention.shape == (step.query + 1,)
        f32_close(step.attention, ref[step.query, : step.query + 1], **size)
        np.testing.assert_allclose(step.attention.sum(), 1.0, atol=1e-9)
        assert seen == step.query + 1 + (0 if step.eos else 1)  # the step arrives as soon as it is made
    # not trivial: the rows are far from uniform
    assert max(float(s.attention.max()) for s in gen.steps) > 1.5 / len(gen.tokens)


def test_shipped_model_rows_equal_one_pass():
    att = trained.load_trained("default")
    gen = generate(load_decoder(), "the old man saw the", Settings(n=12, seed=5, ignore_eos=True))
    assert len(gen.tokens) == 5 + 12 and gen.stopped == "length"
    ref = att.attention(gen.tokens, att.layers - 1).mean(0)
    size = dict(depth=att.layers, length=widest(att.config), per_element=True)  # float32 passes, weights
    f32_close(gen.weights, ref, **size)
    for s in gen.steps:
        f32_close(s.attention, ref[s.query, : s.query + 1], **size)


def test_cli_json_rows_are_rows_of_its_weights():
    result = run("generate", "the cat sat", "-n", "10", "--seed", "3", "--json")
    assert result.exit_code == 0, result.output
    doc = strict_json(result.stdout)
    W = np.array(doc["weights"])
    T = len(doc["tokens"])
    assert W.shape == (T, T)
    att = trained.load_trained("default")
    size = dict(depth=att.layers, length=widest(att.config), per_element=True)  # weights, printed in full
    for s in doc["steps"]:
        q = s["query"]
        f32_close(s["attention"], W[q, : q + 1], **size)  # float32 passes of T and q + 1 tokens
    f32_close(W, att.attention(doc["tokens"], att.layers - 1).mean(0), **size)


# --- greedy is torch's argmax; probabilities are torch's softmax -----------------------------------


def _torch_logits(att, tokens) -> np.ndarray:
    torch = needed("torch")
    from attncli.tinylm import torch_model

    table = trained.input_vectors(att.vectors, tokens)  # (T, d)
    model = torch_model.model_from_weights(table, att.config, att.w)
    with torch.no_grad():
        logits, _ = model(torch.arange(len(tokens))[None, :], need_weights=True)
    return logits[0].double().numpy()  # (T, V)


@pytest.mark.parametrize("model", ["rand", "default"])
def test_greedy_is_argmax_of_torch_logits(model):
    if model == "rand":
        make_random_attention("rand", layers=2, heads=4)
    att = trained.load_trained(model)
    dec = load_decoder(model)
    prompt = "the cat sat on" if model == "rand" else "the cat"
    gen = generate(dec, prompt, Settings(n=10, greedy=True))
    final = gen.tokens + ([] if gen.stopped == "length" else [])
    logits = _torch_logits(att, final)
    unk = dec.unk
    raw_argmax_was_unk = False
    for s in gen.steps:
        z = logits[s.query]
        allowed = z.copy()
        allowed[unk] = -np.inf
        assert s.id == int(np.argmax(allowed))
        raw_argmax_was_unk |= int(np.argmax(z)) == unk
        if int(np.argmax(z)) != unk:
            assert s.id == int(np.argmax(z))
        p = np.exp(z - z.max())
        p /= p.sum()
        top = np.argsort(-p, kind="stable")[: len(s.candidates)]
        assert [tok for tok, _ in s.candidates] == [dec.token(int(i)) for i in top]
        # probabilities from float32 logits (attn's and torch's), per element: the chosen one and the candidates
        f32_close([s.prob] + [cp for _, cp in s.candidates], np.append(p[s.id], p[top]), depth=att.layers + 1,
                  length=widest(att.config), per_element=True)
    if model == "default":
        assert raw_argmax_was_unk  # the <unk> path is exercised: the shipped LM often ranks it first
        assert gen.tokens[:4] == ["the", "cat", "was", "a"]


# --- reproducible -----------------------------------------------------------------------------------


def _attn(args, home) -> subprocess.CompletedProcess:
    env = dict(os.environ, ATTN_HOME=str(home), PYTHONHASHSEED="random")
    code = "import sys\nfrom attncli.cli.main import main\nsys.argv = ['attn'] + sys.argv[1:]\nmain()\n"
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120)


def test_a_seed_gives_the_same_text_and_numbers_across_processes(attn_home):
    args = ["generate", "the old man", "-n", "15", "--seed", "12345", "--temperature", "1.3", "--json"]
    a, b = _attn(args, attn_home), _attn(args, attn_home)
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout  # every token and every number
    other = _attn(["generate", "the old man", "-n", "15", "--seed", "54321", "--temperature", "1.3", "--json"], attn_home)
    assert strict_json(other.stdout)["tokens"] != strict_json(a.stdout)["tokens"]
    assert strict_json(a.stdout)["settings"]["seed"] == 12345


def test_without_a_seed_the_seed_used_is_reported_and_reproduces():
    first = strict_json(run("generate", "the cat", "-n", "8", "--json").stdout)
    seed = first["settings"]["seed"]
    assert isinstance(seed, int)
    again = strict_json(run("generate", "the cat", "-n", "8", "--seed", str(seed), "--json").stdout)
    assert again["tokens"] == first["tokens"] and again["steps"] == first["steps"]


def test_no_torch_import_on_the_built_in_path(attn_home):
    modules, out = imported_by(["generate", "the cat", "-n", "20", "--json"])
    bad = [m for m in ("torch", "transformers", "gensim", "nltk") if m in modules]
    assert not bad, bad
    assert strict_json(out)["steps"]


# --- JSON ---------------------------------------------------------------------------------------------


def test_json_document():
    result = run("generate", "The cat!", "-n", "12", "--seed", "0", "--top-k", "20", "--json")
    assert result.exit_code == 0, result.output
    doc = strict_json(result.stdout)
    for key in ("prompt", "tokens", "generated", "steps", "weights", "model", "settings", "view", "prompt_mapping", "stopped"):
        assert key in doc
    assert doc["prompt"] == "The cat!" and doc["tokens"][:2] == ["the", "cat"]
    assert doc["generated"] == list(range(2, len(doc["tokens"])))
    assert doc["text"] == " ".join(doc["tokens"]) and doc["generated_text"] == " ".join(doc["tokens"][2:])
    assert len(doc["steps"]) == len(doc["generated"]) + (doc["stopped"] == "eos")
    assert doc["settings"] == {"n": 12, "greedy": False, "temperature": 1.0, "top_k": 20, "seed": 0, "ignore_eos": False}
    for k, s in enumerate(doc["steps"]):
        assert 0 < s["prob"] <= 1 and 0 < s["sample_prob"] <= 1
        assert s["sample_prob"] >= s["prob"] - 1e-12  # the top-k cut only moves mass onto the kept tokens
        probs = [c["prob"] for c in s["candidates"]]
        assert len(probs) == 5 and probs == sorted(probs, reverse=True)
        if s["eos"]:
            assert s["token"] == "</s>" and s["index"] is None and k == len(doc["steps"]) - 1
        else:
            assert doc["tokens"][s["index"]] == s["token"] and s["index"] == doc["generated"][k]
    W = np.array(doc["weights"])
    np.testing.assert_allclose(W.sum(1), 1.0, atol=1e-9)
    assert np.all(np.triu(W, 1) == 0)


def test_jsonl_streams_the_same_steps():
    whole = strict_json(run("generate", "the cat", "-n", "10", "--seed", "4", "--json").stdout)
    result = run("generate", "the cat", "-n", "10", "--seed", "4", "--jsonl")
    assert result.exit_code == 0, result.output
    lines = [strict_json(line) for line in result.stdout.splitlines()]
    assert [r["type"] for r in lines] == ["header"] + ["step"] * len(whole["steps"]) + ["end"]
    assert [{k: v for k, v in r.items() if k != "type"} for r in lines[1:-1]] == whole["steps"]
    assert lines[-1]["tokens"] == whole["tokens"] and lines[-1]["weights"] == whole["weights"]
    assert lines[0]["prompt_tokens"] == ["the", "cat"]


def test_ignore_eos_writes_exactly_n():
    doc = strict_json(run("generate", "the cat", "-n", "30", "--seed", "1", "--ignore-eos", "--json").stdout)
    assert len(doc["generated"]) == 30 and doc["stopped"] == "length"
    assert all(s["token"] != "</s>" for s in doc["steps"])


def test_the_model_may_end_the_text():
    """Greedy from 'the zyxqv cat sat' ends with </s> on the shipped LM: the end step is recorded."""
    doc = strict_json(run("generate", "the zyxqv cat sat", "-n", "20", "--greedy", "--json").stdout)
    assert doc["stopped"] == "eos"
    last = doc["steps"][-1]
    assert last["eos"] and last["token"] == "</s>" and last["query"] == len(doc["tokens"]) - 1


# --- unknown prompt words ----------------------------------------------------------------------------


def test_unknown_prompt_words_are_mapped_and_said():
    vectors = trained.load_trained("default").vectors
    short = next(w for w in ("qx", "zq", "xj", "qj") if not vectors.can_embed(w))
    result = run("generate", f"the zyxqv {short} cat", "-n", "3", "--seed", "0", "--json")
    assert result.exit_code == 0, result.output
    mapping = {m["token"]: m for m in strict_json(result.stdout)["prompt_mapping"]["tokens"]}
    assert mapping["the"] == {"token": "the", "output": "the", "input": "vector"}
    assert mapping["zyxqv"] == {"token": "zyxqv", "output": "<unk>", "input": "subwords"}
    assert mapping[short] == {"token": short, "output": "<unk>", "input": "zeros"}
    assert "'zyxqv' is not one of the model's 5,002 output words" in result.stderr
    assert "zero vector" in result.stderr
    assert "<unk>" not in strict_json(result.stdout)["tokens"]


def test_unk_is_never_written():
    gen = generate(load_decoder(), "the zyxqv", Settings(n=40, seed=9, top_k=0, temperature=2.0, ignore_eos=True))
    assert "<unk>" not in gen.tokens[2:] and "</s>" not in gen.tokens
    assert any(s.candidates[0][0] == "<unk>" for s in gen.steps)  # although the model often ranks it first


# --- the view --------------------------------------------------------------------------------------


def test_terminal_view_marks_the_boundary():
    result = run("generate", "the cat", "-n", "3", "--greedy")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "+ was  p 0.106" in out and "cat attends to: the 0.66  cat 0.34" in out
    assert "rows 0-1 prompt, 2-4 (+) generated" in out
    lines = out.splitlines()
    cat_row = next(i for i, line in enumerate(lines) if line.startswith("1 cat"))
    assert set(lines[cat_row + 1].strip()) == {"─"} and lines[cat_row + 2].startswith("2 +was")


def test_top_lists_k_keys_per_row():
    result = run("generate", "the old man saw the", "-n", "4", "--greedy", "--top", "2")
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if " attends to: " in line]
    assert len(rows) == 4 + 9  # one per step, one per row of the final text
    for line in rows:
        cells = line.split(" attends to: ")[1].split("  ")
        assert 1 <= len(cells) <= 2
        weights = [float(c.rsplit(" ", 1)[1]) for c in cells]
        assert weights == sorted(weights, reverse=True)


# --- sampling and rollout, by hand --------------------------------------------------------------------


def test_sampling_distribution_by_hand():
    z = np.log(np.array([0.1, 0.2, 0.3, 0.4]))
    np.testing.assert_allclose(sampling.sampling_distribution(z), [0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(sampling.sampling_distribution(z, top_k=2), [0, 0, 3 / 7, 4 / 7])
    np.testing.assert_allclose(sampling.sampling_distribution(z, banned=(3,)), [1 / 6, 2 / 6, 3 / 6, 0])
    p = sampling.sampling_distribution(z, temperature=0.5)  # p^2, renormalised
    np.testing.assert_allclose(p, np.array([1, 4, 9, 16]) / 30)
    assert sampling.greedy_choice(z) == 3 and sampling.greedy_choice(z, banned=(3,)) == 2


def test_sample_follows_the_distribution_and_the_seed():
    p = np.array([0.5, 0.0, 0.2, 0.3, 0.0])
    rng = np.random.default_rng(0)
    draws = np.array([sampling.sample(p, rng) for _ in range(20000)])
    counts = np.bincount(draws, minlength=5) / 20000
    np.testing.assert_allclose(counts, p, atol=0.015)
    assert counts[1] == counts[4] == 0
    a = [sampling.sample(p, np.random.default_rng(7)) for _ in range(3)]
    assert len(set(a)) == 1


def test_rollout_by_hand():
    # one head per layer, two tokens: A = [[1, 0], [a, 1 - a]]
    a0, a1 = 0.2, 0.6
    l0 = np.array([[[1.0, 0.0], [a0, 1 - a0]]])
    l1 = np.array([[[1.0, 0.0], [a1, 1 - a1]]])
    # (A + I) / 2 per layer: [[1, 0], [a/2, 1 - a/2]]; row 1 of the product: b1 * 1 + (1 - b1) * b0
    b0, b1 = a0 / 2, a1 / 2
    R = rollout([l0, l1])
    np.testing.assert_allclose(R, [[1, 0], [b1 + (1 - b1) * b0, (1 - b1) * (1 - b0)]])


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("args,says", [
    (["", "-n", "5"], "prompt is empty"),
    (["   "], "prompt is empty"),
    (["!!! ???"], "no words"),
    (["the cat", "-n", "0"], f"between 1 and {MAX_NEW:,}"),
    (["the cat", "-n", "100000"], f"between 1 and {MAX_NEW:,}"),
    (["the cat", "-n", "79"], "-n can be at most 78"),
    (["the cat", "--temperature", "0"], "--greedy"),
    (["the cat", "--temperature", "-1"], "--greedy"),
    (["the cat", "--temperature", "nan"], "--temperature"),
    (["the cat", "--top-k", "-1"], "--top-k"),
    (["the cat", "--seed", "-3"], "--seed"),
    (["the cat", "--layer", "2"], "layers 0..1"),
    (["the cat", "--head", "4"], "heads 0..3"),
    (["the cat", "--rollout", "--layer", "0"], "leave out --layer"),
    (["the cat", "--json", "--jsonl"], "not both"),
    (["the cat", "--top", "0"], "--top"),
    (["the cat", "--model", "nope"], "nope"),
    ([" ".join(["the"] * 81)], "shorten the prompt to at most 79"),
    (["the cat", "--model", "x", "--transformer", "gpt2"], "one of them"),
])
def test_bad_input_exits_2(args, says):
    result = run("generate", *args)
    assert result.exit_code == 2, result.output
    assert says in result.stderr, result.stderr
    assert "Traceback" not in result.output and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) <= 3


def test_a_model_without_a_trained_lm_exits_2():
    make_vectors("plain", ["the", "cat", "sat"])
    result = run("generate", "the cat", "--model", "plain")
    assert result.exit_code == 2 and "has no trained attention" in result.stderr


def test_document_of_the_api():
    gen = generate(load_decoder(), "the cat", Settings(n=3, greedy=True))
    doc = document(gen)
    assert json.dumps(doc, allow_nan=False)
    assert doc["settings"]["seed"] is None and doc["settings"]["temperature"] is None
    assert all(s["sample_prob"] is None for s in doc["steps"])


# --- terminals and pipes --------------------------------------------------------------------------


def _run_with_pty(argv, pty_for: str, attn_home) -> tuple[int, bytes, bytes]:
    """Run attn with stdout or stderr on a pseudo-terminal (the other one a pipe)."""
    import pty

    master, slave = pty.openpty()
    env = dict(os.environ, ATTN_HOME=str(attn_home), COLUMNS="80", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    env.pop("FORCE_COLOR", None)
    kw = {"stdout": slave, "stderr": subprocess.PIPE} if pty_for == "stdout" else {"stdout": subprocess.PIPE, "stderr": slave}
    proc = subprocess.Popen([sys.executable, "-m", "attncli", *argv], env=env, **kw)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    piped = (proc.stderr if pty_for == "stdout" else proc.stdout).read()
    proc.wait(timeout=120)
    os.close(master)
    return proc.returncode, b"".join(chunks), piped


def test_piped_stdout_gets_plain_steps_and_stderr_the_progress(attn_home):
    rc, tty_err, out = _run_with_pty(["generate", "the cat", "-n", "6", "--seed", "2", "--ignore-eos"], "stderr", attn_home)
    assert rc == 0, tty_err
    assert b"\x1b[" not in out and out.count(b"attends to:") == 6
    assert b"writing" in tty_err and b"tokens" in tty_err  # the progress bar, on the terminal


def test_a_terminal_gets_colour_and_no_progress(attn_home):
    rc, tty_out, err = _run_with_pty(["generate", "the cat", "-n", "6", "--seed", "2", "--ignore-eos"], "stdout", attn_home)
    assert rc == 0, err
    assert b"attends to:" in tty_out and b"\x1b[" in tty_out  # viridis cells
    assert b"writing" not in err
