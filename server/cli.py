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
import gc
import importlib
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn

from server.auth import TOKEN_FILE, TokenRegistry, load_or_create_token_file
from server.config import ENV_TOKEN, Config, ConfigInvalid, TokenConfig, load_config
from server.environment import scrub_secrets
from server.logs import log_config
from server.roots import warn_unconfined_users
from server.startup import DataDirLock, StartupFailed, bind_listener

if TYPE_CHECKING:
    from server.runtime import Services

EXIT_CONFIG = 2
# Start-up failed (port, data dir, databases) or the server could not continue.
EXIT_STARTUP = 1
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
    if args.command == "mcp":
        from server import mcp_bridge

        return mcp_bridge.run(args)
    parser.print_help()
    return EXIT_CONFIG


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolrelay", description="toolrelay: an async multi-client agent server"
    )
    parser.add_argument(
        "--version", action="version", version=f"toolrelay {_version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command")
    serve_p = sub.add_parser("serve", help="run the server")
    serve_p.add_argument("--host", help="address to bind (default 127.0.0.1)")
    serve_p.add_argument("--port", type=int, help="port to bind (default 8765; 0 picks one)")
    serve_p.add_argument(
        "--data-dir",
        help="directory for the databases, the lock and the token "
        "(default: $TOOLRELAY_DATA_DIR, else $XDG_STATE_HOME/toolrelay, i.e. "
        "~/.local/state/toolrelay; never inside a workspace)",
    )
    serve_p.add_argument("--config", help="YAML configuration file")
    serve_p.add_argument(
        "--log-level",
        default=os.environ.get("TOOLRELAY_LOG_LEVEL", "info"),
        choices=["critical", "error", "warning", "info", "debug"],
        help="least severe level logged (default: $TOOLRELAY_LOG_LEVEL or info; "
        "warning also hides the per-tool-call lines)",
    )
    serve_p.add_argument("--no-access-log", action="store_true", help="do not log each request")
    serve_p.add_argument(
        "--redis",
        help="run as one replica of a cluster on this Redis, e.g. redis://127.0.0.1:6379/0 "
        "(default: $TOOLRELAY_REDIS_URL; without it the embedded default)",
    )
    serve_p.add_argument("--replica-id", help="this replica's id (default <hostname>-<pid>)")
    serve_p.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="text (default) or json: one JSON object per line on stderr",
    )
    # Listed for --help only: main() hands "tui ..." to clients.tui before parsing.
    sub.add_parser("tui", help="attach the terminal UI to a running server (see: tui --help)")
    from server import mcp_bridge

    mcp_bridge.add_arguments(sub)  # toolrelay mcp serve|list
    return parser


