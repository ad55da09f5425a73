"""``--log-format json`` on a real server subprocess, and ``toolrelay --version``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

from tests.harness import REPO_ROOT, ServerFactory
from tests.server.support import Stream, new_session, start_turn, use, wait_turn


async def _drive(srv: Any, workspace: Path) -> tuple[str, str]:
    """A session, a turn with a call that works and one that fails, and an event
    stream opened with ``?token=`` (the token in a URL, as browsers send it)."""
    (workspace / "notes.txt").write_text("hello\n", encoding="utf-8")
    async with srv.client("logger") as http:
        sid = await new_session(http, workspace)
        url = srv.ws_url(f"/sessions/{sid}/events", after=0)
        async with await Stream.open(url, after=0) as stream:
            tid = await start_turn(
                http,
                sid,
                use("tu_ok", "read_file", path="notes.txt"),
                use("tu_bad", "read_file", path="../outside.txt"),
            )
            assert (await wait_turn(http, sid, tid))["status"] == "completed"
            await stream.until("turn.completed")
        # Bearer on a request whose path also carries the token, for good measure.
        assert (await http.get(f"/sessions/{sid}?token={srv.token}")).status_code == 200
    return sid, tid


async def test_json_logs_are_one_object_per_line_with_tool_call_fields(
    server_factory: ServerFactory, workspace: Path
) -> None:
    srv = server_factory(extra_args=("--log-format", "json"))
    sid, tid = await _drive(srv, workspace)
    srv.stop()
    stderr = srv.stderr()
    assert srv.token not in stderr
    lines = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    assert lines, "the server logged nothing"
    for line in lines:
        assert {"ts", "level", "logger", "message"} <= set(line), line

    requests = [line for line in lines if line.get("kind") == "request"]
    posts = [r for r in requests if r["method"] == "POST" and r["path"] == "/sessions"]
    assert posts and posts[0]["status"] == 201
    assert any("token=***" in r["path"] for r in requests), requests
    # Every request line carries its duration; a session's requests name it.
    assert all(isinstance(r["duration_ms"], int | float) for r in requests), requests
    assert all(r["duration_ms"] >= 0 for r in requests), requests
    turn_gets = [r for r in requests if r["method"] == "GET" and f"/turns/{tid}" in r["path"]]
    assert turn_gets and all((r["session_id"], r["turn_id"]) == (sid, tid) for r in turn_gets)

    calls = {line["tool_use_id"]: line for line in lines if line.get("kind") == "tool_call"}
    assert set(calls) == {"tu_ok", "tu_bad"}
    ok, bad = calls["tu_ok"], calls["tu_bad"]
    for call in (ok, bad):
        assert call["tool"] == "read_file"
        assert (call["session_id"], call["turn_id"]) == (sid, tid)
        assert isinstance(call["duration_ms"], int | float)
    assert ok["outcome"] == "completed"
    assert ok["input_summary"] == 'read_file({"path":"notes.txt"})'
    assert ok["output_bytes"] > 0
    assert ok["error_class"] is None and ok["error"] is None
    # Ended before it ran: its input still comes from the assistant message.
    assert bad["input_summary"] == 'read_file({"path":"../outside.txt"})'
    assert bad["outcome"] == "failed"
    assert bad["error_class"] in ("permission_denied", "not_found", "validation_error")
    assert bad["error"]


async def test_text_logs_stay_text_and_name_each_tool_call(
    server_factory: ServerFactory, workspace: Path
) -> None:
    srv = server_factory()
    await _drive(srv, workspace)
    srv.stop()
    stderr = srv.stderr()
    assert srv.token not in stderr
    assert "token=***" in stderr
    # Request lines end with their duration: ... "POST /sessions HTTP/1.1" 201 Created 3.2ms.
    posts = [line for line in stderr.splitlines() if '"POST /sessions HTTP/1.1" 201 ' in line]
    assert posts, stderr
    assert all(re.search(r" 201 Created \d+\.\dms$", line) for line in posts), posts
    redacted = [line for line in stderr.splitlines() if "token=***" in line and "HTTP/1.1" in line]
    assert redacted and all(re.search(r" \d+\.\dms$", line) for line in redacted), redacted
    assert "tool call read_file (tu_ok) completed in" in stderr
    assert "tool call read_file (tu_bad) failed:" in stderr
    # Not JSON.
    first = next(line for line in stderr.splitlines() if line.strip())
    assert not first.startswith("{")


def test_version_prints_the_installed_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "server.cli", "--version"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"toolrelay {version('toolrelay')}"
