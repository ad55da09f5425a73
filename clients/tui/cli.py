"""``toolrelay tui``: parse the command line, find the token, run the app."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from clients.sdk import ToolrelayClient

DEFAULT_URL = "http://127.0.0.1:8765"
TOKEN_FILE = "token"  # written by `toolrelay serve` into its data dir


class UsageError(Exception):
    """The command line cannot be used; the message says why."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolrelay tui",
        description="Watch a toolrelay session live, answer confirmations, send messages.",
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
        default=os.environ.get("TOOLRELAY_DATA_DIR", "data"),
        help="the server's data dir, to read its token file (default: $TOOLRELAY_DATA_DIR or data)",
    )
    parser.add_argument("--name", default="tui", help="client name shown to others (default: tui)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--session", metavar="ID", help="attach to an existing session")
    target.add_argument("--workspace", metavar="DIR", help="create a session for this directory")
    return parser


def resolve_token(explicit: str | None, data_dir: str, env: dict[str, str] | None = None) -> str:
    """The token to use: --token, then $TOOLRELAY_TOKEN, then ``<data_dir>/token``."""
    if explicit:
        return explicit
    environ = os.environ if env is None else env
    if environ.get("TOOLRELAY_TOKEN"):
        return environ["TOOLRELAY_TOKEN"]
    path = Path(data_dir) / TOKEN_FILE
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(
            f"no token: pass --token, set TOOLRELAY_TOKEN, or point --data-dir at the server's "
            f"data dir (could not read {path}: {exc.strerror})"
        ) from None
    if not token:
        raise UsageError(f"token file {path} is empty")
    return token


def run(argv: list[str]) -> int:
    """Entry of ``toolrelay tui [--url] [--token] [--session ID | --workspace DIR]``."""
    from clients.tui.app import ToolrelayTUI  # Textual loads only when the TUI runs

    args = _parser().parse_args(argv)
    try:
        token = resolve_token(args.token, args.data_dir)
        workspace = None
        if args.workspace is not None:
            path = Path(args.workspace).expanduser().resolve()
            if not path.is_dir():
                raise UsageError(f"--workspace {args.workspace}: not a directory")
            workspace = str(path)
        client = ToolrelayClient(args.url or DEFAULT_URL, token, client_name=args.name)
    except (UsageError, ValueError) as exc:
        print(f"toolrelay tui: {exc}", file=sys.stderr)
        return 2
    app = ToolrelayTUI(client, session_id=args.session, workspace=workspace, close_client=True)
    result = app.run()
    if app.last_error:
        print(f"toolrelay tui: {app.last_error}", file=sys.stderr)
        return 1
    return result or 0
