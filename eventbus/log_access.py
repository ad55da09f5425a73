"""How the bus reaches its log without blocking the event loop.

Two ways, one interface (``LogAccess``):

- ``ProcessLogAccess`` (file logs, the default): a child process owns the
  SQLite connections (eventbus.log_server) and the bus talks to it over pipes
  with asyncio. SQLite work then runs on another core and never competes for
  this process's GIL. Both map the event ring (eventbus.ring), which makes an
  event durable before the child has committed it.
- ``ThreadLogAccess`` (``:memory:`` logs, or on request): the log's methods run
  in a dedicated worker thread.

Why not always a thread: on CPython a worker thread needs the GIL back after
every SQLite call, and while the event loop is busy it keeps releasing and
retaking the GIL around its selector calls, which resets the interpreter's
forced-switch timer. Measured here under a dispatcher-like load (tasks doing
a few microseconds of work and publishing two events each), the writer
thread committed nothing for the whole run: every event waited until the
loop went idle. A child process has its own GIL and commits as it goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import orjson

from eventbus.errors import CursorExpired, EventLogError
from eventbus.log import MEMORY, EventLog, LogBehind, OutOfSequence, StorageFault, unpack_page
from eventbus.log_server import (
    APPEND,
    ERROR,
    HEADER,
    OK,
    PRUNE,
    REPLAY,
    frame,
)
from eventbus.record import EventRecord
from eventbus.ring import DEFAULT_CAPACITY, Ring

_SEPARATOR = "\x1e"

# The child is started with -c so that it imports this checkout's package
# even when the server's working directory is elsewhere.
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from eventbus.log_server import main; sys.exit(main(sys.argv[2], int(sys.argv[3])))"
)
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
STARTUP_TIMEOUT = 30.0
EXIT_TIMEOUT = 5.0
# Replies are read only by the pipe transport. Reading the pipe directly to
# pick up an acknowledgement sooner reorders the byte stream: asyncio's
# subprocess transport reads a chunk and hands it to the protocol later
# (call_soon), so a direct read can deliver newer bytes first, and replies
# then pair with the wrong requests (seen under load as a replay answered
# with an append's empty acknowledgement). The replies now come over a pipe
# read by a read-pipe transport, which hands each chunk to its protocol at
# once (see _ReplyReader): the same one iteration saved, in order.


# Told the outcome of an append sent with ``send_append``: None once committed.
ReplyCallback = Callable[[BaseException | None], None]


class LogAccess(Protocol):
    """What the bus needs from its log; every method is safe to await on the loop."""

    async def start(self) -> tuple[int, dict[str, int]]:
        """Open; returns the last ``seq`` and every session's last ``session_seq``."""
        ...

    async def append(self, records: list[EventRecord], ring_end: int = 0) -> None:
        """Commit the records (one group commit) or raise EventLogError.

        ``ring_end``: the ring position SQLite holds everything before once
        they are in (0: none; see eventbus.ring)."""
        ...

    async def read_page(
        self,
        session_id: str | None,
        after: int,
        limit: int,
        *,
        sessions: Sequence[str] | None = None,
        max_bytes: int | None = None,
        through: int = 0,
    ) -> list[EventRecord]:
        """Up to ``limit`` records after the cursor; CursorExpired if pruned.

        ``sessions`` (all-sessions pages only) reads just those sessions' rows;
        ``max_bytes`` bounds the page's size (see ``EventLog.replay_page``);
        ``through``: raise LogBehind (nothing read) unless the log holds every
        event up to that seq (the process access; the others commit before
        anyone sees an event).
        """
        ...

    async def prune(
        self,
        keep_last: int | None,
        max_bytes: int | None = None,
        max_age_s: float | None = None,
    ) -> int:
        """Apply a retention policy (see ``EventLog.prune``); how many were deleted."""
        ...

    async def close(self) -> None:
        """Release the thread or process. Idempotent."""
        ...

    def abort(self) -> None:
        """Start releasing the thread or process without waiting (after a failure)."""
        ...


