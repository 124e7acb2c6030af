"""Which modules one ``attn`` command imports, run as a fresh process (start-up tests)."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import atexit, json, sys
def _report():
    sys.stderr.write("\\nMODULES=" + json.dumps(sorted(sys.modules)) + "\\n")
atexit.register(_report)
sys.argv = ["attn"] + json.loads(sys.argv[1])
from attncli.cli.main import main
main()
"""


def imported_by(argv: list[str], *, full: bool = False) -> tuple[set[str], str]:
    """(top-level module names imported by one `attn ARGV` process, its stdout; ``full``: every
    module's whole dotted name)."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = proc.stderr.rsplit("MODULES=", 1)[1].splitlines()[0]
    return {name if full else name.split(".")[0] for name in json.loads(line)}, proc.stdout
