"""The event log's child process: owns the SQLite writer, answers over pipes.

Started by ``eventbus.log_access.ProcessLogAccess``; not meant to be run by
hand. It imports only the standard library and ``eventbus.log`` (which stays
free of pydantic), so it starts in a few tens of milliseconds.

Protocol, over the child's stdin (requests) and stdout (replies): each frame
is one op byte, a 4-byte big-endian length and that many payload bytes
(UTF-8). Requests are answered strictly in order, one reply each.

- handshake (child -> parent, once): ``K`` + JSON ``{"pid", "last_seq",
  "sessions", "ring": {"path", "capacity", "inode", "position"}}`` or ``E`` +
  error JSON, after which the child exits. Before it, the child commits what
  the ring holds beyond the log (events a crash left only there).
- ``A`` append: the ring position SQLite will hold everything before once
  this batch is in (decimal; 0: none, see eventbus.ring) + ``"\\n"`` + the
  index columns as a JSON array of ``[seq, session_seq, session_id, type,
  turn_id, ts]`` + ``"\\n"`` + the envelopes (UTF-8 JSON) joined by 0x1E, in
  the same order (``eventbus.log.unpack_rows``): the columns travel beside
  the text, nothing is parsed out of it. Reply ``K`` with an empty payload
  once committed (and the ring's header updated).
- ``R`` replay: JSON ``{"session_id", "after", "limit", "sessions"?,
  "max_bytes"?, "through"?}`` (``through``: refuse with ``behind`` unless the
  log holds every event up to that seq). Reply ``K`` +
  metadata JSON + ``"\\n"`` + texts joined by 0x1E (see ``EventLog.replay_page``).
- ``P`` prune: JSON ``{"keep_last", "max_bytes", "max_age_s"}`` (each may be
  null). Reply ``K`` + the number deleted.
- Errors: ``E`` + JSON ``{"kind": "expired"|"storage"|"sequence"|"behind"|"log",
  "message", ...}`` (``storage`` adds ``cause``: the write may succeed once
  the fault clears; ``sequence``: an append that does not continue the log,
  refused because an earlier one failed); the child keeps serving. End of
  input ends the child (the parent closed the pipe, or died).

The parent does not wait for one append's reply before sending the next
(eventbus.bus): appends queue in the pipe, each committed only if it starts
right after the last ``seq`` written, so a failed append makes every append
behind it fail too instead of leaving a hole. Appends that arrived together
(whatever one read of the pipe returned) are committed in one transaction:
the parent sends events as they are published, and the child groups them by
itself when they come faster than it commits. Each still gets its own reply.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import struct
import sys
from typing import BinaryIO

from eventbus.errors import CursorExpired, EventLogError
from eventbus.log import EventLog, LogBehind, OutOfSequence, Row, StorageFault, unpack_rows
from eventbus.ring import DEFAULT_CAPACITY, Ring, ring_path

HEADER = struct.Struct(">cI")
OK = b"K"
ERROR = b"E"
APPEND = b"A"
REPLAY = b"R"
PRUNE = b"P"
# A pipe holds 64 KiB by default and the parent's event loop moves at most
# that much per iteration, so a 1 MiB batch would need 16 iterations of a
# possibly busy loop. Linux lets a pipe grow (up to /proc/sys/fs/pipe-max-size,
# 1 MiB by default); either end may do it, so the child grows both.
PIPE_SIZE = 1 << 20
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ on Linux


def _grow_pipe(stream: BinaryIO) -> None:
    with contextlib.suppress(ImportError, OSError, ValueError):
        import fcntl

        fcntl.fcntl(stream.fileno(), getattr(fcntl, "F_SETPIPE_SZ", _F_SETPIPE_SZ), PIPE_SIZE)


def frame(op: bytes, payload: bytes) -> bytes:
    """One wire frame."""
    return HEADER.pack(op, len(payload)) + payload


class _FrameReader:
    """Frames from a pipe, as many as one read returns: a read takes whatever
    the pipe holds (up to PIPE_SIZE), so the frames that queued while the
    child was committing come out together."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()

    def frames(self) -> list[tuple[bytes, bytes]] | None:
        """The complete frames available (at least one), or None at end of input."""
        buffer = self._buffer
        while True:
            out: list[tuple[bytes, bytes]] = []
            start = 0
            while len(buffer) - start >= HEADER.size:
                op, size = HEADER.unpack_from(buffer, start)
                stop = start + HEADER.size + size
                if stop > len(buffer):
                    break
                out.append((op, bytes(buffer[start + HEADER.size : stop])))
                start = stop
            del buffer[:start]
            if out:
                return out
            chunk = os.read(self._fd, PIPE_SIZE)
            if not chunk:
                return None  # (a partial frame at end of input is dropped)
            buffer += chunk


def _split_append(payload: bytes) -> tuple[int, str, str]:
    """An append's ring position, index columns and texts (one decode)."""
    ring_end, _, rest = payload.decode().partition("\n")
    meta, _, texts = rest.partition("\n")
    return int(ring_end), meta, texts


