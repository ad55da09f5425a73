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

from server.config import Config, ConfigInvalid, TokenConfig

log = logging.getLogger("toolrelay.auth")


def real(path: str) -> str:
    """``path`` with ``~`` expanded and every symbolic link resolved."""
    return os.path.realpath(os.path.expanduser(path))


def is_within(path: str, root: str) -> bool:
    """Whether real path ``path`` is ``root`` or lies below it."""
    if root == os.sep:
        return True
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def protected_paths(config: Config) -> list[tuple[str, str]]:
    """(real path, what it is) of everything no workspace may touch."""
    found = [(real(str(config.data_dir)), "the server's data dir")]
    found += [(real(f), "a config file of the server") for f in config.source_files]
    return found


def protected_overlap(root: str, config: Config) -> str | None:
    """Why the real directory ``root`` may not be a workspace (or an allowed
    root), or None when it may. The message names the protected path."""
    if root == os.sep:
        return "the filesystem root / can never be a workspace (it holds the server's secrets)"
    for path, what in protected_paths(config):
        if is_within(path, root):
            return f"{root} contains {what} ({path})"
        if is_within(root, path):
            return f"{root} lies inside {what} ({path})"
    return None


def token_roots(token: TokenConfig, config: Config) -> list[str]:
    """The real roots confining ``token``: its own, then every token's."""
    return [real(r) for r in (*token.allowed_roots, *config.workspaces.allowed_roots)]


def check_configured_roots(config: Config) -> None:
    """ConfigInvalid naming the key of the first allowed root that is ``/``,
    holds a protected path, or lies inside one."""
    keyed: list[tuple[str, str]] = [
        (f"workspaces.allowed_roots.{i}", r) for i, r in enumerate(config.workspaces.allowed_roots)
    ]
    for t_index, token in enumerate(config.auth.tokens):
        keyed += [
            (f"auth.tokens.{t_index}.allowed_roots.{i}", r)
            for i, r in enumerate(token.allowed_roots)
        ]
    for key, root in keyed:
        problem = protected_overlap(real(root), config)
        if problem is not None:
            raise ConfigInvalid(f"invalid configuration: {key}: {problem}")
    scripts_dir = config.model.scripts_dir
    if scripts_dir is not None:
        problem = protected_overlap(real(scripts_dir), config)
        if problem is not None:
            raise ConfigInvalid(f"invalid configuration: model.scripts_dir: {problem}")


def unconfined_user_tokens(config: Config, tokens: Iterable[TokenConfig]) -> list[str]:
    """Names of the user tokens without any allowed root: they cannot create sessions."""
    return [t.name for t in tokens if t.role == "user" and not token_roots(t, config)]


def warn_unconfined_users(config: Config, tokens: Sequence[TokenConfig]) -> None:
    """Say at start-up which user tokens cannot create sessions, and why."""
    names = unconfined_user_tokens(config, tokens)
    if names:
        log.warning(
            "user token(s) %s cannot create sessions: no allowed roots are configured for "
            "them; set auth.tokens[].allowed_roots for each, or workspaces.allowed_roots",
            ", ".join(names),
        )
