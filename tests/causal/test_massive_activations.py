"""attn sinks (attncli.causal.massive_activations) against references written here: a plain loop over the
trace's residual arrays and attention patterns for the massive activations and the sink shares,
and transformers' own model with a forward hook setting the massive channels to their mean for
the causal test, on a tiny random Llama and GPT-2 where a massive channel is planted on the first
token (its embedding or position-0 embedding scaled up in one channel)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import needed

torch = needed("torch")
transformers = needed("transformers")

from _llama_fixtures import build_decoder  # noqa: E402
from _tolerance import f32_close, f32_size  # noqa: E402
from _transformer_fixtures import build_gpt2  # noqa: E402
from attncli.causal.massive_activations import scan  # noqa: E402
from attncli.hf import load  # noqa: E402

CHANNEL = 5  # the planted channel
PLANT = 400.0  # its value on the first token
TEXTS = ["the cat sat on the mat.", "a dog ran to the park, and the cat sat.", "the mat is red", "on the mat"]


def plant(directory: Path, kind: str) -> Path:
    """The model at ``directory`` with channel CHANNEL of the first token's input set to PLANT: the
    BOS embedding (Llama: every text starts with <s>) or GPT-2's position-0 embedding."""
    model = transformers.AutoModelForCausalLM.from_pretrained(str(directory)).eval()
    with torch.no_grad():
        if kind == "gpt2":
            model.transformer.wpe.weight[0, CHANNEL] = PLANT
        else:
            model.model.embed_tokens.weight[model.config.bos_token_id, CHANNEL] = PLANT
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def planted(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(request.param)
    if request.param == "gpt2":
        build_gpt2(d)
    else:
        build_decoder("llama", d)
    return request.param, plant(d, request.param)


def brute_force(model, texts_ids, ratio, min_value):
    """Massive channels per layer, the carrier positions per text and each head's sink share, by loops."""
    L, H = model.layers, model.heads
    massive = [set() for _ in range(L)]
    carriers = []
    share = np.zeros((L, H))
    queries = 0
    for ids in texts_ids:
        tr = model.trace(list(ids), ["blocks.*.resid_post", "blocks.*.attn.pattern"])
        pos = set()
        for l in range(L):
            x = tr[f"blocks.{l}.resid_post"]
            mags = sorted(abs(float(v)) for v in x.ravel())
            n = len(mags)
            median = mags[n // 2] if n % 2 else (mags[n // 2 - 1] + mags[n // 2]) / 2
            for t in range(x.shape[0]):
                for c in range(x.shape[1]):
                    if abs(float(x[t, c])) >= ratio * median and abs(float(x[t, c])) >= min_value:
                        massive[l].add(c)
                        pos.add(t)
        carriers.append(sorted(pos) or [0])
    for ids, keys in zip(texts_ids, carriers):
        tr = model.trace(list(ids), ["blocks.*.attn.pattern"])
        for t in range(1, len(ids)):
            queries += 1
            for l in range(L):
                p = tr[f"blocks.{l}.attn.pattern"]
                for h in range(H):
                    share[l, h] += sum(float(p[h, t, s]) for s in keys if s <= t)
    return massive, carriers, share / queries


def test_massive_channels_and_sink_shares_equal_a_plain_loop(planted):
    kind, directory = planted
    model = load(str(directory), backend="numpy")
    ids = [model.encode(t).ids for t in TEXTS]
    report = scan(model, [model.encode(t) for t in TEXTS], ratio=100.0, min_value=50.0)  # one padded pass
    massive, carriers, share = brute_force(model, ids, 100.0, 50.0)
    assert [layer["massive_channels"] for layer in report["layers"]] == [sorted(m) for m in massive]
    assert massive[0] == {CHANNEL} and report["appear"] == 0 and report["channels"] == [CHANNEL]
    assert report["carriers"]["texts_with_first_token"] == len(TEXTS)
    depth, width = f32_size(directory)
    f32_close(report["sink_share"], share, depth, width, what="sink share")


def test_no_massive_activation_falls_back_to_the_first_token(planted):
    kind, directory = planted
    model = load(str(directory), backend="numpy")
    ids = [model.encode(t).ids for t in TEXTS]
    report = scan(model, ids, ratio=1e9, min_value=1e9)
    assert report["appear"] is None and report["sink_keys"] == "first"
    f32_close(report["sink_share"], report["first_token_share"], *f32_size(directory))


def torch_causal(directory: Path, kind: str, texts_ids, layer: int, channels: list[int]):
    """(loss clean, loss with the channels set to their mean, sink share clean, sink share set) by
    transformers' eager model, the mean over every token of every text of hidden_states[layer + 1]."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(directory), attn_implementation="eager").eval()
    blocks = hf.transformer.h if kind == "gpt2" else hf.model.layers
    with torch.no_grad():
        states = [hf(torch.tensor([ids]), output_hidden_states=True).hidden_states[layer + 1][0] for ids in texts_ids]
    means = torch.cat(states)[:, channels].double().mean(0).float()

    def hook(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        hidden = hidden.clone()
        hidden[..., channels] = means
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    out = {}
    for name in ("clean", "mean"):
        handle = blocks[layer].register_forward_hook(hook) if name == "mean" else None
        nll, n, share, q = 0.0, 0, 0.0, 0
        with torch.no_grad():
            for ids in texts_ids:
                res = hf(torch.tensor([ids]), output_attentions=True)
                logp = torch.log_softmax(res.logits[0].double(), -1)
                nll -= float(logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].sum())
                n += len(ids) - 1
                for att in res.attentions[layer + 1:]:
                    share += float(att[0, :, 1:, 0].double().sum())  # the carrier: the first token
                    q += (len(ids) - 1) * att.shape[1]
        if handle is not None:
            handle.remove()
        out[name] = (nll / n, share / q)
    return out, means.numpy()


def test_causal_test_equals_a_forward_hook_in_transformers(planted):
    kind, directory = planted
    model = load(str(directory), backend="numpy")
    ids = [model.encode(t).ids for t in TEXTS]
    report = scan(model, ids, ratio=100.0, min_value=50.0, causal=len(ids))
    c = report["causal"]
    ref, means = torch_causal(directory, kind, ids, c["layer"], c["channels"])
    depth, width = f32_size(directory)
    f32_close(c["means"], means, depth, width, what="the channels' means")
    f32_close([c["loss"], c["loss_mean"]], [ref["clean"][0], ref["mean"][0]], depth, width, what="loss")
    f32_close([c["sink_share"], c["sink_share_mean"]], [ref["clean"][1], ref["mean"][1]], depth, width,
              what="sink share")
    assert abs(c["loss_mean"] - c["loss"]) > 1e-3  # fixed: the planted channel moves the loss at all


def test_the_command_prints_json(planted, tmp_path):
    from typer.testing import CliRunner

    from attncli.cli.main import app

    kind, directory = planted
    f = tmp_path / "s.txt"
    f.write_text("\n".join(TEXTS), encoding="utf-8")
    res = CliRunner().invoke(app, ["sinks", "--transformer", str(directory), "--file", str(f), "--ratio", "100",
                                   "--min-value", "50", "--causal-test", "2", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["channels"] == [CHANNEL] and doc["causal"]["texts"] == 2
    last = json.loads(CliRunner().invoke(app, ["sinks", "--transformer", str(directory), "--file", str(f), "--ratio",
                                               "100", "--min-value", "50", "--causal-test", "1", "--layer", "1",
                                               "--json"]).stdout)
    assert last["causal"]["layer"] == 1 and last["causal"]["channels"] == last["layers"][1]["massive_channels"]
    bad = CliRunner().invoke(app, ["sinks", "--transformer", str(directory), "--ratio", "nan"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_the_command_exports_the_sink_share_map(planted, tmp_path):
    """--svg: each head's sink share as a head map, the --json document's numbers; --html: that map
    over the report; --png: the terminal's view."""
    import xml.etree.ElementTree as ET

    from typer.testing import CliRunner

    from attncli.cli.main import app

    kind, directory = planted
    f = tmp_path / "s.txt"
    f.write_text("\n".join(TEXTS), encoding="utf-8")
    args = ["sinks", "--transformer", str(directory), "--file", str(f), "--causal-test", "0"]
    doc = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    out = {fmt: tmp_path / f"sinks.{fmt}" for fmt in ("svg", "html", "png")}
    res = CliRunner().invoke(app, [*args, *(x for fmt, p in out.items() for x in (f"--{fmt}", str(p))), "--width", "90"])
    assert res.exit_code == 0, res.output
    cells = [g for g in ET.parse(out["svg"]).getroot().iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "cell"]
    assert {(int(g.get("data-layer")), int(g.get("data-head"))): float(g.get("data-score")) for g in cells} == {
        (l, h): v for l, row in enumerate(doc["sink_share"]) for h, v in enumerate(row)}
    assert "sink share" in out["html"].read_text() and out["png"].read_bytes()[:4] == b"\x89PNG"


def test_token_mean_loss_equals_the_full_log_softmax_gathered():
    """The causal test's loss, read LOSS_ROWS rows at a time (no (T-1, V) log softmax made), is
    the full log softmax's next-token entries summed, to the bit: texts longer than a chunk, a
    row of -inf logits (its loss inf, as log_softmax's -inf), and the last row (it predicts
    nothing) left out."""
    from attncli.causal.massive_activations import LOSS_ROWS, token_mean_loss
    from attncli.numeric import log_softmax

    rng = np.random.default_rng(0)
    for T in (2, LOSS_ROWS, LOSS_ROWS + 1, 3 * LOSS_ROWS + 5):
        logits = (rng.standard_normal((T, 997)) * 7).astype(np.float32)  # (T, V)
        ids = [int(i) for i in rng.integers(0, 997, size=T)]
        ref = float(-log_softmax(logits[:-1].astype(np.float64))[np.arange(T - 1), ids[1:]].sum())
        assert token_mean_loss(logits, ids) == (ref, T - 1)
    logits[LOSS_ROWS + 2] = -np.inf
    assert token_mean_loss(logits, ids) == (np.inf, len(ids) - 1)
    assert token_mean_loss(logits[:1], ids[:1]) == (0.0, 0)


def test_paired_losses_equal_each_pass_logits_loss(planted, monkeypatch):
    """The causal test's losses from both passes' final-norm rows through the LM head together,
    PAIR_ROWS at a time (5 here: blocks and LOSS_ROWS chunks cross from one pass into the other),
    are token_mean_loss of each pass's own traced logits (to the rounding of the LM head's product,
    which BLAS blocks by the rows it is given: the same bits on Gemma-3-270M's 100 sentences)."""
    from attncli.causal import massive_activations
    from attncli.causal.massive_activations import paired_losses, token_mean_loss

    monkeypatch.setattr(massive_activations, "PAIR_ROWS", 5)
    kind, directory = planted
    model = load(str(directory), backend="numpy")
    ids = model.encode(TEXTS[1]).ids
    clean = model.trace(ids, ["logits", "final_norm", "blocks.0.resid_post"])
    fixed = np.array(clean["blocks.0.resid_post"]) * 0.5
    mean = model.trace(ids, ["logits", "final_norm"], start=(1, fixed))
    got = paired_losses(model, [clean["final_norm"], mean["final_norm"]], ids)
    want = [token_mean_loss(clean["logits"], ids), token_mean_loss(mean["logits"], ids)]
    assert [n for _, n in got] == [n for _, n in want] == [len(ids) - 1] * 2
    f32_close([s for s, _ in got], [s for s, _ in want], *f32_size(directory), what="summed losses")
    assert abs(got[0][0] - got[1][0]) > 1e-3
