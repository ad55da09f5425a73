"""Durability end to end: the log's child process, read back through SQLite itself."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
from pathlib import Path

import psutil
import pytest

from eventbus import BusClosed, EventBus, EventLog, EventLogError
from eventbus.ring import ring_path

from .conftest import STEP_TIMEOUT, mode_options, running_bus, take


@pytest.mark.parametrize("log_mode", ["process", "thread"], indirect=True)
async def test_every_event_is_in_a_file_before_anyone_sees_it(
    log_mode: str, mode_log: EventLog | None, log_path: Path
) -> None:
    """In the SQLite file, or (with the log process) in the event ring's file,
    which a restart commits from (see the ring tests in test_commit_path.py)."""
    reader = sqlite3.connect(log_path)  # a separate connection, as another process would
    ring = Path(ring_path(str(log_path))) if log_mode == "process" else None
    # A small ring, so that reading it whole for an event costs little.
    small = {"ring_bytes": 64 * 1024} if ring is not None else {}
    try:
        async with running_bus(mode_log, **mode_options(log_mode), **small) as bus:
            sub = await bus.subscribe()

            async def publisher() -> None:
                for i in range(300):
                    bus.publish("message.delta", {"text": str(i)}, session_id=f"s{i % 3}")
                    if i % 10 == 0:
                        await asyncio.sleep(0)

            task = asyncio.create_task(publisher())
            checked = 0
            async with asyncio.timeout(STEP_TIMEOUT):
                async for record in sub:
                    row = reader.execute(
                        "SELECT session_id, session_seq, json FROM events WHERE seq = ?",
                        (record.seq,),
                    ).fetchone()
                    if row is None and ring is not None:
                        assert _holds(ring, record.text), record
                    else:
                        assert row == (record.session_id, record.session_seq, record.text)
                    checked += 1
                    if checked == 300:
                        break
            await task
    finally:
        reader.close()


def _holds(file: Path, text: str) -> bool:
    return text.encode() in file.read_bytes()


async def test_the_child_process_is_reaped_on_close(log_path: Path) -> None:
    log = EventLog.open(log_path)
    try:
        bus = EventBus(log)
        await bus.start()
        pid = bus.log_process_pid
        assert pid is not None and pid != os.getpid()
        assert psutil.Process(pid).ppid() == os.getpid()
        bus.publish("turn.started", {}, session_id="s")
        await bus.close()
        assert not psutil.pid_exists(pid)
        assert log.count() == 1
    finally:
        log.close()


async def test_a_dead_log_process_stops_the_bus_loudly(log_path: Path) -> None:
    log = EventLog.open(log_path)
    try:
        bus = EventBus(log)
        await bus.start()
        sub = await bus.subscribe(session_id="s")
        bus.publish("turn.started", {}, session_id="s")
        await bus.flush()
        pid = bus.log_process_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the child this test's bus started
        bus.publish("turn.completed", {"usage": None}, session_id="s")
        with pytest.raises(BusClosed) as caught:
            await bus.flush()
        assert isinstance(caught.value.__cause__, EventLogError)
        assert "exited unexpectedly" in str(caught.value.__cause__)
        # The subscriber got what was durable (the second event is in the ring
        # whether or not it was shown), then the failure.
        seen = [r.session_seq for r in await take(sub, 1)]
        with contextlib.suppress(BusClosed):
            seen.append((await anext(sub)).session_seq)
        with pytest.raises(BusClosed):
            await anext(sub)
        with pytest.raises(BusClosed, match="log failure"):
            bus.publish("turn.started", {}, session_id="s")
        assert not bus.running
        await bus.close()
        assert log.count() == 1
        # The restart's log process commits what was seen from the ring.
        async with running_bus(log) as again:
            assert again.last_seq == 2
        assert log.count() == 2 >= len(seen)
    finally:
        log.close()


async def test_the_log_process_ignores_ctrl_c(log_path: Path) -> None:
    log = EventLog.open(log_path)
    try:
        async with running_bus(log) as bus:
            pid = bus.log_process_pid
            assert pid is not None
            os.kill(pid, signal.SIGINT)
            for i in range(20):
                bus.publish("message.delta", {"text": str(i)}, session_id="s")
                await asyncio.sleep(0)
            await bus.flush()
            assert log.count() == 20
    finally:
        log.close()


async def test_an_unusable_log_file_fails_start_and_leaves_no_process(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    log = EventLog.open(path)
    log.close()
    children_before = {p.pid for p in psutil.Process().children()}
    path.write_bytes(b"garbage, not sqlite " * 100)
    bus = EventBus(log)  # the path was fine when opened; now it is not a database
    with pytest.raises(EventLogError) as caught:
        await bus.start()
    assert str(path) in str(caught.value)
    assert not bus.running
    await bus.close()
    leftover = {p.pid for p in psutil.Process().children()} - children_before
    assert not leftover


async def test_pages_and_prune_go_through_the_process(log_path: Path) -> None:
    log = EventLog.open(log_path)
    try:
        async with running_bus(log, replay_page_size=4) as bus:
            for i in range(30):
                bus.publish("message.delta", {"text": "é\u2028" + str(i)}, session_id="ses_ü")
            await bus.flush()
            sub = await bus.subscribe(session_id="ses_ü", after=3)
            got = await take(sub, 27)
            assert [r.session_seq for r in got] == list(range(4, 31))
            assert got[0].event.data == {"text": "é\u20283"}
            assert got[0].session_id == "ses_ü"
            assert await bus.prune(keep_last=5) == 25
            assert log.oldest_retained_seq() == 26  # seen through the parent's own connection
    finally:
        log.close()
