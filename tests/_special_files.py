"""The machine's special files (/dev/full, /dev/zero) for tests that need them.

They are the machine's files, not the project's: a container or a sandbox may lack them or hold a
regular file under the same name (writing to a regular /dev/full succeeds; reading a regular
/dev/zero ends). A test that needs one asks ``machine_device`` first and skips, with the reason,
where the path is not a character device, under CI too (CI does not install /dev).
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest


def machine_device(path: str) -> str:
    """``path`` itself if it is a character device (following symlinks), else skip the test."""
    try:
        mode = Path(path).stat().st_mode
    except OSError as exc:
        pytest.skip(f"{path} is not available on this machine ({exc.strerror})")
    if not stat.S_ISCHR(mode):
        pytest.skip(f"{path} is not a character device on this machine")
    return path
