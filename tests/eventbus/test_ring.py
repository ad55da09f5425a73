"""The event ring: what the server copies in, a restart's log process gets back."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from eventbus.ring import HEADER_SIZE, MAGIC, RECORD, Ring

CAPACITY = 64 * 1024


def _event(seq: int, size: int) -> bytes:
    envelope = {
        "seq": seq,
        "session_seq": seq,
        "id": f"evt_{seq}",
        "type": "message.delta",
        "session_id": "ses_1",
        "turn_id": "trn_1",
        "ts": "2026-11-24T00:00:00.000000Z",
        "data": {"text": "x" * size},
    }
    return json.dumps(envelope).encode()


def _write_laps(ring: Ring, rng: random.Random, count: int, committed_lag: int) -> list[int]:
    """Write ``count`` events of random sizes; SQLite "commits" all but the last
    ``committed_lag`` of them (released and marked). Returns the end positions."""
    ends: list[int] = []
    for seq in range(1, count + 1):
        end = ring.write(seq, _event(seq, rng.randrange(0, 3000)))
        assert end is not None, f"ring full at seq {seq}"
        ends.append(end)
        if seq > committed_lag:
            done = ends[seq - committed_lag - 1]
            ring.release(done)
            ring.mark_ingested(done)
    return ends


@pytest.mark.parametrize("seed", range(5))
def test_a_restart_gets_back_exactly_what_sqlite_lacks(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    path = str(tmp_path / "events.ring")
    ring = Ring.open(path, log_inode=7, capacity=CAPACITY)
    count = rng.randrange(200, 400)  # several laps of the ring
    lag = rng.randrange(1, 12)
    ends = _write_laps(ring, rng, count, lag)
    ring.close()

    again = Ring.open(path, log_inode=7, capacity=CAPACITY)
    try:
        committed = count - lag
        rows, position = again.recover(committed)
        assert [row[0] for row in rows] == list(range(committed + 1, count + 1))
        assert position == ends[-1]
        assert json.loads(rows[0][6])["seq"] == rows[0][0] and rows[0][2] == "ses_1"
        # SQLite may be ahead of the header (a crash between commit and mark):
        # what it has is skipped, the rest still comes back.
        rows, _ = again.recover(count - 1)
        assert [row[0] for row in rows] == [count]
        assert again.recover(count)[0] == []
    finally:
        again.close()


def test_a_torn_record_ends_the_scan(tmp_path: Path) -> None:
    path = str(tmp_path / "events.ring")
    ring = Ring.open(path, log_inode=1, capacity=CAPACITY)
    for seq in range(1, 6):
        assert ring.write(seq, _event(seq, 100)) is not None
    inside_last = ring.position - 40  # the tail of the last record's payload
    ring._map[HEADER_SIZE + inside_last] ^= 0xFF  # as a crash mid-copy leaves it
    rows, _ = ring.recover(0)
    assert [row[0] for row in rows] == [1, 2, 3, 4]
    ring.close()


def test_a_whole_record_that_is_no_envelope_ends_the_scan(tmp_path: Path) -> None:
    ring = Ring.open(str(tmp_path / "events.ring"), log_inode=1, capacity=CAPACITY)
    try:
        assert ring.write(1, _event(1, 10)) is not None
        assert ring.write(2, b"not an envelope") is not None  # its check is right
        assert ring.write(3, _event(3, 10)) is not None
        assert [row[0] for row in ring.recover(0)[0]] == [1]
    finally:
        ring.close()


def test_a_ring_of_another_log_is_reset_not_replayed(tmp_path: Path) -> None:
    path = str(tmp_path / "events.ring")
    ring = Ring.open(path, log_inode=1, capacity=CAPACITY)
    assert ring.write(1, _event(1, 10)) is not None
    ring.close()
    other = Ring.open(path, log_inode=2, capacity=CAPACITY)
    try:
        assert other.recover(0) == ([], 0)
    finally:
        other.close()


def test_a_cut_short_ring_file_is_made_again(tmp_path: Path) -> None:
    path = tmp_path / "events.ring"
    ring = Ring.open(str(path), log_inode=1, capacity=CAPACITY)
    assert ring.write(1, _event(1, 10)) is not None
    ring.close()
    with open(path, "r+b") as f:
        f.truncate(HEADER_SIZE + 100)  # the header still says it is whole
    again = Ring.open(str(path), log_inode=1, capacity=CAPACITY)
    try:
        assert again.recover(0) == ([], 0)
        assert again.write(1, _event(1, 10)) is not None
    finally:
        again.close()


def test_a_full_ring_refuses_until_released_and_a_huge_event_never_fits(tmp_path: Path) -> None:
    ring = Ring.open(str(tmp_path / "events.ring"), log_inode=1, capacity=CAPACITY)
    try:
        ends = []
        seq = 0
        while True:
            seq += 1
            end = ring.write(seq, _event(seq, 1000))
            if end is None:
                break
            ends.append(end)
        assert len(ends) > 40  # about 64 KiB of ~1.1 KB records
        ring.release(ends[len(ends) // 2])  # SQLite has half of them now
        assert ring.write(seq, _event(seq, 1000)) is not None
        assert ring.write(seq + 1, _event(seq + 1, CAPACITY // 4)) is None
        assert RECORD.size == 16
    finally:
        ring.close()


def test_a_record_moved_to_another_seq_fails_its_check(tmp_path: Path) -> None:
    # The seq is part of the check: a record of an earlier lap whose header
    # was rewritten with the expected seq (a torn header) does not pass.
    ring = Ring.open(str(tmp_path / "events.ring"), log_inode=1, capacity=CAPACITY)
    try:
        assert ring.write(1, _event(1, 10)) is not None
        length, check, seq = RECORD.unpack_from(ring._map, HEADER_SIZE)
        assert seq == 1
        RECORD.pack_into(ring._map, HEADER_SIZE, length, check, 2)
        assert ring.recover(1) == ([], 0)
        RECORD.pack_into(ring._map, HEADER_SIZE, length, check, 1)
        assert [row[0] for row in ring.recover(0)[0]] == [1]
    finally:
        ring.close()


def test_a_ring_of_another_format_is_made_anew_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A ring whose magic is not this format's (TRLYRNG1 was never released)
    is not read: it is made anew, and the log says so."""
    path = str(tmp_path / "events.ring")
    first = Ring.open(path, log_inode=3, capacity=CAPACITY)
    assert first.write(1, _event(1, 10)) is not None
    first._map[: len(MAGIC)] = b"TRLYRNG1"
    first.close()
    with caplog.at_level("WARNING", logger="toolrelay.eventbus"):
        again = Ring.open(path, log_inode=3, capacity=CAPACITY)
    try:
        assert again._map[: len(MAGIC)] == MAGIC
        assert again.recover(0) == ([], 0)
        assert "format this build does not read" in caplog.text and path in caplog.text
    finally:
        again.close()
