"""Headless Chromium driven over the DevTools protocol (aiohttp's websocket client), and a small
PNG reader: enough to open a page, wait for what it draws, and look at its pixels."""

from __future__ import annotations

import asyncio
import json
import shutil
import struct
import subprocess
import tempfile
import time
import zlib
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1200,800", "--remote-debugging-port=0"]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def read_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit, non-interlaced RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line) if bpp == 3 else bytes(v for i, v in enumerate(line) if i % 4 != 3))
        prev = line
    return width, height, rows


def colours(png: bytes, step: int = 3) -> set[tuple[int, int, int]]:
    width, height, rows = read_png(png)
    found = set()
    for row in rows[::step]:
        for x in range(0, width * 3, 3 * step):
            found.add((row[x], row[x + 1], row[x + 2]))
    return found


def _caller(ws, requested: list[str]):
    """``call(method, **params)``: one DevTools command on ``ws``, awaited until its answer; every
    URL the page requests meanwhile (documents, scripts, fonts, websockets) is appended to
    ``requested``."""
    counter = 0

    async def call(method: str, **params):
        nonlocal counter
        counter += 1
        await ws.send_str(json.dumps({"id": counter, "method": method, "params": params}))
        while True:
            msg = json.loads((await ws.receive()).data)
            if msg.get("method") in ("Network.requestWillBeSent", "Network.webSocketCreated"):
                requested.append(msg["params"].get("request", msg["params"]).get("url", ""))
            if msg.get("id") == counter:
                if "error" in msg:
                    raise RuntimeError(msg["error"])
                return msg["result"]

    return call


async def _session(ws_url: str, requested: list[str], work):
    """Connect to the page's DevTools socket and run ``work(call)`` (see :func:`_caller`)."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(ws_url, max_msg_size=0) as ws:
            return await work(_caller(ws, requested))


def _in_chromium(chromium: str, requested: list[str] | None, work):
    """Start headless Chromium on a fresh profile, connect to its page and run the coroutine
    function ``work(call)`` there; Chromium is stopped (killed if it lingers) whatever happens."""
    import urllib.request

    # Chromium's helper processes may still write the profile while it is removed
    with tempfile.TemporaryDirectory(prefix="attn-chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 30
            while not port_file.is_file() or not port_file.read_text().strip():
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("Chromium did not open its DevTools port")
                time.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=10).read())
            page = next(t for t in targets if t.get("type") == "page")
            return asyncio.run(_session(page["webSocketDebuggerUrl"], requested if requested is not None else [], work))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def screenshot_when(chromium: str, url: str, done, timeout: float = 40.0,
                    requested: list[str] | None = None) -> bytes:
    """Open ``url`` in headless Chromium; take screenshots until ``done(png)`` or ``timeout``.
    Every URL the page requests (documents, scripts, fonts, websockets) is appended to ``requested``."""
    import base64

    async def work(call) -> bytes:
        await call("Page.enable")
        await call("Network.enable")
        await call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        png = b""
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            png = base64.b64decode((await call("Page.captureScreenshot", format="png"))["data"])
            if done(png):
                return png
        return png

    return _in_chromium(chromium, requested, work)


def evaluate_in_page(chromium: str, url: str, expressions: list[str], requested: list[str] | None = None,
                     timeout: float = 40.0) -> list:
    """Open ``url`` in headless Chromium, wait until it is loaded, evaluate each JavaScript
    expression in turn (its value returned by value) and return their values. Every URL the page
    requests is appended to ``requested``."""

    async def work(call) -> list:
        await call("Page.enable")
        await call("Network.enable")
        await call("Runtime.enable")
        await call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # the page is loaded and its script has run
            state = await call("Runtime.evaluate", expression="document.readyState", returnByValue=True)
            if state["result"].get("value") == "complete":
                break
            await asyncio.sleep(0.05)
        results = []
        for expression in expressions:
            out = await call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
            if "exceptionDetails" in out:
                raise RuntimeError(f"{expression[:60]}: {out['exceptionDetails']}")
            results.append(out["result"].get("value"))
        await asyncio.sleep(0.3)  # anything the page would still request shows up here
        await call("Runtime.evaluate", expression="0")
        return results

    return _in_chromium(chromium, requested, work)
