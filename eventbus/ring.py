"""The event ring: where an event becomes durable before anyone sees it.

A fixed-size file beside the log (``<log>.ring``), mapped into memory by the
server and by its log process. The bus copies each event into it at publish
(a ``memcpy`` into the page cache: no system call, no round trip) and may
show the event to subscribers at once: from then on a crash of either
process loses nothing, because the pages belong to the kernel, not to the
process. The log process still commits every event to SQLite (the ring is
not the log: it holds only what SQLite may not have yet); after each commit
it records in the ring's header how far SQLite has it, and the server may
overwrite what lies before. When the log process starts, it first commits
what the ring holds beyond the log's last ``seq`` (events a crash left only
there), so a restarted server's log is complete before anything reads it.

What it promises is what a WAL commit with ``synchronous=NORMAL`` promises
(see eventbus.log): it survives the crash or kill of any process, and a
power failure may lose the newest events, never tear one. Why a ring and not
the round trip: see specs/event-bus-and-trace-catalog.md, "Commit path".

Layout: a 4 KiB header (magic, capacity, the log file's inode, and the ring
position SQLite has everything before), then ``capacity`` bytes of records.
A position is a byte count since the ring was made (it only grows); a
record lies at ``position % capacity``. Each record is a 16-byte header
(payload length, check, seq) and its payload, the envelope (UTF-8 JSON,
which holds the columns the log indexes); records start on 16-byte
boundaries. A record that would cross the end is preceded by a wrap marker
(length ``WRAP``) and starts again at offset 0. The record's header is
written after its payload, and the check tells a record torn by a crash
from a whole one; a record of an earlier lap has a smaller ``seq`` than the
one expected, which ends a scan.

The check is the low 32 bits of the payload's XXH3-64 hash seeded with the
record's ``seq`` (the ``xxhash`` library): a torn or stale record passes it
by chance once in 2**32, as with a CRC-32, for a fraction of the CPU of
zlib's CRC-32 (which has no hardware CRC here), on a path every event takes
(figures: benchmarks/README.md, "Issue 26: the event bus split").

A ring file of any other format (a different magic, such as ``TRLYRNG1``, a
CRC-32 layout no release wrote) is not read: it is made anew, with a warning
naming the file. The ring is not a pure cache (an event may be visible while
only the ring holds it), so a ring of another format whose events SQLite
lacks would lose them; no released build writes another format, so none
exists (see specs/event-bus-and-trace-catalog.md, "Commit path").

Hand-written because it is the domain: the durability guarantee of the
event path, with no library in between to reason about.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import struct
from typing import Any

from xxhash import xxh3_64_intdigest as _xxh3

from eventbus.errors import EventLogError

MAGIC = b"TRLYRNG2"  # records checked with XXH3 (see the module docstring)
HEADER_SIZE = 4096
_HEADER = struct.Struct("<8sQQQ")  # magic, capacity, log inode, ingested position
_INGESTED_AT = 32 - 8
RECORD = struct.Struct("<IIQ")  # payload length, check, seq
ALIGN = 16
WRAP = 0xFFFF_FFFF
_RECORD_SIZE = RECORD.size
_ALIGN_MASK = ALIGN - 1
_pack_record = RECORD.pack_into
_CHECK_MASK = 0xFFFF_FFFF
DEFAULT_CAPACITY = 8 * 1024 * 1024
SUFFIX = ".ring"

log = logging.getLogger("toolrelay.eventbus")


def ring_path(log_path: str) -> str:
    """Where the ring of the log at ``log_path`` lives."""
    return log_path + SUFFIX


def _aligned(size: int) -> int:
    return (size + _ALIGN_MASK) & ~_ALIGN_MASK


def _check(seq: int, payload: bytes | memoryview) -> int:
    """A record's check."""
    return _xxh3(payload, seq) & _CHECK_MASK


