"""Who may use ``attn explore --serve``: the origin check, the Host check and the token.

A served session runs the app as the user who started the server (it reads models and writes
exports with that user's rights), so the server answers only its own pages:

- every request's ``Host`` must name the served port, and, on a loopback address (the default
  127.0.0.1), a loopback host (``localhost``, ``127.x.x.x``, ``[::1]``): a page of another site
  that rebinds its own DNS name to 127.0.0.1 (DNS rebinding) sends its own name and is refused;
- a websocket must carry ``Origin: http://<its own Host>``, the origin of the served page; any
  other request that carries an ``Origin`` must match it too: another site's page cannot open
  the app's socket (cross-site websocket hijacking) nor post to it;
- bound beyond loopback (``--host 0.0.0.0``), every request must also carry the server's random
  token (``secrets.token_urlsafe``), as Jupyter does: ``?token=...`` in the URL printed at start,
  kept afterwards in a cookie (HttpOnly, SameSite=Strict) for the page's own requests.

A refused request gets 403 and a one-line reason. These are pure functions of the request's
headers, so the tests can check each rule without a server; ``attncli.explore.serve_sessions``
puts them in front of every route.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field

TOKEN_PARAMETER = "token"


def is_loopback_name(host: str) -> bool:
    """``localhost``, or an IP literal (``127.0.0.1``, ``::1``, ``[::1]``) on the loopback network."""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def binds_loopback_only(host: str) -> bool:
    """Whether listening on ``host`` reaches this machine only (every address it resolves to is loopback)."""
    import socket

    if is_loopback_name(host):
        return True
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    addresses = {info[4][0].split("%")[0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def split_host(value: str) -> tuple[str, int | None] | None:
    """``'127.0.0.1:8000'`` -> ``('127.0.0.1', 8000)``, ``'[::1]:80'`` -> ``('::1', 80)``; None if malformed."""
    value = value.strip()
    if not value or any(c.isspace() or c in "/@?#\\" for c in value):
        return None
    if value.startswith("["):
        close = value.find("]")
        if close < 0:
            return None
        name, rest = value[1:close], value[close + 1:]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else None
    else:
        name, colon, port_text = value.partition(":")
        if not colon:
            port_text = None
        elif ":" in port_text:
            return None
    if not name:
        return None
    if port_text is None:
        return name.lower(), None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return None
    return name.lower(), int(port_text)


@dataclass(frozen=True)
class Guard:
    """The rules for one server: its port, whether it listens on loopback only, its token (None on loopback)."""

    port: int
    loopback: bool
    token: str | None = field(default=None, repr=False)

    @classmethod
    def for_bind(cls, host: str, port: int) -> "Guard":
        loopback = binds_loopback_only(host)
        return cls(port=port, loopback=loopback, token=None if loopback else secrets.token_urlsafe(32))

    @property
    def cookie_name(self) -> str:
        return f"attn-explore-{self.port}"

    def refusal(self, *, host: str | None, origin: str | None, websocket: bool,
                query_token: str | None = None, cookie_token: str | None = None) -> str | None:
        """Why a request with these headers is refused (a sentence), or None if it may go on."""
        parsed = split_host(host or "")
        if parsed is None:
            return "no valid Host header"
        name, port = parsed
        if (port or 80) != self.port:
            return f"Host {host!r} is not this server's port {self.port}"
        if self.loopback and not is_loopback_name(name):
            return f"Host {host!r} is not a loopback name (the server listens on loopback only)"
        if origin is None:
            if websocket:
                return "a websocket without an Origin header"
        elif origin.lower().rstrip("/") != f"http://{host}".lower():
            return f"Origin {origin!r} is not this server's own page (http://{host})"
        if self.token is not None and not (self.token_matches(query_token) or self.token_matches(cookie_token)):
            return "no valid token: open the URL with ?token=... that the server printed at start"
        return None

    def token_matches(self, given: str | None) -> bool:
        return self.token is not None and given is not None and hmac.compare_digest(given.encode(), self.token.encode())
