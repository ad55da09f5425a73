"""The commit path: checkpoints beside the commits, acknowledgements in order."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

from eventbus import EventBus, EventLog
from eventbus.log import CHECKPOINT_BYTES

from .conftest import STEP_TIMEOUT
from .test_log import make_records


def test_commits_never_checkpoint_and_the_checkpointer_does(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    log = EventLog.open(path)
    try:
        assert log._write.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        big = "x" * 4096
        written = 0
        seq = 1
        while written <= 2 * CHECKPOINT_BYTES:
            records = make_records([("s", {"text": big})] * 16, first_seq=seq, start={"s": seq - 1})
            log.append_many(records)
            seq += len(records)
            written += sum(len(r.text) for r in records)
        # The checkpointer thread copies the WAL into the database file by itself.
        deadline = time.monotonic() + 30
        while path.stat().st_size < CHECKPOINT_BYTES:
            assert time.monotonic() < deadline, "no checkpoint ran"
            time.sleep(0.01)
        assert log.count() == seq - 1
    finally:
        log.close()
    with sqlite3.connect(path) as reader:
        assert reader.execute("SELECT COUNT(*) FROM events").fetchone()[0] == seq - 1


async def test_small_and_large_batches_are_delivered_in_order_after_commit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.db"
    log = EventLog.open(path)
    reader = sqlite3.connect(path)
    try:
        bus = EventBus(log)
        await bus.start()
        sub = await bus.subscribe()
        for burst in (1, 3, 200, 1, 70, 2):  # one-chunk and multi-chunk batches
            for i in range(burst):
                bus.publish("message.delta", {"text": str(i)}, session_id=f"s{i % 2}")
            await asyncio.sleep(0)
        expected = bus.last_seq
        seen = 0
        async with asyncio.timeout(STEP_TIMEOUT):
            async for record in sub:
                seen += 1
                assert record.seq == seen
                row = reader.execute("SELECT json FROM events WHERE seq = ?", (record.seq,))
                assert row.fetchone() == (record.text,)
                if seen == expected:
                    break
        await bus.close()
        assert bus.stats().committed == expected
    finally:
        reader.close()
        log.close()
