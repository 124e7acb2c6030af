"""``attn explore --serve``: the same app as a web page, through textual-serve.

textual-serve runs ``attn explore`` (without ``--serve``) once per browser tab, in a subprocess
speaking its web driver, and relays the screen over a websocket. Its page template links the
Roboto Mono font from fonts.googleapis.com; the package also ships that font, so the page is
served from a copy of the installed template whose link is replaced by a local ``@font-face``:
the page fetches nothing but the server's own URLs (tests/explore/test_explore.py checks it).

Anyone who can use the server runs the app as the user who started it (it reads models and
dictionaries and writes exports with that user's rights): the default host is 127.0.0.1, every
request must come from the server's own page (``serve_guard``: Origin and Host checked), and
bound beyond loopback every request needs the random token printed at start. Sessions end with
their socket or the server (``serve_sessions``).
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from attncli.errors import BadInput
from attncli.explore.serve_guard import Guard

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
_FONT_LINK = re.compile(r'<link\s+rel="stylesheet"\s+href="https://fonts\.googleapis\.com/[^"]*"\s*/?>', re.S)
_LOCAL_FONT = """<style>
      @font-face {
        font-family: "Roboto Mono";
        src: url("{{ config.static.url }}fonts/RobotoMono-VariableFont_wght.ttf") format("truetype");
        font-style: normal;
      }
      @font-face {
        font-family: "Roboto Mono";
        src: url("{{ config.static.url }}fonts/RobotoMono-Italic-VariableFont_wght.ttf") format("truetype");
        font-style: italic;
      }
    </style>"""


def offline_template(source: str) -> str:
    """textual-serve's page with the web-font link replaced by the fonts it ships."""
    page, n = _FONT_LINK.subn(_LOCAL_FONT, source)
    remote = [url for url in re.findall(r'(?:href|src)="(https?://[^"]*)"', page)]
    if remote:
        raise RuntimeError(f"textual-serve's page still loads {remote[0]}: attn cannot serve it offline")
    return page


def offline_templates(directory: Path) -> Path:
    """Write the offline copy of textual-serve's templates into ``directory``."""
    import textual_serve

    source = Path(textual_serve.__file__).parent / "templates"
    for template in source.glob("*.html"):
        (directory / template.name).write_text(offline_template(template.read_text(encoding="utf-8")), encoding="utf-8")
    return directory


def check_bind(host: str, port: int) -> None:
    """Refuse a port out of range or one already taken, before textual-serve starts."""
    import socket

    if not 1 <= port <= 65535:
        raise BadInput(f"--port must be between 1 and 65535 (got {port})")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise BadInput(f"--host {host!r}: {exc.strerror or exc}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror or exc} (pick another --port)") from None


def start_lines(host: str, port: int, token: str | None) -> list[str]:
    """What the server prints on stderr at start: the URL to open and, beyond loopback, the warning."""
    import socket

    def url(name: str) -> str:
        name = f"[{name}]" if ":" in name else name
        return f"http://{name}:{port}/" + (f"?token={token}" if token else "")

    if token is None:
        return [f"attn explore --serve: open {url(host)} in a browser (Ctrl-C stops the server and every session)"]
    wildcard = host in ("0.0.0.0", "::", "")
    names = ["127.0.0.1", socket.gethostname()] if wildcard else [host]
    return [f"attn explore --serve: open {url(name)}" for name in names] + [
        f"warning: listening on {host}:{port}, reachable from the network: whoever has the URL (its token) runs the "
        "app as you (your models, files and exports, with your rights), over unencrypted http; "
        "use --host 127.0.0.1 unless you need another machine to connect, and only on a network you trust"]


def serve(app_args: list[str], host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Serve ``attn explore APP_ARGS`` on http://HOST:PORT until Ctrl-C or SIGTERM (which end every session)."""
    import textual_serve

    from attncli.explore.serve_sessions import GuardedServer

    check_bind(host, port)
    guard = Guard.for_bind(host, port)
    argv = [sys.executable, "-m", "attncli", "explore", *app_args]
    with tempfile.TemporaryDirectory(prefix="attn-serve-") as tmp:
        statics = Path(textual_serve.__file__).parent / "static"
        server = GuardedServer(argv, guard=guard, urls=start_lines(host, port, guard.token), host=host, port=port,
                               title="attn explore", templates_path=offline_templates(Path(tmp)), statics_path=statics)
        try:
            server.serve()
        finally:
            server.end_every_session()
