"""Which web origins may open the server's WebSockets.

A browser sends ``Origin`` on every WebSocket handshake and lets any page
open a socket to any host: without a check, a page on another site that
learnt (or guessed) a token could read every event in the page's visitor's
name. The rule here: a handshake is accepted when it carries no ``Origin``
(non-browser clients: the SDK, the TUI, the ``websockets`` library), when
the Origin's host and port are those of the request's ``Host`` (the
dashboard served by this server), or when the Origin is listed in
``server.allowed_origins``. Everything else is refused before the socket is
accepted.

Origins are compared in one normal form, ``scheme://host:port`` with the
host lower-cased and the scheme's default port written out, so
``http://Example.com`` and ``http://example.com:80`` are the same origin.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_origin(text: str) -> str:
    """``scheme://host:port`` of an origin, or ValueError naming what is wrong.

    An origin is a scheme (http or https), a host and an optional port: no
    path, query, fragment or user info (``https://app.example.com:8443``)."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{text!r} is not an origin: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError(f"{text!r} is not an origin: the scheme must be http or https")
    if not parts.hostname or "@" in parts.netloc:
        raise ValueError(f"{text!r} is not an origin: it needs a host and no user info")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{text!r} is not an origin: no path, query or fragment allowed")
    return f"{scheme}://{_host_port(parts.hostname, port or _DEFAULT_PORTS[scheme])}"


def check_origins(origins: list[str]) -> list[str]:
    """The config validator of ``server.allowed_origins``: each one normalised."""
    return [normalize_origin(origin) for origin in origins]


def _host_port(host: str, port: int) -> str:
    host = host.lower()
    # urlsplit drops the brackets of an IPv6 literal; put them back.
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class OriginPolicy:
    """The allowed origins (normalised) and the same-origin rule."""

    allowed: frozenset[str] = frozenset()

    @classmethod
    def of(cls, allowed: Iterable[str]) -> OriginPolicy:
        return cls(frozenset(normalize_origin(o) for o in allowed))

    def refusal(self, origin: str | None, host: str | None) -> str | None:
        """Why a handshake with these headers is refused, or None if it may go on."""
        if origin is None:
            return None  # not a browser: nothing to protect against
        try:
            normal = normalize_origin(origin)
        except ValueError:
            normal = ""  # "null" (sandboxed frames, file:// pages) and the like
        if normal and (normal in self.allowed or _same_origin(normal, host)):
            return None
        return (
            f"Origin {origin[:60]!r} is not allowed: only same-origin pages and "
            "server.allowed_origins may open event streams"
        )


def _same_origin(origin: str, host: str | None) -> bool:
    """Whether ``Host`` names the origin's host and port (default port filled in)."""
    if not host:
        return False
    scheme = origin.split("://", 1)[0]
    try:
        parts = urlsplit(f"{scheme}://{host.strip()}")
        port = parts.port
    except ValueError:
        return False
    if not parts.hostname or parts.path or parts.query or "@" in parts.netloc:
        return False
    return origin == f"{scheme}://{_host_port(parts.hostname, port or _DEFAULT_PORTS[scheme])}"
