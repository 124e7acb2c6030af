"""Tests that use the machine's special files check them first (tests/_special_files.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from _special_files import machine_device

TESTS = Path(__file__).resolve().parent


def test_a_regular_file_or_a_missing_path_skips_with_the_reason(tmp_path):
    regular = tmp_path / "full"
    regular.write_bytes(b"")
    with pytest.raises(pytest.skip.Exception, match="not a character device"):
        machine_device(str(regular))
    with pytest.raises(pytest.skip.Exception, match="not available"):
        machine_device(str(tmp_path / "missing"))


def test_a_character_device_is_given_back():
    assert machine_device(machine_device("/dev/null")) == "/dev/null"


def test_every_test_that_names_dev_full_or_dev_zero_asks_machine_device_first():
    """A literal "/dev/full" or "/dev/zero" in a test is an argument of machine_device(...) or the
    same test checks it with machine_device("/dev/...") before use (a parametrize table)."""
    bare = []
    for path in sorted(TESTS.rglob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r'"/dev/(full|zero)"', text):
            before = text[max(0, m.start() - len("machine_device(")):m.start()]
            if before == "machine_device(":
                continue
            if f'machine_device("/dev/{m.group(1)}")' in text:  # e.g. a parametrize table, checked in the body
                continue
            bare.append(f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}")
    assert not bare, bare
