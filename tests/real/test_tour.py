"""The tour (docs/tour.md) is real, and so are docs/heads.md's real-model examples: each step, a
`$ attn ... --transformer smollm2` (or gemma3) command of a console block, runs on the installed
real model and prints what the page shows, its numbers to within 2e-3 (a `[…]` line of the page
stands for lines it leaves out). The blocks are read, and the outputs compared, by
tests/test_readme.py's own helpers, which leave these commands to this file; the models come as
tests/_real_models.py gets them (skipped saying why where they are missing, failed under CI). The
commands share one ATTN_HOME, so Gemma 3's parts are joined once.

Budget: each step is one process of 1 to 16 s of CPU; the ten took about 62 s of CPU in all (user
+ sys; 2.8 minutes of wall time on two cores shared with other work), and Gemma 3's induction heads
(``attn heads --transformer gemma3 --random 20``) add about 16 s (12.4 user + 3.2 sys, /usr/bin/time):
``time python -m pytest -q -n 0 tests/real/test_tour.py --durations=10`` measures them."""

from __future__ import annotations

import subprocess

import pytest

from _real_models import real_file
from test_readme import REAL_EXAMPLES, REPO, _environment, check_output

TOUR = [example for example in REAL_EXAMPLES if example.source.startswith("tour.md:")]
PAGES = ("tour.md", "heads.md")  # the pages whose console blocks run a real model (heads.md: attn retrieval's)


def test_the_tour_has_its_steps():
    """The real-model examples are the tour's and docs/heads.md's, and the tour shows each kind of step."""
    assert {e.source.split(":")[0] for e in REAL_EXAMPLES} == {"tour.md", "heads.md"}
    commands = " ".join(example.command for example in TOUR)
    for part in ("heads --transformer smollm2 --random", "attn patch", "attn attribute", "attn circuit",
                 "--transformer gemma3", "heads --transformer gemma3 --random"):
        assert part in commands, part
    shown = "\n".join(line for example in TOUR for line in example.expected)
    for table in ("sink: mean attention on the first token", "distance: mean |query - key| in tokens",
                  "gemma3: induction score on repeated random tokens", "faithfulness"):
        assert table in shown, table  # Gemma 3's local and global layers, its induction heads, the circuit's faithfulness


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("tour-home")


@pytest.mark.parametrize("example", REAL_EXAMPLES, ids=[f"{e.source} {e.command[:60]}" for e in REAL_EXAMPLES])
def test_tour_step(example, home):
    real_file(example.needs_real, home)  # skips (fails under CI) without the model; joins Gemma 3 once
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", example.command], cwd=REPO,
                          env=_environment(example.columns, home), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    check_output(example, proc.stdout)
