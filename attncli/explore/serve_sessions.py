"""The ``attn explore --serve`` server: textual-serve's, with the guard in front and sessions that end.

textual-serve starts one ``attn explore`` process per websocket (``AppService``) through a shell,
and when the socket closes asks it to quit and waits for it without a bound; stopping the server
waits for nothing. Here each session is started without a shell, in its own process group
(``start_new_session``), and ends for sure:

- when its socket closes: ``quit`` is sent, then after ``QUIT_GRACE`` seconds the group gets
  SIGTERM, then after ``TERM_GRACE`` more SIGKILL;
- when the server stops (SIGINT, SIGTERM): every session still running is ended the same way
  on shutdown, and whatever is left of a group after the event loop is gone gets SIGKILL.

Every request goes through :class:`attncli.explore.serve_guard.Guard` first (403 if refused);
the page's URLs are built from the request's own (checked) Host, so a page opened as
``http://localhost:8000/`` talks to ``ws://localhost:8000/ws``. textual-serve's banner and log go
to stderr: nothing of the server's is printed on stdout.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import aiohttp_jinja2
from aiohttp import WSMsgType, web
from rich.console import Console
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

from attncli.explore.serve_guard import TOKEN_PARAMETER, Guard
from attncli.io.textio import visible

QUIT_GRACE = 3.0  # seconds a session has to quit by itself once its socket closed
TERM_GRACE = 2.0  # seconds between SIGTERM and SIGKILL to its process group


def kill_group(pid: int, signum: int) -> None:
    """``signum`` to the process group of session ``pid`` (its own, from start_new_session); gone is fine."""
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


class Session(AppService):
    """One browser tab's ``attn explore`` process, started without a shell in its own process group."""

    def __init__(self, argv: list[str], **kwargs: Any) -> None:
        super().__init__(" ".join(argv), **kwargs)
        self.argv = argv

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def _open_app_process(self, width: int = 80, height: int = 24):
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=None, env=self._build_environment(width=width, height=height),  # the app's stderr is the server's
            start_new_session=True)
        process.stderr = asyncio.StreamReader()  # textual-serve's run() copies it to stdout: given nothing
        process.stderr.feed_eof()
        self._stdin = process.stdin
        return process

    async def stop(self) -> None:
        """Ask the app to quit; SIGTERM, then SIGKILL its process group if it does not within the graces."""
        process = self._process
        try:
            await asyncio.wait_for(super().stop(), QUIT_GRACE)
        except (asyncio.TimeoutError, OSError, RuntimeError):
            pass
        finally:
            if process is not None:
                await end_group(process)


async def end_group(process: asyncio.subprocess.Process) -> None:
    """Wait briefly for a session's process; then SIGTERM and SIGKILL its whole group."""
    if process.returncode is None:
        kill_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), TERM_GRACE)
        except asyncio.TimeoutError:
            pass
    kill_group(process.pid, signal.SIGKILL)  # the group may outlive its leader (a child of the app)
    if process.returncode is None:
        await process.wait()


class GuardedServer(Server):
    """textual-serve's Server with the guard in front of every route and sessions that end."""

    def __init__(self, argv: list[str], *, guard: Guard, urls: list[str], **kwargs: Any) -> None:
        super().__init__(" ".join(argv), **kwargs)
        self.argv = argv
        self.guard = guard
        self.urls = urls
        self.console = Console(stderr=True)
        self.sessions: dict[Session, web.WebSocketResponse] = {}

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(self._guard_middleware)
        return app

    @web.middleware
    async def _guard_middleware(self, request: web.Request, handler):
        query_token = request.query.get(TOKEN_PARAMETER)
        reason = self.guard.refusal(
            host=request.headers.get("Host"), origin=request.headers.get("Origin"),
            websocket=request.headers.get("Upgrade", "").lower() == "websocket",
            query_token=query_token, cookie_token=request.cookies.get(self.guard.cookie_name))
        if reason is not None:
            print(visible(f"attn explore --serve: refused {request.method} {request.path}: {reason}"), file=sys.stderr)
            return web.Response(status=403, text=f"attn explore --serve refused this request: {reason}\n")
        response = await handler(request)
        if self.guard.token_matches(query_token) and not response.prepared:
            response.set_cookie(self.guard.cookie_name, query_token, httponly=True, samesite="Strict", path="/")
        return response

    async def on_startup(self, app: web.Application) -> None:
        for line in self.urls:
            print(visible(line), file=sys.stderr)  # --host is the user's text

    async def on_shutdown(self, app: web.Application) -> None:
        """Stopping the server ends every session (bounded), then closes their sockets."""
        sessions = list(self.sessions.items())
        await asyncio.gather(*(session.stop() for session, _ in sessions), return_exceptions=True)
        await asyncio.gather(*(socket.close() for _, socket in sessions), return_exceptions=True)

    def end_every_session(self) -> None:
        """After the event loop: SIGKILL whatever is left of every session's group (no orphans)."""
        for session in list(self.sessions):
            if session.pid is not None:
                kill_group(session.pid, signal.SIGKILL)

    @aiohttp_jinja2.template("app_index.html")
    async def handle_index(self, request: web.Request) -> dict[str, Any]:
        """textual-serve's page, its URLs on the request's own (checked) Host, not the bound address."""
        base = f"http://{request.headers['Host']}"
        static = base + str(request.app.router["static"].url_for(filename="/")).rstrip("/") + "/"
        return {
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "app_websocket_url": "ws" + base[4:] + str(request.app.router["websocket"].url_for()),
            "config": {"static": {"url": static}},
            "application": {"name": self.title},
        }

    async def _process_messages(self, websocket: web.WebSocketResponse, app_service: AppService) -> None:
        """textual-serve's loop over the page's messages, a malformed one ignored instead of ending the session."""
        async for message in websocket:
            if message.type != WSMsgType.TEXT:
                continue
            try:
                envelope = json.loads(message.data)
                kind, data = (envelope + [None])[:2] if isinstance(envelope, list) and envelope else (None, None)
                if kind == "stdin" and isinstance(data, str):
                    await app_service.send_bytes(data.encode("utf-8"))
                elif kind == "resize" and isinstance(data, dict):
                    width, height = int(data["width"]), int(data["height"])
                    if 0 < width <= 1000 and 0 < height <= 1000:
                        await app_service.set_terminal_size(width, height)
                elif kind == "ping":
                    await websocket.send_json(["pong", str(data)])
                elif kind == "blur":
                    await app_service.blur()
                elif kind == "focus":
                    await app_service.focus()
            except (ValueError, TypeError, KeyError):
                continue

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """One session per socket; it ends when the socket closes (``Session.stop``)."""
        websocket = web.WebSocketResponse(heartbeat=15)
        width = min(max(to_int(request.query.get("width", "80"), 80), 1), 1000)
        height = min(max(to_int(request.query.get("height", "24"), 24), 1), 1000)
        await websocket.prepare(request)
        session = Session(self.argv, write_bytes=websocket.send_bytes, write_str=websocket.send_str,
                          close=websocket.close, download_manager=self.download_manager)
        self.sessions[session] = websocket
        try:
            await session.start(width, height)
            await self._process_messages(websocket, session)
        except (asyncio.CancelledError, ConnectionError):
            pass
        except Exception as exc:  # the session could not start or broke: one line, not a traceback
            print(visible(f"attn explore --serve: a session failed: {type(exc).__name__}: {exc}"), file=sys.stderr)
        finally:
            try:
                await session.stop()
            finally:
                self.sessions.pop(session, None)
                await websocket.close()
        return websocket
