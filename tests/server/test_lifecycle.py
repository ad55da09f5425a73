"""Process lifecycle: crash and restart, graceful shutdown, start-up errors, tokens."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from tests.harness import REPO_ROOT, ServerFactory, ServerProcess
from tests.server.conftest import BASE_CONFIG
from tests.server.support import Stream, new_session, start_turn, use, wait_turn


def logged_events(srv: ServerProcess) -> list[dict[str, Any]]:
    """Every event in the durable log, read straight from the SQLite file."""
    conn = sqlite3.connect(srv.data_dir / "events.sqlite3")
    try:
        rows = conn.execute("SELECT json FROM events ORDER BY seq").fetchall()
    finally:
        conn.close()
    return [json.loads(r[0]) for r in rows]


async def test_kill_9_then_restart_keeps_the_log_and_fails_the_turn(
    server_factory: ServerFactory, workspace: Path
) -> None:
    srv = server_factory(BASE_CONFIG)
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await start_turn(http, sid, use("b1", "block", seconds=600))
            await stream.until("tool.output_delta")
            before = list(stream.events)
    pid = srv.pid
    children = [p.pid for p in psutil.Process(pid).children(recursive=True)]
    srv.kill()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    srv.start()
    # Whatever the crashed server started must not outlive it for long.
    for child in children:
        if psutil.pid_exists(child):
            psutil.Process(child).wait(10)

    async with srv.client("alice") as http:
        turn = await wait_turn(http, sid, tid)
        assert turn["status"] == "failed" and turn["reason"] == "server_restart"
        messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
        assert [m["role"] for m in messages] == ["assistant", "tool"]
        assert messages[1]["content"][0]["tool_use_id"] == "b1"
        assert messages[1]["content"][0]["is_error"] is True
        async with await Stream.open(
            srv.ws_url(f"/sessions/{sid}/events", after=0), after=0
        ) as replay:
            failed = await replay.until("turn.failed")
    assert failed["turn_id"] == tid and failed["data"]["reason"] == "server_restart"
    # Every event the first run delivered is still there, unchanged, in order.
    assert replay.events[: len(before)] == before
    logged = [e for e in logged_events(srv) if e["session_id"] == sid]
    assert [e["session_seq"] for e in logged] == list(range(1, len(logged) + 1))


async def test_graceful_shutdown_fails_running_turns(
    server_factory: ServerFactory, workspace: Path
) -> None:
    srv = server_factory(BASE_CONFIG)
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        tid = await start_turn(http, sid, use("b1", "block", seconds=600))
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            await stream.until("tool.output_delta")
            srv.stop()
            code, _ = await stream.closed()
    assert code == 1012  # service restart: reconnect later with after=
    assert "Finished server process" in srv.stderr()
    events = [e for e in logged_events(srv) if e["turn_id"] == tid]
    types = [e["type"] for e in events]
    assert types[-1] == "turn.failed", types
    assert events[-1]["data"]["reason"] == "server_shutdown"
    assert "tool.failed" in types

    srv.start()
    async with srv.client("alice") as http:
        turn = (await http.get(f"/sessions/{sid}/turns/{tid}")).json()
        assert turn["status"] == "failed" and turn["reason"] == "server_shutdown"
        # Nothing left to recover: no second turn.failed.
    assert [e["type"] for e in logged_events(srv) if e["turn_id"] == tid].count("turn.failed") == 1


async def test_sigint_stops_gracefully_too(server_factory: ServerFactory) -> None:
    srv = server_factory()
    srv.interrupt()
    assert not srv.running
    assert "Application shutdown complete" in srv.stderr()


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRELAY_")}
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        cwd=REPO_ROOT,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("server:\n  prot: 9000\npolicy:\n  default:\n    write: sometimes\n")
    result = run_cli("serve", "--config", str(config), "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 2
    assert "server.prot: unknown key" in result.stderr
    assert "policy.default.write:" in result.stderr
    assert str(config) in result.stderr

    result = run_cli("serve", "--data-dir", str(tmp_path / "d"), env={"TOOLRELAY_PORT": "eighty"})
    assert result.returncode == 2
    assert "server.port (from TOOLRELAY_PORT)" in result.stderr


def test_tui_arguments_go_to_the_tui() -> None:
    result = run_cli("tui", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: toolrelay tui" in result.stdout
    assert "--token" in result.stdout  # the TUI's own parser answered, not ours


async def test_tokens_never_reach_the_logs(server_factory: ServerFactory, workspace: Path) -> None:
    srv = server_factory(BASE_CONFIG)
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            await stream.until("client.attached")
        await http.get(f"/sessions/{sid}", params={"token": srv.token})  # a token in a query
    srv.stop()
    output = srv.all_output()
    assert "token=***" in output  # the WebSocket's query string was logged, redacted
    assert srv.token not in output


async def test_generated_token_is_printed_once_and_kept_private(
    server_factory: ServerFactory,
) -> None:
    srv = server_factory(start=False)
    srv.extra_env["TOOLRELAY_TOKEN"] = ""  # no token configured: one is generated
    srv.token = "unused"
    srv.start()
    token_file = srv.data_dir / "token"
    token = token_file.read_text().strip()
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert f"Token:     {token}   (admin; generated into" in srv.stdout()  # shown once, on stdout
    assert token not in srv.stderr()
    srv.token = token
    async with srv.client() as http:
        assert (await http.get("/sessions")).status_code == 200
    srv.restart()
    assert token_file.read_text().strip() == token  # the same token after a restart
    async with srv.client() as http:
        assert (await http.get("/sessions")).status_code == 200


async def test_sandboxed_shell_cannot_read_the_data_dir(tmp_path: Path) -> None:
    """The data dir holds the token file and the event log; a sandboxed command
    must not be able to print them into the conversation. The server lives under
    /var/tmp here because the sandbox replaces /tmp wholesale anyway."""
    import shutil
    import tempfile

    if shutil.which("bwrap") is None:
        import pytest

        pytest.skip("bubblewrap (bwrap) is not installed")
    root = Path(tempfile.mkdtemp(prefix="toolrelay-hide-", dir="/var/tmp"))
    config = {
        **BASE_CONFIG,
        "workspaces": {"shell": {"sandbox": True}},
        "policy": {"preset": "yolo"},
    }
    srv = ServerProcess(root / "srv", config=config).start()
    try:
        canary = srv.data_dir / "canary.txt"
        canary.write_text("canary-value-1234")
        workspace = root / "ws"
        workspace.mkdir()
        async with srv.client("tester") as http:
            sid = await new_session(http, workspace)
            turn = await start_turn(
                http, sid, use("tu1", "shell", command=f"cat {canary}; ls -A {srv.data_dir}")
            )
            done = await wait_turn(http, sid, turn)
        text = json.dumps(done["results"])
        assert "canary-value-1234" not in text
        assert "events.sqlite3" not in text
        assert canary.read_text() == "canary-value-1234"  # still there, just hidden
    finally:
        srv.stop()
        shutil.rmtree(root, ignore_errors=True)


async def test_banner_and_sessions_name_the_model_they_resolve_to(
    server_factory: ServerFactory, workspace: Path
) -> None:
    """No provider key: the default is the offline scripted model; a key picks its
    provider. A session without a model reports what its turns resolve to."""
    plain = server_factory(BASE_CONFIG)
    assert "  Model:     scripted (no provider key set)" in plain.stdout()
    async with plain.client() as http:
        sid = await new_session(http, workspace)
        session = (await http.get(f"/sessions/{sid}")).json()
        assert session["model"] is None and session["resolved_model"] == "scripted"

    keyed = server_factory(BASE_CONFIG, env={"ANTHROPIC_API_KEY": "sk-ant-test-not-real"})
    assert "  Model:     anthropic/claude-sonnet-4-5 (ANTHROPIC_API_KEY is set)" in keyed.stdout()
    assert "sk-ant-test-not-real" not in keyed.all_output()
    async with keyed.client() as http:
        sid = await new_session(http, workspace)
        listed = (await http.get("/sessions")).json()["sessions"]
        (session,) = [s for s in listed if s["id"] == sid]
        assert session["resolved_model"] == "anthropic/claude-sonnet-4-5"
        r = await http.post("/sessions", json={"workspace": str(workspace), "model": "scripted"})
        assert r.status_code == 201, r.text
        assert r.json()["model"] == "scripted" == r.json()["resolved_model"]

    chosen = server_factory(BASE_CONFIG, env={"TOOLRELAY_MODEL": "scripted"})
    assert "  Model:     scripted (from TOOLRELAY_MODEL)" in chosen.stdout()