def _version() -> str:
    """The installed distribution's version (what pip installed), or "unknown"."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("toolrelay")
    except PackageNotFoundError:
        return "unknown"


def serve(args: argparse.Namespace) -> int:
    overrides = {
        "server.host": args.host,
        "server.port": args.port,
        "server.data_dir": args.data_dir,
        "cluster.redis_url": args.redis,
        "cluster.replica_id": args.replica_id,
    }
    from protocol.extras import MissingExtra
    from server.extras import require_configured

    try:
        config = load_config(args.config, overrides=overrides)
        require_configured(config, os.environ)  # a configured feature's extra is installed
    except (ConfigInvalid, MissingExtra) as exc:
        return _fail(str(exc), EXIT_CONFIG)
    # Before any file is created: the port (binding creates nothing), then the
    # data dir's exclusive lock (see server.startup). Each failure is one line
    # on stderr, exit 1, and nothing left behind.
    try:
        sock = bind_listener(config.server.host, config.server.port)
    except StartupFailed as exc:
        return _fail(str(exc), EXIT_STARTUP)
    try:
        lock = DataDirLock.acquire(config.data_dir)
    except StartupFailed as exc:
        sock.close()
        return _fail(str(exc), EXIT_STARTUP)
    cleanup = _Cleanup(config.data_dir, lock)
    try:
        tokens, token_note = _tokens(config)
    except ConfigInvalid as exc:
        sock.close()
        cleanup.run()
        return _fail(str(exc), EXIT_CONFIG)
    except OSError as exc:
        sock.close()
        cleanup.run()
        return _fail(f"cannot use data dir {config.data_dir}: {exc}", EXIT_STARTUP)

    try:
        return _serve_locked(args, config, tokens, token_note, sock, cleanup)
    except BaseException:
        # A bug (a traceback is the right report then) still leaves nothing behind.
        sock.close()
        cleanup.run()
        raise


def _serve_locked(
    args: argparse.Namespace,
    config: Config,
    tokens: list[TokenConfig],
    token_note: str,
    sock: socket.socket,
    cleanup: _Cleanup,
) -> int:
    """``serve`` once the port is bound and the data dir locked."""
    # Read by now: out of the environment, so no child inherits or shows them.
    scrub_secrets()
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
            args.log_level,
            [t.token for t in tokens],
            access_log=not args.no_access_log,
            log_format=args.log_format,
        ),
        access_log=not args.no_access_log,
        timeout_graceful_shutdown=int(config.server.shutdown_grace) or 1,
        server_header=False,
    )
    # Logging is configured by now.
    warn_unconfined_users(tokens, config.workspaces.allowed_roots)
    server = uvicorn.Server(uv_config)
    outcome = _Outcome()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_run(server, app.state.runtime, config, token_note, sock, outcome, cleanup))
    if outcome.start_error is not None:
        cleanup.run()
        return _fail(outcome.start_error, outcome.exit_code)
    if outcome.fatal is not None:
        # The runtime could not continue (see Services.on_fatal): a supervisor
        # restarts the process; the lock is released as the process ends.
        return _fail(f"stopped: {outcome.fatal}", EXIT_STARTUP)
    # uvicorn reports a failed start-up (a lifespan error) by not starting.
    return 0 if server.started else 1


def _fail(message: str, code: int) -> int:
    """One clear line on stderr, no traceback; the exit code."""
    print(f"toolrelay: {message}", file=sys.stderr, flush=True)
    return code


class _Outcome:
    """How the asyncio part of ``serve`` ended, for the exit code."""

    def __init__(self) -> None:
        self.start_error: str | None = None
        self.exit_code = EXIT_STARTUP
        self.fatal: str | None = None


class _Cleanup:
    """Removes what a failed start created in the data dir, nothing else: the
    whole data dir if this start created it, otherwise only a token file it
    generated. The lock is released either way."""

    def __init__(self, data_dir: Path, lock: DataDirLock) -> None:
        self.data_dir = data_dir
        self.lock = lock
        self.fresh = bool(lock.created)
        self.token_existed = (data_dir / TOKEN_FILE).exists()
        self.started = False

    def run(self) -> None:
        if self.started:
            return
        names = [TOKEN_FILE] if self.fresh or not self.token_existed else []
        if self.fresh:
            from server.runtime import EVENTS_FILE, STATE_FILE

            dbs = (STATE_FILE, EVENTS_FILE)
            names += [f"{db}{suffix}" for db in dbs for suffix in SQLITE_SUFFIXES]
        for name in names:
            with contextlib.suppress(OSError):
                (self.data_dir / name).unlink()
        self.lock.release(cleanup=True)


# The database files of a fresh data dir a failed start removes, with the
# event log's ring (eventbus.ring) beside its log.
SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal", ".ring")


async def _run(
    server: uvicorn.Server,
    runtime: Services,
    config: Config,
    token_note: str,
    sock: socket.socket,
    outcome: _Outcome,
    cleanup: _Cleanup,
) -> None:
    # Started here, before uvicorn (whose lifespan then finds it started), so a
    # failure is one line on stderr instead of uvicorn's traceback.
    try:
        await runtime.start()
    except Exception as exc:
        outcome.start_error = f"cannot start: {exc}"
        outcome.exit_code = EXIT_CONFIG if isinstance(exc, ConfigInvalid) else EXIT_STARTUP
        with contextlib.suppress(Exception):
            await runtime.stop()
        sock.close()
        return
    # The data dir holds a started server's state from here on: never undone.
    cleanup.started = True
    # What start-up built (modules, app, tools: ~270k objects) lives as long as the
    # process. Frozen, the collector stops walking it: each full collection would
    # otherwise stall the event loop 50-200 ms, mid-turn (issue 16).
    gc.collect()
    gc.freeze()

    def fatal(reason: str) -> None:
        outcome.fatal = reason
        server.should_exit = True

    runtime.on_fatal = fatal
    task = asyncio.create_task(server.serve(sockets=[sock]))
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
        f"  Model:     {_model_note(config)}",
    ]
    # The runtime (create_app keeps it on app.state) decided the sandbox at start-up.
    runtime = getattr(getattr(server.config.app, "state", None), "runtime", None)
    sandbox_on = getattr(runtime, "sandbox_config", None) is not None
    if sandbox_on:
        lines.append("  Sandbox:   on (bubblewrap)")
    else:
        reason = getattr(runtime, "sandbox_reason", "unknown")
        lines.append(f"  Sandbox:   off ({reason}): every shell command asks for confirmation")
    print("\n".join(lines), flush=True)


def _model_note(config: Config) -> str:
    """The model of sessions created without one (resolved as each turn resolves
    it: model.default, else the provider keys, else scripted) and why."""
    from adapters.registry import default_model, parse_model, process_environment

    env = process_environment()
    model = config.model.default
    if model:
        chosen_by_env = env.get("TOOLRELAY_MODEL", "").strip() == model
        return f"{model} (from {'TOOLRELAY_MODEL' if chosen_by_env else 'model.default'})"
    model = default_model(env)
    provider, _ = parse_model(model)
    if provider == "anthropic":
        key = "ANTHROPIC_API_KEY" if env.get("ANTHROPIC_API_KEY") else "ANTHROPIC_AUTH_TOKEN"
        return f"{model} ({key} is set)"
    if provider == "openai":
        return f"{model} (OPENAI_API_KEY is set)"
    return f"{model} (no provider key set)"


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
    from protocol.extras import explain, require

    try:
        require("tui")  # Textual: the 'tui' extra
        module = importlib.import_module("clients.tui")
    except ImportError as exc:
        print(f"toolrelay tui: {explain(exc)}", file=sys.stderr)
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
