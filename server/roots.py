"""Where a session's workspace may be: the protected paths nobody may open a
session on, and the allowed roots that confine each token.

Two rules, both checked on real paths (symbolic links resolved):

* **Protected, for everyone (admins too).** ``/``, the data dir (token file,
  databases) and every config file the server read hold the server's secrets.
  A workspace may neither contain them nor lie inside the data dir, and a
  configured allowed root may not either (a config error at start-up).
* **Confined, per token.** A token's roots are its own ``allowed_roots``
  plus ``workspaces.allowed_roots``. A ``user`` token with no roots at all
  cannot create sessions; an ``admin`` token with none may use any workspace
  that is not protected (as before this rule existed).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("toolrelay.auth")

# This module reads no Config: server/config.py checks the configured roots
# with it while loading, so the values it needs are handed in.


def real(path: str) -> str:
    """``path`` with ``~`` expanded and every symbolic link resolved."""
    return os.path.realpath(os.path.expanduser(path))


def is_within(path: str, root: str) -> bool:
    """Whether real path ``path`` is ``root`` or lies below it."""
    if root == os.sep:
        return True
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@dataclass(frozen=True)
class Protected:
    """What no workspace may touch: the data dir and the config files the
    server read. Resolved on every check, as the paths may be links."""

    data_dir: str
    source_files: tuple[str, ...] = ()

    def paths(self) -> list[tuple[str, str]]:
        """(real path, what it is) of everything no workspace may touch."""
        found = [(real(self.data_dir), "the server's data dir")]
        found += [(real(f), "a config file of the server") for f in self.source_files]
        return found

    def overlap(self, root: str) -> str | None:
        """Why the real directory ``root`` may not be a workspace (or an allowed
        root), or None when it may. The message names the protected path."""
        if root == os.sep:
            return "the filesystem root / can never be a workspace (it holds the server's secrets)"
        for path, what in self.paths():
            if is_within(path, root):
                return f"{root} contains {what} ({path})"
            if is_within(root, path):
                return f"{root} lies inside {what} ({path})"
        return None


class ConfinedToken(Protocol):
    """What the roots rule reads of a token (server.config.TokenConfig)."""

    @property
    def name(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def allowed_roots(self) -> Sequence[str]: ...


def token_roots(token: ConfinedToken, shared_roots: Sequence[str]) -> list[str]:
    """The real roots confining ``token``: its own, then every token's
    (``workspaces.allowed_roots``)."""
    return [real(r) for r in (*token.allowed_roots, *shared_roots)]


def unconfined_user_tokens(
    tokens: Iterable[ConfinedToken], shared_roots: Sequence[str]
) -> list[str]:
    """Names of the user tokens without any allowed root: they cannot create sessions."""
    return [t.name for t in tokens if t.role == "user" and not token_roots(t, shared_roots)]


def warn_unconfined_users(tokens: Sequence[ConfinedToken], shared_roots: Sequence[str]) -> None:
    """Say at start-up which user tokens cannot create sessions, and why."""
    names = unconfined_user_tokens(tokens, shared_roots)
    if names:
        log.warning(
            "user token(s) %s cannot create sessions: no allowed roots are configured for "
            "them; set auth.tokens[].allowed_roots for each, or workspaces.allowed_roots",
            ", ".join(names),
        )