def _append_together(log: EventLog, ring: Ring | None, payloads: list[bytes]) -> list[bytes]:
    """Replies to consecutive appends, committed in one transaction when they
    all can be; else each on its own (so each reply says what became of it)."""
    if len(payloads) > 1:
        rows: list[Row] = []
        ring_end = 0
        try:
            for payload in payloads:
                end, meta, texts = _split_append(payload)
                ring_end = max(ring_end, end)
                rows += unpack_rows(meta, texts)
            log.append_rows(rows)
        except Exception:
            # A commit that reported an error may have landed all the same: the
            # log then holds every seq of these appends, which is what OK means.
            landed = bool(rows) and log.last_seq() >= rows[-1][0]
        else:
            landed = True
        if landed:
            if ring is not None:
                ring.mark_ingested(ring_end)
            return [frame(OK, b"")] * len(payloads)
    replies = []
    for payload in payloads:
        try:
            replies.append(frame(OK, handle(log, APPEND, payload, ring)))
        except Exception as exc:
            replies.append(frame(ERROR, _error_payload(exc)))
    return replies


def _error_payload(exc: Exception) -> bytes:
    if isinstance(exc, CursorExpired):
        body: dict[str, object] = {
            "kind": "expired",
            "message": str(exc),
            "cursor": exc.cursor,
            "oldest_cursor": exc.oldest_cursor,
            "session_id": exc.session_id,
        }
    elif isinstance(exc, StorageFault):
        body = {"kind": "storage", "message": str(exc), "cause": exc.cause}
    elif isinstance(exc, OutOfSequence):
        body = {"kind": "sequence", "message": str(exc)}
    elif isinstance(exc, LogBehind):
        body = {"kind": "behind", "message": str(exc)}
    else:
        body = {"kind": "log", "message": str(exc)}
    return json.dumps(body).encode()


def handle(log: EventLog, op: bytes, payload: bytes, ring: Ring | None = None) -> bytes:
    """Run one request against the log; the reply payload."""
    if op == APPEND:
        # One decode of the whole request: SQLite stores the envelopes as text.
        ring_end, meta, texts = _split_append(payload)
        log.append_packed(meta, texts)
        if ring is not None:
            ring.mark_ingested(ring_end)
        return b""
    if op == REPLAY:
        request = json.loads(payload)
        through = request.get("through") or 0
        if log.written_through < through:
            raise LogBehind(
                f"event log {log.path!r} holds events up to seq {log.written_through}, "
                f"the replay needs them up to {through}"
            )
        meta, joined = log.replay_page(
            request["session_id"],
            request["after"],
            request["limit"],
            sessions=request.get("sessions"),
            max_bytes=request.get("max_bytes"),
        )
        return (meta + "\n" + (joined or "")).encode()
    if op == PRUNE:
        policy = json.loads(payload)
        deleted = log.prune(
            keep_last=policy.get("keep_last"),
            max_bytes=policy.get("max_bytes"),
            max_age_s=policy.get("max_age_s"),
        )
        return str(deleted).encode()
    raise EventLogError(f"unknown log request op {op!r}")


def _open(path: str, ring_capacity: int) -> tuple[EventLog, Ring, dict[str, object]]:
    """Open the log and its ring, commit what a crash left only in the ring;
    the handshake's body."""
    log = EventLog.open(path)
    try:
        inode = os.stat(path).st_ino
        ring = Ring.open(ring_path(path), log_inode=inode, capacity=ring_capacity)
        try:
            rows, position = ring.recover(log.last_seq())
            if rows:
                log.append_rows(rows)
            ring.mark_ingested(position)
            hello: dict[str, object] = {
                "pid": os.getpid(),
                "last_seq": log.last_seq(),
                "sessions": log.session_counters(),
                "ring": {
                    "path": ring.path,
                    "capacity": ring.capacity,
                    "inode": inode,
                    "position": position,
                    "recovered": len(rows),
                },
            }
        except BaseException:
            ring.close()
            raise
    except BaseException:
        log.close()
        raise
    return log, ring, hello


def serve(
    path: str, requests: BinaryIO, replies: BinaryIO, ring_capacity: int = DEFAULT_CAPACITY
) -> int:
    """Open the log, shake hands, answer requests until end of input."""
    try:
        log, ring, hello = _open(path, ring_capacity)
    except (EventLogError, OSError) as exc:
        error = (
            exc
            if isinstance(exc, EventLogError)
            else EventLogError(f"cannot open event log {path!r}: {exc}")
        )
        replies.write(frame(ERROR, _error_payload(error)))
        replies.flush()
        return 1
    replies.write(frame(OK, json.dumps(hello).encode()))
    replies.flush()
    reader = _FrameReader(requests.fileno())
    try:
        while True:
            frames = reader.frames()
            if frames is None:
                return 0
            out: list[bytes] = []
            appends: list[bytes] = []
            for op, payload in frames:
                if op == APPEND:
                    appends.append(payload)
                    continue
                if appends:
                    out += _append_together(log, ring, appends)
                    appends = []
                try:
                    out.append(frame(OK, handle(log, op, payload, ring)))
                except Exception as exc:
                    # A bad request fails that request only; the log stays served.
                    out.append(frame(ERROR, _error_payload(exc)))
            if appends:
                out += _append_together(log, ring, appends)
            replies.write(b"".join(out))
            replies.flush()
    finally:
        ring.close()
        log.close()


def main(path: str, ring_capacity: int = DEFAULT_CAPACITY) -> int:
    """Entry point in the child."""
    # Ctrl-C in a terminal reaches the whole process group; the parent decides
    # when the log closes (after its final flush), so the child ignores it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    _grow_pipe(requests)
    _grow_pipe(replies)
    # Anything printed by accident must not corrupt the reply channel.
    sys.stdout = sys.stderr
    return serve(path, requests, replies, ring_capacity)
