"""One server per data dir: a second ``toolrelay serve`` on a data dir in use
exits 1 at once, naming the data dir and the pid holding it, and touches
nothing there (no token rewritten, no database opened). The lock dies with
its holder, kill -9 included: a restart is never blocked by a stale lock."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from tests.harness import REPO_ROOT, ServerFactory, _scrubbed_env
from tests.reliability.support import logged_events
from tests.server.support import new_session

SERVE = [sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1", "--port", "0"]


def second_server(data_dir: Path, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = _scrubbed_env()
    env["PYTHONPATH"] = str(REPO_ROOT)
    if token:
        env["TOOLRELAY_TOKEN"] = token
    return subprocess.run(
        [*SERVE, "--data-dir", str(data_dir)],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def snapshot(data_dir: Path) -> dict[str, bytes | None]:
    """Which files there are, and the content of those the first server writes
    once (the databases change under the first server itself)."""
    return {
        p.name: p.read_bytes() if p.name in ("lock", "token") else None for p in data_dir.iterdir()
    }


async def test_a_second_server_on_the_same_data_dir_exits_1(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    first = server_factory()
    async with first.client("a") as http:
        await new_session(http, tmp_path)
    # The session's event is committed soon after the answer: wait (bounded) for it.
    async with asyncio.timeout(60):
        while True:
            if logged_events(first.data_dir):
                break
            await asyncio.sleep(0.02)
    before = snapshot(first.data_dir)
    events_before = logged_events(first.data_dir)
    assert events_before

    # With and without a token of its own (without one it would generate a token file).
    for token in (None, "another-token-" + "x" * 20):
        result = second_server(first.data_dir, token)
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        assert result.stdout == ""
        expected = f"toolrelay: data dir {first.data_dir} is in use by pid {first.pid}"
        assert expected in result.stderr.splitlines(), result.stderr

    assert first.running
    assert snapshot(first.data_dir) == before, "the second server touched the data dir"
    assert logged_events(first.data_dir) == events_before
    async with first.client("a") as http:
        assert (await http.get("/healthz")).json()["status"] == "ok"
        await new_session(http, tmp_path)  # the first one still works normally

    # kill -9 releases the lock with the process: a restart takes it at once.
    first.kill()
    first.start()
    async with first.client("a") as http:
        assert (await http.get("/healthz")).status_code == 200
    assert (first.data_dir / "lock").read_text().strip() == str(first.pid)
