"""The event log's child process: owns the SQLite writer, answers over pipes.

Started by ``eventbus.log_access.ProcessLogAccess``; not meant to be run by
hand. It imports only the standard library and ``eventbus.log`` (which stays
free of pydantic), so it starts in a few tens of milliseconds.

Protocol, over the child's stdin (requests) and stdout (replies): each frame
is one op byte, a 4-byte big-endian length and that many payload bytes
(UTF-8). Requests are answered strictly in order, one reply each.

- handshake (child -> parent, once): ``K`` + JSON ``{"pid", "last_seq", "sessions"}``
  or ``E`` + error JSON, after which the child exits.
- ``A`` append: the index columns as a JSON array of ``[seq, session_seq,
  session_id, type, turn_id, ts]`` + ``"\\n"`` + the envelopes (UTF-8 JSON)
  joined by 0x1E, in the same order (``eventbus.log.unpack_rows``): the
  columns travel beside the text, nothing is parsed out of it.
  Reply ``K`` with an empty payload once committed.
- ``R`` replay: JSON ``{"session_id", "after", "limit", "sessions"?, "max_bytes"?}``. Reply ``K`` +
  metadata JSON + ``"\\n"`` + texts joined by 0x1E (see ``EventLog.replay_page``).
- ``P`` prune: JSON ``{"keep_last", "max_bytes", "max_age_s"}`` (each may be
  null). Reply ``K`` + the number deleted.
- Errors: ``E`` + JSON ``{"kind": "expired"|"storage"|"log", "message", ...}``
  (``storage`` adds ``cause``: the write may succeed once the fault clears);
  the child keeps serving. End of input ends the child (the parent closed the
  pipe, or died).
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
from eventbus.log import EventLog, StorageFault

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


def _read_exact(stream: BinaryIO, size: int) -> bytes | None:
    data = stream.read(size)
    if len(data) < size:
        return None
    return data


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
    else:
        body = {"kind": "log", "message": str(exc)}
    return json.dumps(body).encode()


def handle(log: EventLog, op: bytes, payload: bytes) -> bytes:
    """Run one request against the log; the reply payload."""
    if op == APPEND:
        # One decode of the whole request: SQLite stores the envelopes as text.
        meta, _, texts = payload.decode().partition("\n")
        log.append_packed(meta, texts)
        return b""
    if op == REPLAY:
        request = json.loads(payload)
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


def serve(path: str, requests: BinaryIO, replies: BinaryIO) -> int:
    """Open the log, shake hands, answer requests until end of input."""
    try:
        log = EventLog.open(path)
        hello = {"pid": os.getpid(), "last_seq": log.last_seq(), "sessions": log.session_counters()}
    except EventLogError as exc:
        replies.write(frame(ERROR, _error_payload(exc)))
        replies.flush()
        return 1
    replies.write(frame(OK, json.dumps(hello).encode()))
    replies.flush()
    try:
        while True:
            header = _read_exact(requests, HEADER.size)
            if header is None:
                return 0
            op, size = HEADER.unpack(header)
            payload = _read_exact(requests, size)
            if payload is None:
                return 0
            try:
                reply = frame(OK, handle(log, op, payload))
            except Exception as exc:
                # A bad request fails that request only; the log stays served.
                reply = frame(ERROR, _error_payload(exc))
            replies.write(reply)
            replies.flush()
    finally:
        log.close()


def main(path: str) -> int:
    """Entry point in the child."""
    # Ctrl-C in a terminal reaches the whole process group; the parent decides
    # when the log closes (after its final flush), so the child ignores it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    _grow_pipe(requests)
    _grow_pipe(replies)
    # Anything printed by accident must not corrupt the reply channel.
    sys.stdout = sys.stderr
    return serve(path, requests, replies)
