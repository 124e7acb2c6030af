"""``attn explore --serve`` is safe to run: only its own page drives it, a token guards it beyond
loopback, and no session outlives its socket or the server.

The rules are pure functions (``Guard.refusal``), checked on their own; then a real server is
started on a free loopback port and driven with aiohttp's client: a websocket from another
origin (or with another Host, as DNS rebinding sends) gets 403, one from the page's own origin
gets the app's screen; a closed socket leaves no session process; SIGTERM to the server leaves
no process of any session's group (read from /proc: psutil is not a dependency).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import needed

needed("textual_serve", reason="attn explore --serve needs the explore extra (textual-serve)")
aiohttp = needed("aiohttp")

from attncli.explore.serve_guard import Guard, binds_loopback_only, split_host  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-Token_value"
# A stubborn session, as the issue found one: put on the PYTHONPATH as sitecustomize, it makes a
# served app (TEXTUAL_DRIVER set) ignore the server's "quit" and SIGTERM, and start a child in its
# process group that ignores SIGTERM too: only SIGKILL to the whole group ends them.
STUBBORN = """
import os
if os.environ.get("TEXTUAL_DRIVER"):
    import signal, subprocess, sys
    print("a stubborn session starts", file=sys.stderr, flush=True)
    from textual.drivers import web_driver
    web_driver.WebDriver.on_meta = (lambda on_meta: lambda self, kind, payload:
                                    None if kind == "quit" else on_meta(self, kind, payload))(web_driver.WebDriver.on_meta)
    start = web_driver.WebDriver.start_application_mode
    def stubborn_start(self):
        start(self)
        import asyncio
        asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
    web_driver.WebDriver.start_application_mode = stubborn_start
"""

# ---------------------------------------------------------------------------------- the rules


@pytest.mark.parametrize("host,origin,websocket,refused", [
    ("127.0.0.1:8000", "http://127.0.0.1:8000", True, None),
    ("localhost:8000", "http://localhost:8000", True, None),
    ("[::1]:8000", "http://[::1]:8000", True, None),
    ("127.0.0.1:8000", None, False, None),  # a page opened by typing its URL: no Origin
    ("127.0.0.1:8000", "http://evil.example", True, "Origin"),  # another site's page (hijacking)
    ("127.0.0.1:8000", "http://localhost:8000", True, "Origin"),  # same machine, not the same origin
    ("127.0.0.1:8000", "null", True, "Origin"),  # a sandboxed frame or a file:// page
    ("127.0.0.1:8000", "https://127.0.0.1:8000", True, "Origin"),
    ("127.0.0.1:8000", None, True, "without an Origin"),
    ("evil.example:8000", "http://evil.example:8000", True, "loopback"),  # DNS rebinding
    ("127.0.0.1.evil.example:8000", "http://127.0.0.1.evil.example:8000", False, "loopback"),
    ("127.0.0.1:9999", "http://127.0.0.1:9999", True, "port"),
    ("127.0.0.1", None, False, "port"),
    (None, None, False, "Host"),
    ("127.0.0.1:8000/x", None, False, "Host"),
    ("user@127.0.0.1:8000", None, False, "Host"),
])
def test_the_loopback_rules(host, origin, websocket, refused):
    reason = Guard(port=8000, loopback=True).refusal(host=host, origin=origin, websocket=websocket)
    if refused is None:
        assert reason is None
    else:
        assert reason is not None and refused in reason


def test_beyond_loopback_a_token_is_needed_and_origin_still_checked():
    guard = Guard(port=8000, loopback=False, token=TOKEN)
    own = dict(host="192.168.1.5:8000", origin="http://192.168.1.5:8000", websocket=True)
    assert "token" in guard.refusal(**own)
    assert "token" in guard.refusal(**own, query_token=TOKEN[:-1])
    assert "token" in guard.refusal(**own, cookie_token=TOKEN + "x")
    assert "token" in guard.refusal(**own, query_token="é")  # not ASCII: refused, not a crash
    assert guard.refusal(**own, query_token=TOKEN) is None
    assert guard.refusal(**own, cookie_token=TOKEN) is None
    assert "Origin" in guard.refusal(host="192.168.1.5:8000", origin="http://evil.example", websocket=True,
                                     cookie_token=TOKEN)
    assert Guard.for_bind("0.0.0.0", 8000).token is not None and Guard.for_bind("127.0.0.1", 8000).token is None
    assert Guard.for_bind("0.0.0.0", 8000).token != Guard.for_bind("0.0.0.0", 8000).token


def test_what_counts_as_loopback():
    assert binds_loopback_only("127.0.0.1") and binds_loopback_only("localhost") and binds_loopback_only("::1")
    assert not binds_loopback_only("0.0.0.0") and not binds_loopback_only("::")
    assert split_host("[::1]:80") == ("::1", 80) and split_host("LocalHost:8000") == ("localhost", 8000)
    assert split_host("a:b:c") is None and split_host("host:0") is None and split_host("host:99999") is None


# ---------------------------------------------------------------------------------- a real server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """``attn explore --serve`` in a subprocess; its stderr collected; SIGKILL of its groups at the end."""

    def __init__(self, tmp_path: Path, *args: str, stubborn: bool = False):
        self.port = free_port()
        path = str(REPO)
        if stubborn:
            (tmp_path / "stubborn").mkdir()
            (tmp_path / "stubborn" / "sitecustomize.py").write_text(STUBBORN)
            path = f"{tmp_path / 'stubborn'}{os.pathsep}{REPO}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "attncli", "explore", "a b c", "--serve", "--port", str(self.port), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": path, "COLUMNS": "100"})
        self.err: list[str] = []
        self.out: list[str] = []
        self.groups: set[int] = set()  # every session's process group seen (for the checks and the cleanup)
        for stream, into in ((self.proc.stderr, self.err), (self.proc.stdout, self.out)):
            threading.Thread(target=lambda s=stream, i=into: i.extend(iter(s.readline, "")), daemon=True).start()
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert self.proc.poll() is None, "".join(self.err)
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def children(self) -> list[int]:
        """The server's child processes: its sessions (each the leader of its own process group)."""
        found = [pid for pid, ppid, _ in processes() if ppid == self.proc.pid]
        self.groups.update(found)
        return found

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the processes from Linux's /proc")


