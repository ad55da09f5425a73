"""dispatcher.reaper: nothing an unsandboxed command starts outlives the
process that started it, ``kill -9`` included.

The "server" here is a small Python process running ProcessRunner exactly
as the shell tool does; the test kills it with SIGKILL and watches (psutil,
bounded waits) for every process it left: a background child in the
command's group and a ``setsid`` daemon that left the group. A control run
without the reaper shows both would survive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from dispatcher.reaper import MARKER_VAR, ChildReaper

REPO = Path(__file__).resolve().parents[2]
WAIT = 60.0  # generous: polls return as soon as the state holds

FAKE_SERVER = """
import asyncio, subprocess, sys
from dispatcher.process import ProcessRunner

COMMAND = sys.argv[2]

async def main() -> None:
    if sys.argv[1] == "reaper":
        runner = ProcessRunner(
            ["/bin/bash", "-c", COMMAND], cwd="/", env={"PATH": "/usr/bin:/bin"},
            timeout=600, output_limit=4096, stream_limit=4096,
            emit=lambda stream, text: print(text, end="", flush=True),
            cancel_event=asyncio.Event(),
        )
        await runner.run()
    else:  # control: a plain group leader, no reaper
        proc = await asyncio.create_subprocess_exec(
            "/bin/bash", "-c", COMMAND, start_new_session=True, stdout=None
        )
        await proc.wait()

asyncio.run(main())
"""


def _alive(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        # exec -a puts the marker first; the shells that start them only mention it.
        argv0 = (proc.info["cmdline"] or [""])[0]
        if argv0.startswith(marker) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def _wait_for(predicate: object, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def marker() -> Iterator[str]:
    value = f"toolrelay-reaper-test-{uuid.uuid4().hex[:10]}"
    yield value
    for proc in _alive(value):  # whatever a failed test left: ours, by PID
        proc.kill()


def _start_fake_server(mode: str, marker: str) -> subprocess.Popen[bytes]:
    command = (
        f"bash -c 'exec -a {marker}-group sleep 1000' & "
        f"setsid bash -c 'exec -a {marker}-daemon sleep 1000' & "
        "wait"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", FAKE_SERVER, mode, command],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("mode", ["reaper", "control"])
def test_kill_9_of_the_server_leaves_no_child(mode: str, marker: str) -> None:
    server = _start_fake_server(mode, marker)
    try:
        _wait_for(lambda: len(_alive(marker)) == 2, "the command's two sleeps")
        server.send_signal(signal.SIGKILL)
        server.wait(WAIT)
        if mode == "control":
            # Without the reaper both outlive the server: the test can tell.
            time.sleep(0.5)
            assert len(_alive(marker)) == 2
        else:
            _wait_for(lambda: not _alive(marker), "every child to die with the server")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(WAIT)


def test_watchdog_reaps_tracked_groups_and_marked_strays_when_closed(marker: str) -> None:
    reaper = ChildReaper()
    reaper.start()
    try:
        first = reaper.watchdog_pid
        assert first is not None
        # The watchdog dies: the next track() starts a new one.
        os.kill(first, signal.SIGKILL)
        _wait_for(lambda: reaper.watchdog_pid is None, "the watchdog to exit")
        tracked = subprocess.Popen(
            ["/bin/bash", "-c", f"exec -a {marker}-tracked sleep 1000"], start_new_session=True
        )
        reaper.track(tracked.pid)
        second = reaper.watchdog_pid
        assert second is not None and second != first
        # Not tracked, in its own session, but carrying the marker.
        stray = subprocess.Popen(
            ["/bin/bash", "-c", f"exec -a {marker}-stray sleep 1000"],
            start_new_session=True,
            env=reaper.environment({"PATH": os.defpath, MARKER_VAR: "spoofed"}),
        )
        # Unmarked and untracked: not the watchdog's business.
        bystander = subprocess.Popen(
            ["/bin/bash", "-c", f"exec -a {marker}-bystander sleep 1000"], start_new_session=True
        )
        _wait_for(lambda: len(_alive(marker)) == 3, "three sleeps")
        reaper.close()  # as a dying server's descriptors would
        assert tracked.wait(WAIT) == -signal.SIGKILL
        assert stray.wait(WAIT) == -signal.SIGKILL
        assert bystander.poll() is None
        bystander.kill()
        bystander.wait(WAIT)
    finally:
        reaper.close()


def test_untracked_group_is_not_killed(marker: str) -> None:
    reaper = ChildReaper()
    try:
        done = subprocess.Popen(
            ["/bin/bash", "-c", f"exec -a {marker}-done sleep 1000"], start_new_session=True
        )
        reaper.track(done.pid)
        reaper.untrack(done.pid)
        _wait_for(lambda: len(_alive(marker)) == 1, "the sleep")
        reaper.close()
        time.sleep(0.2)
        assert done.poll() is None  # forgotten: a reused group id is never hit
    finally:
        reaper.close()
        done.kill()
        done.wait(WAIT)
