"""``toolrelay tui``: parse the command line, find the token, run the app."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from clients.local import (  # re-exported: the TUI's command line uses them
    BadUsage,
    data_dir_from,
    resolve_token,
)
from clients.sdk import (
    ApiError,
    Backoff,
    ConnectionFailed,
    NotFound,
    ToolrelayClient,
    ToolrelayError,
    Unauthorized,
)

__all__ = [
    "DEFAULT_URL",
    "BadUsage",
    "data_dir_from",
    "open_session",
    "resolve_token",
    "run",
    "session_options",
    "startup_error",
]

DEFAULT_URL = "http://127.0.0.1:8765"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolrelay tui",
        description="Watch a toolrelay session live, answer confirmations, send messages.",
        # The prompt's commands are typed in the app, so --help is where they are found.
        epilog="In the prompt: a message goes to the model; '/tool NAME {json}' runs one "
        "tool; '/dry-run <message>' (or '/dry-run /tool ...') plans that turn only: its "
        "writes and commands are recorded in the plan, not run.",
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("TOOLRELAY_URL"),
        help=f"server URL (default: $TOOLRELAY_URL or {DEFAULT_URL})",
    )
    parser.add_argument(
        "--token",
        help="access token (default: $TOOLRELAY_TOKEN, else the token file in --data-dir)",
    )
    parser.add_argument(
        "--data-dir",
        default=data_dir_from(),
        help="the server's data dir, to read its token file (default: $TOOLRELAY_DATA_DIR or "
        "$XDG_STATE_HOME/toolrelay, i.e. ~/.local/state/toolrelay)",
    )
    parser.add_argument("--name", default="tui", help="client name shown to others (default: tui)")
    created = parser.add_argument_group(
        "a new session (with --workspace; empty means the server's default)"
    )
    created.add_argument(
        "--profile", help="permission profile: read-only, dev, ci, full or one from the config"
    )
    created.add_argument(
        "--agent", help="agent: build, plan, explore, test, review or one from the config"
    )
    created.add_argument(
        "--dry-run",
        action="store_true",
        help="plan only: write and execute calls are recorded, not run",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--session", metavar="ID", help="attach to an existing session")
    target.add_argument(
        "--workspace",
        metavar="DIR",
        help="create a session for this directory: an absolute path on the server's machine "
        "(the server checks it)",
    )
    return parser


def session_options(args: argparse.Namespace) -> dict[str, Any]:
    """``profile``, ``agent`` and ``dry_run`` for ``POST /sessions``, only those
    given: an older server that does not know a field never sees it."""
    options: dict[str, Any] = {}
    if args.profile:
        options["profile"] = args.profile
    if args.agent:
        options["agent"] = args.agent
    if args.dry_run:
        options["dry_run"] = True
    return options


async def open_session(
    url: str,
    token: str,
    name: str,
    *,
    session_id: str | None,
    workspace: str | None,
    options: dict[str, Any] | None = None,
) -> str:
    """Check what the TUI needs before it opens a screen: the server answers,
    the token is accepted, the session exists (or is created for the
    workspace, a path on the server, with ``options``). Returns the session id."""
    quick = Backoff(attempts=2, initial=0.2, factor=2.0, max_delay=0.5)
    async with ToolrelayClient(url, token, client_name=name, timeout=10.0, backoff=quick) as probe:
        if session_id is not None:
            return (await probe.get_session(session_id)).id
        assert workspace is not None
        return (await probe.create_session(workspace, **(options or {}))).id


def startup_error(exc: ToolrelayError, url: str, session_id: str | None) -> tuple[str, int]:
    """One line for a start-up failure and the exit code: 1 when retrying
    later may help (the server is down or failing), 2 when the command line or
    its configuration must change (wrong token, unknown session, refused
    workspace)."""
    if isinstance(exc, ConnectionFailed):
        return f"cannot reach the server at {url} ({exc.message})", 1
    if isinstance(exc, Unauthorized):
        return f"the server at {url} rejected the token (401); check --token", 2
    if isinstance(exc, NotFound) and session_id is not None:
        return f"no session {session_id} on {url} (unknown, or not visible to this token)", 2
    if isinstance(exc, ApiError):
        if exc.status >= 500:
            return f"the server at {url} failed: {exc.status} {exc.server_message}", 1
        return f"{exc.server_message} ({exc.status})", 2
    return exc.message, 1


def run(argv: list[str]) -> int:
    """Entry of ``toolrelay tui [--url] [--token] [--session ID | --workspace DIR
    [--profile P] [--agent A] [--dry-run]]``.

    Start-up problems (no token, server down, token refused, unknown session,
    a workspace the server refuses) print one line on stderr and exit non-zero
    before any screen opens. ``--workspace`` is a path on the server's machine
    and is checked by the server, not here.
    """
    from clients.tui.app import ToolrelayTUI  # Textual loads only when the TUI runs

    args = _parser().parse_args(argv)
    url = args.url or DEFAULT_URL
    options = session_options(args)
    if options and args.session:
        # An existing session keeps what it was created with; say so rather than ignore.
        flags = ", ".join("--" + key.replace("_", "-") for key in options)
        print(f"toolrelay tui: {flags} apply to a new session (--workspace)", file=sys.stderr)
        return 2
    try:
        token = resolve_token(args.token, args.data_dir)
        # Constructed now to check the URL's form; used once the session is known.
        client = ToolrelayClient(url, token, client_name=args.name)
    except (BadUsage, ValueError) as exc:
        print(f"toolrelay tui: {exc}", file=sys.stderr)
        return 2
    try:
        session_id = asyncio.run(
            open_session(
                url,
                token,
                args.name,
                session_id=args.session,
                workspace=args.workspace,
                options=options,
            )
        )
    except ToolrelayError as exc:
        asyncio.run(client.aclose())
        message, code = startup_error(exc, url, args.session)
        print(f"toolrelay tui: {message}", file=sys.stderr)
        return code
    app = ToolrelayTUI(client, session_id=session_id, close_client=True)
    result = app.run()
    if app.last_error:
        print(f"toolrelay tui: {app.last_error}", file=sys.stderr)
        return 1
    return result or 0
