"""Named points where a test can stop attn on cue (issue 24): fault injection without timing.

``pause_at(stage)`` does nothing unless the environment names that stage:
``ATTN_TEST_PAUSE_AT=stage`` (a comma-separated list may name several), and then the process
creates the file ``ATTN_TEST_PAUSED`` names (holding the stage), and sleeps until a signal stops
it: the test knows exactly where the process is when it sends SIGKILL, SIGINT, SIGTERM or SIGHUP.
Otherwise inert: one environment lookup, nothing imported. The stages are listed by the module
that pauses at them (STAGES_OF), so a test of one writer goes through that writer's stages (the
store's durability test through vectors/versions.py's), and STAGES holds them all.
"""

from __future__ import annotations

import os

from attncli.io.fileio import atomic_write

# module (under attncli/) -> its stages, in the order it reaches them -> what has happened there
STAGES_OF = {
    "cli/entry.py": {
        "start-up": "the entry point, signals installed, before the CLI is imported",
    },
    "vectors/versions.py": {  # the store's write of a model version; the os.replace is the commit
        "version-written": "a new model version's files written, before they are fsynced",
        "version-fsynced": "every file and folder of the new version fsynced, before its rename",
        "version-renamed": "the version renamed to its final name and .versions fsynced, before the link",
        "link-made": "the temporary link to the new version made, before the os.replace that commits",
        "link-replaced": "the name points at the new version (committed), before models/ is fsynced",
    },
    "stats/runner.py": {
        "stats-shard-written": "attn stats --out: a shard written (atomically), before the next chunk's",
    },
    "pipeline/pairs_compute.py": {
        "pairs-shard-written": "--pairs FILE --out: a shard written (atomically), before the next chunk's",
    },
}
STAGES = {stage: what for stages in STAGES_OF.values() for stage, what in stages.items()}


def pause_at(stage: str) -> None:
    """Pause here if ``ATTN_TEST_PAUSE_AT`` names ``stage`` (tests only; see the module docstring)."""
    wanted = os.environ.get("ATTN_TEST_PAUSE_AT")
    if not wanted or stage not in wanted.split(","):
        return
    import time

    flag = os.environ.get("ATTN_TEST_PAUSED")
    if flag:
        atomic_write(flag, stage)
    while True:  # a signal's handler raises out of the sleep; SIGKILL ends it
        time.sleep(3600)
