"""How a client on the server's machine finds the server's token: one lookup
for every command-line client (the TUI, the MCP stdio bridge).

Order: an explicit ``--token``, then ``$TOOLRELAY_TOKEN``, then the token file
in the data dir (``--data-dir``, else ``$TOOLRELAY_DATA_DIR``, else the
server's default). Kept in ``clients`` rather than imported from the server:
clients never import the server package; ``server.config.default_data_dir``
must agree with ``default_data_dir`` here (tests/clients checks it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

TOKEN_FILE = "token"  # written by `toolrelay serve` into its data dir


class BadUsage(Exception):
    """The command line cannot be used; the message says why."""


def default_data_dir() -> str:
    """Where ``toolrelay serve`` keeps its data (and token) by default."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join("~", ".local", "state")
    return os.path.join(state, "toolrelay")


def data_dir_from(env: Mapping[str, str] | None = None) -> str:
    """``$TOOLRELAY_DATA_DIR``, else the default: what ``--data-dir`` defaults to."""
    environ = os.environ if env is None else env
    return environ.get("TOOLRELAY_DATA_DIR") or default_data_dir()


def resolve_token(
    explicit: str | None, data_dir: str | None = None, env: Mapping[str, str] | None = None
) -> str:
    """The token to use: ``explicit``, then $TOOLRELAY_TOKEN, then ``<data_dir>/token``."""
    if explicit:
        return explicit
    environ = os.environ if env is None else env
    if environ.get("TOOLRELAY_TOKEN"):
        return environ["TOOLRELAY_TOKEN"]
    path = Path(data_dir or data_dir_from(environ)).expanduser() / TOKEN_FILE
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise BadUsage(
            f"no token: pass --token, set TOOLRELAY_TOKEN, or point --data-dir at the server's "
            f"data dir (could not read {path}: {exc.strerror})"
        ) from None
    if not token:
        raise BadUsage(f"token file {path} is empty")
    return token
