"""Process-wide settings only where they belong (attncli/hf/kernels/heap.py, blas.py, cli/main.py):
importing attncli and running a large pass from Python changes no environment variable and does
not call glibc's mallopt; the command line allows the allocator setting for its own process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, os, sys
    before = dict(os.environ)
    import attncli, attncli.cli.main  # the package and the command line's module, imported
    from attncli.hf.kernels import heap
    from attncli.hf import load

    calls = []
    heap._mallopt = lambda: (lambda *args: calls.append(args) or 1)  # records mallopt instead of calling it
    if sys.argv[2] == "allow":
        attncli.env.runtime.own_allocator()
    model = load(sys.argv[1], backend="numpy")
    encs = [model.encode("time flies like an arrow, fruit flies like a banana")] * 40  # > SMALL_ROWS rows
    model.trace_batch(encs, "blocks.*.attn.pattern")
    model.trace_batch(encs, "blocks.*.attn.pattern", precision="float32")
    print(json.dumps({"environ_changed": sorted(k for k in set(before) | set(os.environ)
                                                if before.get(k) != os.environ.get(k)),
                      "mallopt_calls": len(calls), "rows": len(encs) * len(encs[0].ids)}))
""")


def _run(model_dir, mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(model_dir), mode], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_attncli_and_a_large_pass_change_nothing_process_wide(tiny_bert_dir):
    from attncli.hf.kernels import blas

    got = _run(tiny_bert_dir, "library")
    assert got["rows"] > blas.SMALL_ROWS  # the pass is one that would tune the allocator under the CLI
    assert got["environ_changed"] == []
    assert got["mallopt_calls"] == 0


def test_the_same_pass_sets_the_allocator_when_the_command_line_allowed_it(tiny_bert_dir):
    """The spy sees mallopt when the process allowed it: the test above can see a call."""
    got = _run(tiny_bert_dir, "allow")
    assert got["mallopt_calls"] == 2 and got["environ_changed"] == []


def test_the_command_line_allows_it_for_its_own_process(monkeypatch):
    from attncli.env import runtime
    from attncli.cli import main

    monkeypatch.setattr(runtime, "owns_allocator", False)
    monkeypatch.setattr(sys, "argv", ["attn", "--version"])
    with pytest.raises(SystemExit):
        main.main()
    assert runtime.owns_allocator
