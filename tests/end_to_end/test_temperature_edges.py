"""Temperatures at the edges of a float: the smallest positive double (5e-324) is the argmax with
no numpy warning, in attn generate and attn lookup alike; NaN and infinity are refused wherever a
--temperature is taken, --greedy included (where the temperature is not used)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from attncli.cli.main import app
from attncli.generate import sampling
from attncli.lookup import dictionary

runner = CliRunner()
TINY = 5e-324  # the smallest positive double (a subnormal): every logit gap / TINY overflows


def reference(z, temperature):
    """softmax(z / T) as written, for temperatures where nothing overflows."""
    z = np.asarray(z, dtype=np.float64) / temperature
    e = np.exp(z - z[np.isfinite(z)].max())
    return e / e.sum()


@pytest.mark.parametrize("softmax", [sampling.softmax, dictionary.softmax], ids=["generate", "lookup"])
def test_a_tiny_temperature_is_the_argmax_without_a_warning(softmax):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning fails the test
        np.testing.assert_array_equal(softmax(np.array([0.1, 2.5, -3.0, 2.4]), TINY), [0, 1, 0, 0])
        np.testing.assert_array_equal(softmax(np.array([1.0, 1.0, 0.0]), TINY), [0.5, 0.5, 0])  # a tie shares
        np.testing.assert_array_equal(softmax(np.array([1e-300, 0.0]), TINY), [1, 0])  # even a gap of 1e-300
        for T in (1e-3, 0.15, 0.7, 1.0, 3.0, 1000.0):  # and an ordinary one is still softmax(z / T)
            z = np.array([0.3, -1.2, 2.0, 0.0, 1.999])
            np.testing.assert_allclose(softmax(z, T), reference(z, T), rtol=1e-12, atol=1e-300)


def test_a_banned_token_stays_at_zero_with_a_tiny_temperature():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = sampling.sampling_distribution(np.array([3.0, 1.0, 2.0]), temperature=TINY, banned=(0,))
    np.testing.assert_array_equal(p, [0, 0, 1])


def test_generate_with_a_tiny_temperature_writes_the_greedy_text(tiny_gpt2_dir):
    from attncli.generate.hf_decoder import load_pretrained
    from attncli.generate.run import Settings, generate

    dec = load_pretrained(str(tiny_gpt2_dir))
    greedy = generate(dec, "the cat sat", Settings(n=6, greedy=True, ignore_eos=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny = generate(load_pretrained(str(tiny_gpt2_dir)), "the cat sat",
                        Settings(n=6, temperature=TINY, top_k=0, seed=1, ignore_eos=True))
    assert [s.id for s in tiny.steps] == [s.id for s in greedy.steps]
    assert all(s.sample_prob == 1.0 for s in tiny.steps)


@pytest.mark.parametrize("argv", [
    ["generate", "the cat sat", "-n", "3", "--temperature", "5e-324", "--seed", "2"],
    ["lookup", "colr", "--temperature", "5e-324", "--explain"],
], ids=["generate", "lookup"])
def test_the_cli_with_a_tiny_temperature_prints_no_warning(argv, tiny_gpt2_dir):
    if argv[0] == "generate":
        argv = argv + ["--transformer", str(tiny_gpt2_dir)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert "Warning" not in result.output


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
@pytest.mark.parametrize("argv", [["generate", "the cat sat", "-n", "2", "--greedy"],
                                  ["generate", "the cat sat", "-n", "2"],
                                  ["lookup", "colour"]], ids=["generate-greedy", "generate", "lookup"])
def test_nan_and_infinity_are_refused_as_a_temperature(argv, value, tiny_gpt2_dir):
    if argv[0] == "generate":
        argv = argv + ["--transformer", str(tiny_gpt2_dir)]
    result = runner.invoke(app, argv + ["--temperature", value])
    assert result.exit_code == 2, result.output
    assert "--temperature must be" in result.output and "Traceback" not in result.output


def test_greedy_still_takes_a_temperature_of_zero(tiny_gpt2_dir):
    result = runner.invoke(app, ["generate", "the cat sat", "-n", "2", "--greedy", "--temperature", "0",
                                 "--transformer", str(tiny_gpt2_dir)])
    assert result.exit_code == 0, result.output