class Ring:
    """One side's mapping of the ring file. Open with ``Ring.open``.

    The server writes (``write``) and learns what it may overwrite
    (``release``); the log process reads what a crash left (``recover``) and
    records how far SQLite has it (``mark_ingested``). Positions only grow.
    """

    def __init__(self, path: str, fd: int, mapped: mmap.mmap, capacity: int) -> None:
        self.path = path
        self._fd = fd
        self._map = mapped
        self.capacity = capacity
        # The largest record written to the ring (larger events are made visible
        # once committed instead, see EventBus).
        self.max_record = capacity // 4
        ingested = self.ingested
        self._position = ingested  # the writer's next position (set by start_at)
        self._released = ingested  # the writer may overwrite before this

    # -- opening -----------------------------------------------------------------

    @classmethod
    def open(cls, path: str, *, log_inode: int, capacity: int = DEFAULT_CAPACITY) -> Ring:
        """Open the ring at ``path``, making it (space reserved) if it is missing,
        of another capacity, or of another log file (``log_inode``): a ring
        never resurrects events into a log that is not the one they were for.
        Raises EventLogError naming the path when it cannot be made."""
        if capacity < 64 * 1024 or capacity % ALIGN:
            raise ValueError(f"ring capacity must be >= 64 KiB and a multiple of {ALIGN}")
        size = HEADER_SIZE + capacity
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise EventLogError(f"cannot open the event ring {path!r}: {exc}") from exc
        try:
            header = os.pread(fd, _HEADER.size, 0)
            magic = _HEADER.unpack(header)[0] if len(header) == _HEADER.size else b""
            if magic not in (b"", b"\0" * len(MAGIC), MAGIC):
                log.warning(
                    "event ring %s is in a format this build does not read (%r): made anew",
                    path,
                    magic,
                )
            fresh = (
                magic != MAGIC
                or _HEADER.unpack(header)[1:3] != (capacity, log_inode)
                # (A short file would be SIGBUS, not an error, once mapped.)
                or os.fstat(fd).st_size != size
            )
            if fresh:
                os.ftruncate(fd, 0)
                # Reserved now, so that writing through the mapping can never
                # meet a full disk (which would be SIGBUS, not an error).
                os.posix_fallocate(fd, 0, size)
                os.pwrite(fd, _HEADER.pack(MAGIC, capacity, log_inode, 0), 0)
            mapped = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as exc:
            os.close(fd)
            raise EventLogError(f"cannot make the event ring {path!r}: {exc}") from exc
        return cls(path, fd, mapped, capacity)

    def close(self) -> None:
        """Unmap and close (what was written stays in the file)."""
        if not self._map.closed:
            self._map.close()
            os.close(self._fd)

    # -- the header --------------------------------------------------------------

    @property
    def ingested(self) -> int:
        """The position before which SQLite holds every event of the ring."""
        return int.from_bytes(self._map[_INGESTED_AT : _INGESTED_AT + 8], "little")

    def mark_ingested(self, position: int) -> None:
        """Log process: SQLite now holds every event before ``position``."""
        if position > self.ingested:
            self._map[_INGESTED_AT : _INGESTED_AT + 8] = position.to_bytes(8, "little")

    # -- the server's side -------------------------------------------------------

    def start_at(self, position: int) -> None:
        """Server: write from ``position`` on (where the log process's scan ended)."""
        self._position = self._released = position

    @property
    def position(self) -> int:
        """Server: where the next record goes."""
        return self._position

    def release(self, position: int) -> None:
        """Server: SQLite holds everything before ``position``; it may be overwritten."""
        if position > self._released:
            self._released = position

    def write(self, seq: int, envelope: bytes) -> int | None:
        """Copy one event's envelope in; its end position, or None when it does
        not fit now (the ring is full of what SQLite does not hold yet) or ever
        (larger than ``max_record``). On the publish path: one hash, one copy."""
        payload = envelope
        length = len(payload)
        need = (_RECORD_SIZE + length + _ALIGN_MASK) & ~_ALIGN_MASK
        capacity = self.capacity
        if need > self.max_record:
            return None
        position = self._position
        offset = position % capacity
        room = capacity - offset
        skip = room if need > room else 0
        if position + skip + need - self._released > capacity:
            return None
        mapped = self._map
        if skip:
            _pack_record(mapped, HEADER_SIZE + offset, WRAP, 0, 0)
            position += skip
            offset = 0
        start = HEADER_SIZE + offset
        mapped[start + _RECORD_SIZE : start + _RECORD_SIZE + length] = payload
        check = _xxh3(payload, seq) & _CHECK_MASK  # _check, inline on the hot path
        # The header last: a crash before it leaves a record whose check fails.
        _pack_record(mapped, start, length, check, seq)
        self._position = position = position + need
        return position

    # -- the log process's side --------------------------------------------------

    def recover(self, after_seq: int) -> tuple[list[tuple[Any, ...]], int]:
        """Log process, at start: the rows of the events the ring holds beyond
        ``after_seq`` (contiguous from ``after_seq + 1``), and the position after
        the last whole record read. Events at or below ``after_seq`` are
        skipped (SQLite has them); the scan ends at a torn record, a record of
        an earlier lap, or a gap."""
        rows: list[tuple[Any, ...]] = []
        check = _check
        position = self.ingested
        expected: int | None = None
        mapped = self._map
        for _ in range(self.capacity // ALIGN + 1):  # bounded: one lap at most
            offset = position % self.capacity
            if self.capacity - offset < RECORD.size:
                break
            length, stored, seq = RECORD.unpack_from(mapped, HEADER_SIZE + offset)
            if length == WRAP:
                position += self.capacity - offset
                continue
            need = _aligned(RECORD.size + length)
            if length == 0 or need > self.capacity - offset:
                break
            start = HEADER_SIZE + offset + RECORD.size
            payload = memoryview(mapped)[start : start + length]
            if check(seq, payload) != stored:
                break
            if expected is not None and seq != expected:
                break
            if seq > after_seq:
                if expected is None and seq != after_seq + 1:
                    break  # not the continuation of this log
                # The index columns are the envelope's own fields (a rare path:
                # parsing here spares every publish from writing them twice).
                try:
                    text = bytes(payload).decode()
                    env = json.loads(text)
                    row = (
                        env["seq"],
                        env["session_seq"],
                        env["session_id"],
                        env["type"],
                        env["turn_id"],
                        env["ts"],
                        text,
                    )
                except (ValueError, KeyError, TypeError):
                    break  # not an envelope (a check that matched by chance): the end
                rows.append(row)
            expected = seq + 1
            position += need
        return rows, position
