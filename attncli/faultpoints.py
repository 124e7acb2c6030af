"""Named points where a test can stop attn on cue (issue 24): fault injection without timing.

``pause_at(stage)`` does nothing unless the environment names that stage:
``ATTN_TEST_PAUSE_AT=stage`` (a comma-separated list may name several), and then the process
creates the file ``ATTN_TEST_PAUSED`` names (holding the stage), and sleeps until a signal stops
it: the test knows exactly where the process is when it sends SIGKILL, SIGINT, SIGTERM or SIGHUP.
Otherwise inert: one environment lookup, nothing imported. The stages are listed in STAGES so a
test can go through each.
"""

from __future__ import annotations

import os

STAGES = {
    "start-up": "the entry point, signals installed, before the CLI is imported",
    "version-written": "a new model version's files written, before they are fsynced",
    "version-fsynced": "every file and folder of the new version fsynced, before its rename",
    "version-renamed": "the version renamed to its final name and .versions fsynced, before the link",
    "link-made": "the temporary link to the new version made, before the os.replace that commits",
    "link-replaced": "the name points at the new version (committed), before models/ is fsynced",
    "stats-shard-written": "attn stats --out: a shard written (atomically), before the next chunk's",
}


def pause_at(stage: str) -> None:
    """Pause here if ``ATTN_TEST_PAUSE_AT`` names ``stage`` (tests only; see the module docstring)."""
    wanted = os.environ.get("ATTN_TEST_PAUSE_AT")
    if not wanted or stage not in wanted.split(","):
        return
    import time

    flag = os.environ.get("ATTN_TEST_PAUSED")
    if flag:
        from attncli.fileio import atomic_write

        atomic_write(flag, stage)
    while True:  # a signal's handler raises out of the sleep; SIGKILL ends it
        time.sleep(3600)
