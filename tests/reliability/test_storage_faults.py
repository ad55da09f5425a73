"""Storage faults, for real: a real server whose data dir is a small tmpfs
that a big file fills up, then frees; and a log writer process killed under
a running server.

- Disk full: requests that need a write fail 503 ``storage_unavailable``
  naming the cause, ``/healthz`` answers 503 ``degraded`` with the cause, the
  process stays up and retries; once space returns, it resumes by itself:
  ``/healthz`` is ok again, a new turn works, every event acknowledged before
  is still replayable and the turns caught by the fault ended properly.
- Where it cannot continue (the log writer is gone): the process exits 1
  within seconds with one line saying why, and a restart recovers.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import psutil
import pytest

from tests.harness import ServerFactory, ServerProcess
from tests.reliability.conftest import DEBUG_ENV, config
from tests.reliability.support import assert_gapless, logged_events, server_problems
from tests.server.support import Stream, new_session, start_turn, use, wait_turn

TMPFS_SIZE = 24 * 1024 * 1024
BIG = "z" * 200_000  # per call: its input and result each go into several events


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs (root only; skipped where mounting is impossible)."""
    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mountpoint)],
        capture_output=True,
        timeout=30,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], timeout=30)


def fill(path: Path) -> int:
    """Write ``path`` until the disk is full (bounded by the disk's size)."""
    chunk = b"\0" * (1 << 20)
    written = 0
    with open(path, "wb") as f:
        for _ in range(TMPFS_SIZE // len(chunk) + 4):
            try:
                f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
            written += len(chunk)
    return written


async def health(http: httpx2.AsyncClient) -> tuple[int, dict[str, Any]]:
    response = await http.get("/healthz")
    return response.status_code, response.json()


async def test_a_full_disk_degrades_the_server_until_space_returns(
    server_factory: ServerFactory, small_disk: Path, tmp_path: Path
) -> None:
    srv = server_factory(config(), env=DEBUG_ENV, start=False)
    srv.data_dir = small_disk / "data"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    try:
        srv.start()
        await _full_disk_scenario(srv, small_disk, workspace)
    finally:
        srv.stop()
    assert not server_problems(srv), server_problems(srv)


async def _full_disk_scenario(srv: ServerProcess, disk: Path, workspace: Path) -> None:
    async with srv.client("disk", timeout=30) as http:
        sid = await new_session(http, workspace)
        first = await start_turn(http, sid, use("a1", "rl_echo", text="before the fault"))
        assert (await wait_turn(http, sid, first))["status"] == "completed"
        async with await Stream.open(
            srv.ws_url(f"/sessions/{sid}/events", after=0), after=0
        ) as stream:
            await stream.until("turn.completed")
            acknowledged = list(stream.events)

        assert fill(disk / "filler") > 0
        # Writes now fail as soon as SQLite needs a new page: push turns with
        # large events until the server says so (bounded).
        refused: httpx2.Response | None = None
        started: list[str] = []
        async with asyncio.timeout(60):
            for i in range(400):
                response = await http.post(
                    f"/sessions/{sid}/turns",
                    json={"tool_uses": [use(f"b{i}", "rl_echo", text=BIG)]},
                )
                if response.status_code == 503:
                    refused = response
                    break
                if response.status_code == 202:
                    started.append(response.json()["turn_id"])
                else:
                    assert response.status_code == 409, response.text
                    await asyncio.sleep(0.02)
        assert refused is not None, "the full disk never showed"
        error = refused.json()["error"]
        assert error["code"] == "storage_unavailable", error
        assert "disk full" in error["message"] and "disk full" in error["cause"], error

        # /healthz tells the truth while the fault lasts (bounded wait: a
        # failed state-database write shows at once, a log write within a retry).
        async with asyncio.timeout(30):
            while True:
                status, body = await health(http)
                if body["status"] == "degraded":
                    break
                await asyncio.sleep(0.05)
        assert status == 503 and "disk full" in body["cause"], body
        assert srv.running
        # Reads still work during the fault.
        assert (await http.get(f"/sessions/{sid}")).status_code == 200

        (disk / "filler").unlink()
        async with asyncio.timeout(30):
            while True:
                if (await health(http))[1]["status"] == "ok":
                    break
                await asyncio.sleep(0.05)
        assert (await health(http))[0] == 200

        # Every turn caught by the fault ends, and a new turn works.
        for tid in started:
            assert (await wait_turn(http, sid, tid, within=30))["status"] != "running"
        async with asyncio.timeout(30):
            while True:
                response = await http.post(
                    f"/sessions/{sid}/turns",
                    json={"tool_uses": [use("after", "rl_echo", text="after the fault")]},
                )
                if response.status_code == 202:
                    break
                assert response.status_code == 409, response.text
                await asyncio.sleep(0.05)
        last = response.json()["turn_id"]
        assert (await wait_turn(http, sid, last, within=30))["status"] == "completed"

    # Every event acknowledged before the fault is still replayable, unchanged,
    # and each turn's stream ends with its terminal event.
    async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0), after=0) as replay:
        await replay.until("turn.completed", lambda e: e["turn_id"] == last, within=30)
    assert replay.events[: len(acknowledged)] == acknowledged
    ends = {
        e["turn_id"]
        for e in replay.events
        if e["type"].startswith("turn.") and e["type"] != "turn.started"
    }
    assert {first, *started, last} <= ends
    assert_gapless(logged_events(srv.data_dir))


def _log_process(srv: ServerProcess) -> psutil.Process:
    for child in psutil.Process(srv.pid).children(recursive=True):
        if any("eventbus.log_server" in part for part in child.cmdline()):
            return child
    raise AssertionError("no event log process under the server")


async def test_the_server_exits_1_when_its_log_writer_is_gone(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    srv = server_factory(config(), env=DEBUG_ENV)
    async with srv.client("x") as http:
        sid = await new_session(http, tmp_path)
        tid = await start_turn(http, sid, use("e1", "rl_echo", text="kept"))
        assert (await wait_turn(http, sid, tid))["status"] == "completed"
    before = logged_events(srv.data_dir)
    os.kill(_log_process(srv).pid, signal.SIGKILL)
    assert srv.proc is not None
    code = await asyncio.to_thread(srv.proc.wait, 30)
    assert code == 1, srv.stderr()
    lines = [line for line in srv.stderr().splitlines() if line.startswith("toolrelay:")]
    assert len(lines) == 1 and "the event log failed" in lines[0], srv.stderr()
    # A supervisor's restart recovers; what was logged is kept.
    srv.start()
    assert logged_events(srv.data_dir)[: len(before)] == before
    async with srv.client("x") as http:
        assert (await health(http))[0] == 200
        tid = await start_turn(http, sid, use("e2", "rl_echo", text="again"))
        assert (await wait_turn(http, sid, tid))["status"] == "completed"