def processes() -> list[tuple[int, int, int]]:
    """(pid, parent pid, process group) of every live process (zombies excluded), from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z":
                found.append((int(entry), int(fields[1]), int(fields[2])))
    return found


def in_group(group: int) -> list[int]:
    return [pid for pid, _, pgid in processes() if pgid == group]


def wait_until(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.fixture
def served(tmp_path):
    servers: list[Served] = []

    def start(*args: str, stubborn: bool = False) -> Served:
        servers.append(Served(tmp_path, *args, stubborn=stubborn))
        return servers[-1]

    yield start
    for server in servers:
        try:
            for group in server.groups:
                for pid in in_group(group):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        finally:
            server.close()


async def handshake(url: str, **kwargs) -> int:
    """The HTTP status of a websocket handshake (101 accepted); the socket is closed at once."""
    async with aiohttp.ClientSession() as client:
        try:
            async with client.ws_connect(url, **kwargs):
                return 101
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


async def first_screen(url: str, origin: str) -> int:
    """Open the app's socket from ``origin``, wait for its first screenful; the session's pid."""
    async with aiohttp.ClientSession() as client:
        async with client.ws_connect(url + "?width=100&height=30", origin=origin) as ws:
            received = 0
            async with asyncio.timeout(60):
                while received < 1000:
                    message = await ws.receive()
                    assert message.type == aiohttp.WSMsgType.BINARY, message
                    received += len(message.data)
    return received


@needs_proc
def test_a_foreign_origin_is_refused_and_the_own_one_gets_the_app(served):
    server = served()
    ws = server.url("/ws")
    assert asyncio.run(handshake(ws, origin="http://evil.example")) == 403
    assert asyncio.run(handshake(ws)) == 403  # no Origin
    assert asyncio.run(handshake(ws, origin=server.url(""), headers={"Host": f"evil.example:{server.port}"})) == 403
    assert server.children() == []  # nothing was started for them
    assert asyncio.run(first_screen(ws, server.url(""))) >= 1000
    # the socket is closed: its session (its whole process group) is gone within the graces
    wait_until(lambda: server.children() == [], 15, "the session outlived its socket")
    assert any("refused" in line and "evil.example" in line for line in server.err)
    assert "".join(server.out) == ""  # nothing of the server's on stdout


@needs_proc
def test_a_stubborn_session_ends_with_its_socket(served):
    """An app that ignores quit and SIGTERM, with a child that ignores SIGTERM: all gone, bounded."""
    server = served(stubborn=True)
    assert asyncio.run(first_screen(server.url("/ws"), server.url(""))) >= 1000
    wait_until(lambda: server.children(), 5, "no session seen")  # the stubborn app is still there
    group = next(iter(server.groups))
    assert len(in_group(group)) == 2  # the app and its child
    wait_until(lambda: in_group(group) == [], 20, "the stubborn session outlived its socket")
    assert "a stubborn session starts\n" in server.err and server.out == []  # the app's stderr: the server's stderr


@needs_proc
@pytest.mark.parametrize("stubborn", [False, True], ids=["app", "stubborn-app"])
def test_sigterm_ends_the_server_and_every_session(served, stubborn):
    server = served(stubborn=stubborn)

    async def open_and_hold() -> None:
        async with aiohttp.ClientSession() as client:
            async with client.ws_connect(server.url("/ws"), origin=server.url("")) as ws:
                await ws.receive()  # the session runs ...
                groups = {pid for pid in server.children()}
                assert len(groups) == 1
                server.proc.send_signal(signal.SIGTERM)  # ... and the server is told to stop
                holding.update(groups)
                async with asyncio.timeout(30):
                    while not ws.closed and (await ws.receive()).type not in (aiohttp.WSMsgType.CLOSE,
                                                                              aiohttp.WSMsgType.CLOSED):
                        pass

    holding: set[int] = set()
    asyncio.run(open_and_hold())
    server.proc.wait(timeout=30)
    left = [pid for pid, _, group in processes() if group in holding]
    assert holding and left == [], f"processes of the session's group outlived the server: {left}"


def test_beyond_loopback_the_token_is_needed(served):
    server = served("--host", "0.0.0.0")
    wait_until(lambda: any("?token=" in line for line in server.err), 10, "no URL with a token printed")
    token = re.search(r"\?token=([\w-]+)", "".join(server.err)).group(1)
    assert any(line.startswith("warning: listening on 0.0.0.0") and "reachable from the network" in line
               for line in server.err)
    ws, own = server.url("/ws"), server.url("")
    assert asyncio.run(handshake(ws, origin=own)) == 403
    assert asyncio.run(handshake(ws + "?token=" + token[:-2], origin=own)) == 403
    assert asyncio.run(handshake(ws + "?token=" + token, origin=own)) == 101
    assert asyncio.run(handshake(ws + "?token=" + token, origin="http://evil.example")) == 403

    async def page_then_cookie() -> tuple[int, int, int]:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:  # unsafe: an IP host
            async with client.get(server.url("/")) as bare:
                pass
            async with client.get(server.url("/?token=" + token)) as first:
                assert "HttpOnly" in first.headers["Set-Cookie"] and "SameSite=Strict" in first.headers["Set-Cookie"]
            async with client.get(server.url("/")) as again:  # the cookie the first answer set
                pass
            return bare.status, first.status, again.status

    assert asyncio.run(page_then_cookie()) == (403, 200, 200)


# ---------------------------------------------------------------------------------- no terminal


@pytest.mark.parametrize("stdin_tty", [False, True], ids=["stdin-devnull", "stdout-a-pipe"])
def test_without_a_terminal_it_says_so_at_once(tmp_path, stdin_tty):
    """stdin from /dev/null (or a terminal) and stdout a pipe: exit 2 and a message, not a spinning app."""
    import pty

    leader, follower = pty.openpty() if stdin_tty else (None, None)
    try:
        result = subprocess.run([sys.executable, "-m", "attncli", "explore", "a b c"],
                                stdin=follower if stdin_tty else subprocess.DEVNULL, capture_output=True, text=True,
                                timeout=60, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        for fd in (leader, follower):
            if fd is not None:
                os.close(fd)
    assert result.returncode == 2, result.stderr
    assert "attn explore needs a terminal" in result.stderr and "--serve" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
