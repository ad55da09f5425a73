"""Tokens, roles and client names.

Every HTTP call carries ``Authorization: Bearer <token>``; a WebSocket may use
the header or ``?token=`` (browsers cannot set headers on a WebSocket). A token
maps to a Principal: its configured name (the owner recorded on the sessions
it creates), role (``admin`` sees every session, ``user`` only its own) and
own ``allowed_roots`` (where its sessions may be: see server/roots.py).
The *client name* shown in presence and in ``resolved_by`` is the token's name
unless the caller supplies ``X-Client-Name`` (or ``?client=`` on a WebSocket),
so several tools sharing one token can still tell their answers apart.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from server.config import TokenConfig
from server.errors import InvalidRequest, Unauthorized

TOKEN_FILE = "token"
GENERATED_TOKEN_NAME = "local-admin"
CLIENT_NAME_HEADER = "x-client-name"
_CLIENT_NAME = re.compile(r"^[\w .@:+-]{1,64}$")

Role = Literal["admin", "user"]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's name, role and own allowed roots (as configured,
    unresolved), and the client name it goes by."""

    token_name: str
    role: Role
    client_name: str
    allowed_roots: tuple[str, ...] = ()

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def can_see(self, owner: str) -> bool:
        """Whether this caller may see a session created by ``owner``."""
        return self.is_admin or owner == self.token_name


class TokenRegistry:
    """The tokens the server accepts. Lookup compares digests in constant time."""

    def __init__(self, tokens: Iterable[TokenConfig]) -> None:
        self._by_digest: dict[bytes, TokenConfig] = {}
        for token in tokens:
            self._by_digest[_digest(token.token)] = token
        if not self._by_digest:
            raise ValueError("at least one token is required")

    def lookup(self, token: str) -> TokenConfig | None:
        digest = _digest(token)
        # A dict lookup by digest leaks nothing useful about the token: an attacker
        # would need a preimage of SHA-256. compare_digest guards the final check.
        found = self._by_digest.get(digest)
        if found is None or not hmac.compare_digest(_digest(found.token), digest):
            return None
        return found

    def secrets(self) -> list[str]:
        """Every token value, for log redaction."""
        return [t.token for t in self._by_digest.values()]

    def __len__(self) -> int:
        return len(self._by_digest)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def load_or_create_token_file(data_dir: Path) -> tuple[TokenConfig, bool]:
    """The data dir's admin token; generated (mode 0600) on first start.
    Returns the token and whether it was just created."""
    path = data_dir / TOKEN_FILE
    try:
        value = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        value = ""
    if value:
        return TokenConfig(name=GENERATED_TOKEN_NAME, token=value, role="admin"), False
    value = secrets.token_urlsafe(32)
    data_dir.mkdir(parents=True, exist_ok=True)
    # Mode 0600 from creation on: the token is never readable by others, not even briefly.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd = os.open(path, flags, 0o600)
    try:
        os.write(fd, (value + "\n").encode("ascii"))
    finally:
        os.close(fd)
    os.chmod(path, 0o600)
    return TokenConfig(name=GENERATED_TOKEN_NAME, token=value, role="admin"), True


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer`` header, if any."""
    value = headers.get("authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def client_name(supplied: str | None, default: str) -> str:
    """The client name a caller supplied, checked; else ``default``."""
    if supplied is None or supplied == "":
        return default
    if not _CLIENT_NAME.match(supplied):
        raise InvalidRequest(
            "client name (X-Client-Name header or ?client=) must be 1-64 letters, digits, "
            "spaces or . @ : + - _",
            field="client_name",
        )
    return supplied


def authenticate(
    registry: TokenRegistry, token: str | None, supplied_client_name: str | None
) -> Principal:
    """The Principal for a token, or Unauthorized."""
    if not token:
        raise Unauthorized("missing token: send 'Authorization: Bearer <token>'")
    entry = registry.lookup(token)
    if entry is None:
        raise Unauthorized("invalid token")
    return Principal(
        token_name=entry.name,
        role=entry.role,
        client_name=client_name(supplied_client_name, entry.name),
        allowed_roots=tuple(entry.allowed_roots),
    )
