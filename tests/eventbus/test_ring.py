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


def _previous_format_ring(path: str, inode: int, events: list[bytes]) -> None:
    """A ring as the previous build wrote it (magic TRLYRNG1, CRC-32 of the
    seq and the payload), written here byte by byte, independently of Ring."""
    import struct
    import zlib

    with open(path, "wb") as f:
        f.write(struct.pack("<8sQQQ", b"TRLYRNG1", CAPACITY, inode, 0).ljust(HEADER_SIZE, b"\0"))
        body = bytearray(CAPACITY)
        offset = 0
        for seq, payload in enumerate(events, start=1):
            crc = zlib.crc32(payload, zlib.crc32(seq.to_bytes(8, "little")))
            struct.pack_into("<IIQ", body, offset, len(payload), crc, seq)
            body[offset + 16 : offset + 16 + len(payload)] = payload
            offset += (16 + len(payload) + 15) & ~15
        f.write(body)


def test_a_ring_of_the_previous_format_is_recovered_then_switched(tmp_path: Path) -> None:
    path = str(tmp_path / "events.ring")
    events = [_event(seq, 50 * seq) for seq in range(1, 8)]
    _previous_format_ring(path, 3, events)

    # The log process, after the upgrade: what the crash left is read back.
    log_side = Ring.open(path, log_inode=3, capacity=CAPACITY)
    rows, position = log_side.recover(2)  # SQLite had 1 and 2
    assert [row[0] for row in rows] == [3, 4, 5, 6, 7]
    assert [row[6].encode() for row in rows] == events[2:]
    log_side.mark_ingested(position)
    log_side.close()

    # The server starts writing where the scan ended: the ring is of this
    # format from then on, and a crash after that is recovered with it.
    server = Ring.open(path, log_inode=3, capacity=CAPACITY)
    server.start_at(position)
    assert server._map[: len(MAGIC)] == MAGIC
    assert server.write(8, _event(8, 10)) is not None
    assert server.write(9, _event(9, 10)) is not None
    server.close()
    again = Ring.open(path, log_inode=3, capacity=CAPACITY)
    try:
        assert [row[0] for row in again.recover(7)[0]] == [8, 9]
    finally:
        again.close()