class ThreadLogAccess:
    """Runs an in-process EventLog's methods in worker threads.

    Writes go through one dedicated thread, so commits stay in order; reads
    use the default executor and, on a file log, their own connection.
    """

    def __init__(self, log: EventLog) -> None:
        self._log = log
        self._executor: ThreadPoolExecutor | None = None

    async def start(self) -> tuple[int, dict[str, int]]:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="eventlog-writer")
        last_seq = await asyncio.to_thread(self._log.last_seq)
        return last_seq, await asyncio.to_thread(self._log.session_counters)

    async def append(self, records: list[EventRecord], ring_end: int = 0) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._log.append_many, records)

    async def read_page(
        self,
        session_id: str | None,
        after: int,
        limit: int,
        *,
        sessions: Sequence[str] | None = None,
        max_bytes: int | None = None,
        through: int = 0,
    ) -> list[EventRecord]:
        packed = await asyncio.to_thread(
            partial(
                self._log.replay_page,
                session_id,
                after,
                limit,
                sessions=sessions,
                max_bytes=max_bytes,
            )
        )
        return unpack_page(*packed)

    async def prune(
        self,
        keep_last: int | None,
        max_bytes: int | None = None,
        max_age_s: float | None = None,
    ) -> int:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor,
            lambda: self._log.prune(keep_last=keep_last, max_bytes=max_bytes, max_age_s=max_age_s),
        )

    async def close(self) -> None:
        self.abort()

    def abort(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None


class _ReplyReader(asyncio.Protocol):
    """The child's stdout, parsed into frames in the pipe's read callback.

    Connected with ``loop.connect_read_pipe`` to a pipe of our own rather
    than asyncio's subprocess pipe: the subprocess transport hands each chunk
    to its protocol with ``call_soon`` (a whole loop iteration later, which on
    a busy loop is milliseconds), a read pipe transport calls
    ``data_received`` right in the callback the selector woke. Each reply
    resolves its request's future there: no reader task, no extra iteration
    between the commit's acknowledgement and the fan-out. Only the transport
    reads the pipe (see the note at the top of this module).
    """

    def __init__(self, owner: ProcessLogAccess) -> None:
        self._owner = owner
        self._buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        size_of_header = HEADER.size
        start = 0
        end = len(buffer)
        while end - start >= size_of_header:
            op, size = HEADER.unpack_from(buffer, start)
            stop = start + size_of_header + size
            if stop > end:
                break
            self._owner._on_reply(op, bytes(buffer[start + size_of_header : stop]))
            start = stop
        if start:
            del buffer[:start]

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        # The child's stdout closed: it exited (or closed it), no reply can come.
        self._owner._on_child_gone(bool(self._buffer))


class _ChildProtocol(asyncio.SubprocessProtocol):
    """The child process itself: flow control of its stdin and its exit."""

    def __init__(self) -> None:
        self._paused: asyncio.Future[None] | None = None
        self.exited: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def pause_writing(self) -> None:
        if self._paused is None:
            self._paused = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        paused, self._paused = self._paused, None
        if paused is not None and not paused.done():
            paused.set_result(None)

    async def drain(self) -> None:
        if self._paused is not None:
            await asyncio.shield(self._paused)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 0:
            self.resume_writing()  # a write can no longer wait for room

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.resume_writing()
        if not self.exited.done():
            self.exited.set_result(None)


class ProcessLogAccess:
    """Talks to a child process (eventbus.log_server) that owns the log file.

    Requests are written as frames to the child's stdin, one ``os.write`` of
    a frame built in one piece, and answered in order on its stdout; a FIFO
    pairs them up, resolved in the pipe's read callback (``_ReplyReader``):
    a request's future, or the callback of an append sent with
    ``send_append``. If the child dies, every pending and later request fails
    with EventLogError.
    """

    def __init__(self, path: str, ring_capacity: int = DEFAULT_CAPACITY) -> None:
        if path == ":memory:":
            raise ValueError("a :memory: log cannot be shared with a child process")
        self._path = path
        self._ring_capacity = ring_capacity
        # The event ring, shared with the child (eventbus.ring); open once started.
        self.ring: Ring | None = None
        self._transport: asyncio.SubprocessTransport | None = None
        self._protocol: _ChildProtocol | None = None
        self._stdin: asyncio.WriteTransport | None = None
        self._replies: asyncio.ReadTransport | None = None
        # Each request's future, or (send_append) the callback its reply goes to.
        self._waiting: deque[asyncio.Future[tuple[bytes, bytes]] | ReplyCallback]
        self._waiting = deque()
        self._started = False
        self._failure: EventLogError | None = None
        self._closing = False
        # Told when the child dies unasked, so an idle bus learns it at once
        # (not at its next write) and the server can exit for a restart.
        self.on_lost: Callable[[EventLogError], None] | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        return None if self._transport is None else self._transport.get_pid()

    async def start(self) -> tuple[int, dict[str, int]]:
        """Spawn the log process, wire its pipes and wait for its hello (it has
        committed what the ring held beyond the log by then)."""
        loop = asyncio.get_running_loop()
        hello: asyncio.Future[tuple[bytes, bytes]] = loop.create_future()
        self._waiting.append(hello)  # the handshake is the first reply
        # The replies come over a pipe of our own, read by a read pipe transport
        # (see _ReplyReader); its write end is the child's stdout.
        reply_fd, child_stdout = os.pipe()
        try:
            self._transport, self._protocol = await loop.subprocess_exec(
                _ChildProtocol,
                sys.executable,
                "-c",
                _BOOT,
                _PACKAGE_ROOT,
                self._path,
                str(self._ring_capacity),
                stdin=asyncio.subprocess.PIPE,
                stdout=child_stdout,
                stderr=None,
                # Its own session: terminal signals go to the server, which closes
                # the log when it is done; end of stdin stops the child.
                start_new_session=True,
            )
        except BaseException:
            os.close(reply_fd)
            raise
        finally:
            # Only the child holds the write end: its exit is our end of file.
            os.close(child_stdout)
        # (Wrapping a descriptor does no I/O; the transport owns and closes it.)
        reply_pipe = os.fdopen(reply_fd, "rb", buffering=0)
        self._replies, _ = await loop.connect_read_pipe(lambda: _ReplyReader(self), reply_pipe)
        stdin = self._transport.get_pipe_transport(0)
        assert isinstance(stdin, asyncio.WriteTransport)
        self._stdin = stdin
        try:
            async with asyncio.timeout(STARTUP_TIMEOUT):
                op, payload = await hello
        except (EventLogError, TimeoutError) as exc:
            await self._stop_process()
            raise EventLogError(
                f"the event log process for {self._path!r} did not start "
                f"(exit code {self._transport.get_returncode()})"
            ) from exc
        except BaseException:
            self.abort()  # cancelled while starting: the child exits at end of input
            raise
        if op != OK:
            await self._stop_process()
            raise _error_from(payload)
        return await self._opened(json.loads(payload))

    async def _opened(self, body: dict[str, Any]) -> tuple[int, dict[str, int]]:
        """After the child's hello: map the ring where its scan ended; the log's counters."""
        ring = body["ring"]
        try:
            self.ring = Ring.open(
                ring["path"], log_inode=int(ring["inode"]), capacity=int(ring["capacity"])
            )
        except BaseException:
            await self._stop_process()
            raise
        self.ring.start_at(int(ring["position"]))
        self._started = True
        return int(body["last_seq"]), {str(k): int(v) for k, v in body["sessions"].items()}

    async def append(self, records: list[EventRecord], ring_end: int = 0) -> None:
        if not records:
            return
        await self._request(APPEND, pack_append(records, ring_end))

    def send_append(
        self, records: list[EventRecord], on_reply: ReplyCallback, ring_end: int = 0
    ) -> None:
        """Write an append request now, synchronously, without waiting for it.

        For the bus to hand batches over from ``publish`` or from a reply's
        callback, several in flight at once, instead of awaiting each reply in
        a task (every wake-up of a task costs a loop iteration). ``on_reply``
        is called in the pipe's read callback with None once the batch is
        committed, or with the error (also when the child is lost). Raises
        EventLogError (nothing written) when the log is closed or lost.
        """
        self._check_sendable()
        # Queued and written in one synchronous step, so replies pair up in order.
        self._waiting.append(on_reply)
        self._write(APPEND, pack_append(records, ring_end))

    @property
    def unsent_bytes(self) -> int:
        """Request bytes the child's stdin pipe could not take yet (asyncio holds
        them): the bus stops sending ahead while the child is this far behind."""
        stdin = self._stdin
        return 0 if stdin is None else stdin.get_write_buffer_size()

    async def read_page(
        self,
        session_id: str | None,
        after: int,
        limit: int,
        *,
        sessions: Sequence[str] | None = None,
        max_bytes: int | None = None,
        through: int = 0,
    ) -> list[EventRecord]:
        request: dict[str, object] = {"session_id": session_id, "after": after, "limit": limit}
        if sessions is not None:
            request["sessions"] = list(sessions)
        if max_bytes is not None:
            request["max_bytes"] = max_bytes
        if through:
            request["through"] = through
        reply = (await self._request(REPLAY, json.dumps(request).encode())).decode()
        meta, _, texts = reply.partition("\n")
        return unpack_page(meta, texts or None)

    async def prune(
        self,
        keep_last: int | None,
        max_bytes: int | None = None,
        max_age_s: float | None = None,
    ) -> int:
        policy = {"keep_last": keep_last, "max_bytes": max_bytes, "max_age_s": max_age_s}
        reply = await self._request(PRUNE, json.dumps(policy).encode())
        return int(reply)

    async def close(self) -> None:
        if self._transport is None or self._closing:
            return
        self._closing = True  # from here on, end of output is expected
        await self._stop_process()
        self._transport.close()
        if self._replies is not None:
            self._replies.close()
        if self.ring is not None:
            self.ring.close()
        self._fail_waiting(EventLogError(f"the event log {self._path!r} is closed"))

    def abort(self) -> None:
        # End of input stops the child; close() later reaps it.
        stdin = self._stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()

    # -- plumbing --------------------------------------------------------------------

    async def _request(self, op: bytes, payload: bytes) -> bytes:
        """Write one request frame and wait for its reply (flow control included)."""
        self._check_sendable()
        future: asyncio.Future[tuple[bytes, bytes]] = asyncio.get_running_loop().create_future()
        # Queued and written in one synchronous step, so replies pair up in order.
        self._waiting.append(future)
        self._write(op, payload)
        if not future.done():
            assert self._protocol is not None
            await self._protocol.drain()
        reply_op, reply = await future
        failure = _reply_error(reply_op, reply)
        if failure is not None:
            raise failure
        return reply

    def _check_sendable(self) -> None:
        if self._failure is not None:
            raise self._failure
        stdin = self._stdin
        if self._closing or stdin is None or self._protocol is None or stdin.is_closing():
            raise EventLogError(f"the event log {self._path!r} is closed")

    def _write(self, op: bytes, payload: bytes) -> None:
        assert self._stdin is not None
        self._stdin.write(frame(op, payload))

    def _on_reply(self, op: bytes, payload: bytes) -> None:
        if not self._waiting:
            self._fail(EventLogError("the event log process sent a reply nobody asked for"))
            return
        waiter = self._waiting.popleft()
        if isinstance(waiter, asyncio.Future):
            if not waiter.done():  # else the caller gave up (cancelled): dropped
                waiter.set_result((op, payload))
            return
        waiter(_reply_error(op, payload))

    def _on_child_gone(self, partial_frame: bool) -> None:
        if self._closing:
            return
        assert self._transport is not None
        # (At end of output the child may not have been reaped yet.)
        code = self._transport.get_returncode()
        if not self._started:
            self._fail_waiting(EventLogError(f"the event log process exited (exit code {code})"))
            return
        detail = " in the middle of a reply" if partial_frame else ""
        self._fail(
            EventLogError(
                f"the event log process for {self._path!r} exited unexpectedly{detail} "
                f"(exit code {code})"
            )
        )

    def _fail(self, exc: EventLogError) -> None:
        first = self._failure is None
        if first:
            self._failure = exc
        self._fail_waiting(exc)
        if first and not self._closing and self.on_lost is not None:
            self.on_lost(exc)

    def _fail_waiting(self, exc: EventLogError) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not isinstance(waiter, asyncio.Future):
                waiter(exc)
            elif not waiter.done():
                waiter.set_exception(exc)

    async def _stop_process(self) -> None:
        """Close the child's stdin (it exits at end of input); kill it if it lingers."""
        transport, protocol = self._transport, self._protocol
        if transport is None or protocol is None:
            return
        self.abort()
        if transport.get_returncode() is None:
            try:
                async with asyncio.timeout(EXIT_TIMEOUT):
                    await asyncio.shield(protocol.exited)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    transport.kill()
                await asyncio.shield(protocol.exited)


def access_for(log: EventLog | None, choice: str | None, ring_bytes: int) -> LogAccess | None:
    """How the bus reaches ``log``: its process (files, by default) or a thread."""
    if log is None:
        return None
    if choice is None:
        choice = "thread" if log.path == MEMORY else "process"
    if choice == "process":
        # Absolute: the child must find the file even if the cwd changes.
        path = log.path if log.path == MEMORY else os.path.abspath(log.path)
        return ProcessLogAccess(path, ring_bytes)
    if choice == "thread":
        return ThreadLogAccess(log)
    raise ValueError(f"log_access must be 'process' or 'thread', got {choice!r}")


def pack_append(records: list[EventRecord], ring_end: int = 0) -> bytes:
    """An append request's payload: the ring position (see eventbus.ring), a
    newline, the index columns as JSON, a newline, and the envelopes' UTF-8
    text joined by 0x1E (see eventbus.log_server).

    The texts are joined and encoded once for the whole batch (records hold
    text, see eventbus.record), nothing is parsed out of them."""
    meta = orjson.dumps(
        [(r.seq, r.session_seq, r.session_id, r.type, r.turn_id, r.ts) for r in records]
    )
    return b"".join(
        (b"%d\n" % ring_end, meta, b"\n", _SEPARATOR.join([r.text for r in records]).encode())
    )


def _reply_error(op: bytes, payload: bytes) -> EventLogError | CursorExpired | None:
    """None for an OK reply, else the error it reports."""
    if op == OK:
        return None
    if op == ERROR:
        return _error_from(payload)
    return EventLogError(f"the event log process sent an unknown reply {op!r}")


def _error_from(payload: bytes) -> EventLogError | CursorExpired:
    try:
        body = json.loads(payload)
    except ValueError:
        return EventLogError(f"the event log process failed: {payload[:200]!r}")
    if body.get("kind") == "expired":
        return CursorExpired(
            cursor=int(body["cursor"]),
            oldest_cursor=int(body["oldest_cursor"]),
            session_id=body.get("session_id"),
        )
    message = str(body.get("message", "the event log process failed"))
    if body.get("kind") == "storage":
        return StorageFault(message, cause=str(body.get("cause", message)))
    if body.get("kind") == "sequence":
        return OutOfSequence(message)
    if body.get("kind") == "behind":
        return LogBehind(message)
    return EventLogError(message)
