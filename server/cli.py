"""The ``toolrelay`` command: ``serve`` runs the server, ``tui`` attaches a terminal UI.

``serve`` prints a start-up banner on stdout (API URL, dashboard URL, how to
authenticate) once the socket is bound; logs go to stderr with tokens
redacted. It runs uvicorn on the standard asyncio loop (uvloop blocks the
whole loop for milliseconds per subprocess spawn as the process grows) with
the ``websockets-sansio`` WebSocket implementation and without
permessage-deflate (see specs/streaming-protocol.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from server.auth import TOKEN_FILE, TokenRegistry, load_or_create_token_file
from server.config import ENV_TOKEN, Config, ConfigError, TokenConfig, load_config
from server.logs import log_config

EXIT_CONFIG = 2
# Largest message a client may send on an event stream: they send nothing useful.
WS_MAX_MESSAGE = 64 * 1024


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["tui"]:
        # Everything after "tui" (--help included) belongs to the TUI's own parser.
        return tui(args_list[1:])
    parser = _parser()
    args = parser.parse_args(args_list)
    if args.command == "serve":
        return serve(args)
    parser.print_help()
    return EXIT_CONFIG


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolrelay", description="toolrelay: an async multi-client agent server"
    )
    sub = parser.add_subparsers(dest="command")
    serve_p = sub.add_parser("serve", help="run the server")
    serve_p.add_argument("--host", help="address to bind (default 127.0.0.1)")
    serve_p.add_argument("--port", type=int, help="port to bind (default 8765; 0 picks one)")
    serve_p.add_argument("--data-dir", help="directory for the databases and the token (./data)")
    serve_p.add_argument("--config", help="YAML configuration file")
    serve_p.add_argument(
        "--log-level",
        default=os.environ.get("TOOLRELAY_LOG_LEVEL", "info"),
        choices=["critical", "error", "warning", "info", "debug"],
    )
    serve_p.add_argument("--no-access-log", action="store_true", help="do not log each request")
    # Listed for --help only: main() hands "tui ..." to clients.tui before parsing.
    sub.add_parser("tui", help="attach the terminal UI to a running server (see: tui --help)")
    return parser


def serve(args: argparse.Namespace) -> int:
    overrides = {
        "server.host": args.host,
        "server.port": args.port,
        "server.data_dir": args.data_dir,
    }
    try:
        config = load_config(args.config, overrides=overrides)
        tokens, token_note = _tokens(config)
    except ConfigError as exc:
        print(f"toolrelay: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:
        print(f"toolrelay: cannot use data dir {config.data_dir}: {exc}", file=sys.stderr)
        return EXIT_CONFIG

    # Imported late: the CLI's --help stays fast.
    from server.app import create_app

    app = create_app(config, TokenRegistry(tokens))
    uv_config = uvicorn.Config(
        app,
        host=config.server.host,
        port=config.server.port,
        loop="asyncio",
        ws="websockets-sansio",
        ws_per_message_deflate=False,
        ws_max_size=WS_MAX_MESSAGE,
        lifespan="on",
        log_config=log_config(
            args.log_level, [t.token for t in tokens], access_log=not args.no_access_log
        ),
        access_log=not args.no_access_log,
        timeout_graceful_shutdown=int(config.server.shutdown_grace) or 1,
        server_header=False,
    )
    server = uvicorn.Server(uv_config)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_run(server, config, token_note))
    # uvicorn reports a failed start-up (port in use, lifespan error) by not starting.
    return 0 if server.started else 1


async def _run(server: uvicorn.Server, config: Config, token_note: str) -> None:
    task = asyncio.create_task(server.serve())
    # Wait (bounded by start-up itself) until the socket is bound, to print the real port.
    while not server.started and not task.done():
        await asyncio.wait({task}, timeout=0.05)
    if server.started:
        _print_banner(server, config, token_note)
    await task


def _print_banner(server: uvicorn.Server, config: Config, token_note: str) -> None:
    host, port = config.server.host, config.server.port
    for srv in server.servers:
        for sock in srv.sockets:
            port = sock.getsockname()[1]
            break
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}"
    lines = [
        "toolrelay is serving",
        f"  API:       {base}",
        f"  Dashboard: {base}/dashboard/",
        f"  Token:     {token_note}",
        f"  Data dir:  {config.data_dir}",
    ]
    print("\n".join(lines), flush=True)


def _tokens(config: Config) -> tuple[list[TokenConfig], str]:
    """The tokens to accept, and how the banner should describe them."""
    configured = list(config.auth.tokens)
    if configured:
        from_env = os.environ.get(ENV_TOKEN)
        names = ", ".join(f"{t.name} ({t.role})" for t in configured)
        if from_env:
            return configured, f"from {ENV_TOKEN} (admin); configured: {names}"
        return configured, f"configured in the config file: {names}"
    token, created = load_or_create_token_file(config.data_dir)
    path = Path(config.data_dir) / TOKEN_FILE
    state = "generated into" if created else "read from"
    # Printed on stdout on purpose, once: this is how a new user learns it.
    return [token], f"{token.token}   (admin; {state} {path})"


def tui(argv: list[str]) -> int:
    try:
        module = importlib.import_module("clients.tui")
    except ImportError as exc:
        print(f"toolrelay tui: the terminal UI is not available: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    run = getattr(module, "run", None)
    if not callable(run):
        print(
            "toolrelay tui: clients.tui has no run(argv) entry point; reinstall toolrelay",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    return int(run(argv))


if __name__ == "__main__":
    sys.exit(main())
