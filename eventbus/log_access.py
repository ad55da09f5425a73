"""How the bus reaches its log without blocking the event loop.

Two ways, one interface (``LogAccess``):

- ``ProcessLogAccess`` (file logs, the default): a child process owns the
  SQLite connections (eventbus.log_server) and the bus talks to it over pipes
  with asyncio. SQLite work then runs on another core and never competes for
  this process's GIL.
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
import json
import sys
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Protocol

from eventbus.errors import CursorExpired, EventLogError
from eventbus.log import EventLog, StorageFault, unpack_page
from eventbus.log_server import (
    APPEND,
    ERROR,
    HEADER,
    OK,
    PRUNE,
    RECORD_SEPARATOR,
    REPLAY,
    frame,
)
from eventbus.record import EventRecord

# The child is started with -c so that it imports this checkout's package
# even when the server's working directory is elsewhere.
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from eventbus.log_server import main; sys.exit(main(sys.argv[2]))"
)
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
STARTUP_TIMEOUT = 30.0
EXIT_TIMEOUT = 5.0


class LogAccess(Protocol):
    """What the bus needs from its log; every method is safe to await on the loop."""

    async def start(self) -> tuple[int, dict[str, int]]:
        """Open; returns the last ``seq`` and every session's last ``session_seq``."""
        ...

    async def append(self, records: list[EventRecord]) -> None:
        """Commit the records (one group commit) or raise EventLogError."""
        ...

    async def read_page(
        self,
        session_id: str | None,
        after: int,
        limit: int,
        *,
        sessions: Sequence[str] | None = None,
        max_bytes: int | None = None,
    ) -> list[EventRecord]:
        """Up to ``limit`` records after the cursor; CursorExpired if pruned.

        ``sessions`` (all-sessions pages only) reads just those sessions' rows;
        ``max_bytes`` bounds the page's size (see ``EventLog.replay_page``).
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

    async def append(self, records: list[EventRecord]) -> None:
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


class ProcessLogAccess:
    """Talks to a child process (eventbus.log_server) that owns the log file.

    Requests are written as frames to the child's stdin and answered in
    order on its stdout; a FIFO of futures pairs them up. If the child dies,
    every pending and later request fails with EventLogError.
    """

    def __init__(self, path: str) -> None:
        if path == ":memory:":
            raise ValueError("a :memory: log cannot be shared with a child process")
        self._path = path
        self._proc: asyncio.subprocess.Process | None = None
        self._waiting: deque[asyncio.Future[bytes]] = deque()
        self._reader: asyncio.Task[None] | None = None
        self._failure: EventLogError | None = None
        self._closing = False
        # Told when the child dies unasked, so an idle bus learns it at once
        # (not at its next write) and the server can exit for a restart.
        self.on_lost: Callable[[EventLogError], None] | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        return None if self._proc is None else self._proc.pid

    async def start(self) -> tuple[int, dict[str, int]]:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _BOOT,
            _PACKAGE_ROOT,
            self._path,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            # Its own session: terminal signals go to the server, which closes
            # the log when it is done; end of stdin stops the child.
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(STARTUP_TIMEOUT):
                op, payload = await self._read_frame()
        except (asyncio.IncompleteReadError, TimeoutError) as exc:
            await self._stop_process()
            raise EventLogError(
                f"the event log process for {self._path!r} did not start "
                f"(exit code {self._proc.returncode})"
            ) from exc
        except BaseException:
            self.abort()  # cancelled while starting: the child exits at end of input
            raise
        if op != OK:
            await self._stop_process()
            raise _error_from(payload)
        hello = json.loads(payload)
        self._reader = asyncio.create_task(self._read_replies(), name="eventlog-replies")
        return int(hello["last_seq"]), {str(k): int(v) for k, v in hello["sessions"].items()}

    async def append(self, records: list[EventRecord]) -> None:
        if not records:
            return
        await self._request(APPEND, RECORD_SEPARATOR.join([r.text for r in records]).encode())

    async def read_page(
        self,
        session_id: str | None,
        after: int,
        limit: int,
        *,
        sessions: Sequence[str] | None = None,
        max_bytes: int | None = None,
    ) -> list[EventRecord]:
        request: dict[str, object] = {"session_id": session_id, "after": after, "limit": limit}
        if sessions is not None:
            request["sessions"] = list(sessions)
        if max_bytes is not None:
            request["max_bytes"] = max_bytes
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
        if self._proc is None or self._closing:
            return
        self._closing = True  # from here on, end of output is expected
        await self._stop_process()
        if self._reader is not None:
            await asyncio.wait([self._reader])
        self._fail_waiting(EventLogError(f"the event log {self._path!r} is closed"))

    def abort(self) -> None:
        # End of input stops the child; close() later reaps it.
        proc = self._proc
        if proc is not None and proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()

    # -- plumbing --------------------------------------------------------------------

    async def _request(self, op: bytes, payload: bytes) -> bytes:
        if self._failure is not None:
            raise self._failure
        if self._closing or self._proc is None or self._proc.stdin is None:
            raise EventLogError(f"the event log {self._path!r} is closed")
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        # Written and queued in one synchronous step, so replies pair up in order.
        self._waiting.append(future)
        self._proc.stdin.write(frame(op, payload))
        try:
            await self._proc.stdin.drain()
        except ConnectionError as exc:
            self._fail(EventLogError(f"the event log process for {self._path!r} is gone: {exc}"))
        return await future

    async def _read_frame(self) -> tuple[bytes, bytes]:
        assert self._proc is not None and self._proc.stdout is not None
        header = await self._proc.stdout.readexactly(HEADER.size)
        op, size = HEADER.unpack(header)
        return op, await self._proc.stdout.readexactly(size)

    async def _read_replies(self) -> None:
        try:
            while True:
                op, payload = await self._read_frame()
                if not self._waiting:
                    raise EventLogError("the event log process sent a reply nobody asked for")
                future = self._waiting.popleft()
                if future.done():
                    continue  # the caller gave up (cancelled); the reply is dropped
                if op == OK:
                    future.set_result(payload)
                elif op == ERROR:
                    future.set_exception(_error_from(payload))
                else:
                    raise EventLogError(f"the event log process sent an unknown reply {op!r}")
        except asyncio.IncompleteReadError:
            if not self._closing:
                assert self._proc is not None
                code = await self._proc.wait()
                self._fail(
                    EventLogError(
                        f"the event log process for {self._path!r} exited unexpectedly "
                        f"(exit code {code})"
                    )
                )
        except EventLogError as exc:
            self._fail(exc)

    def _fail(self, exc: EventLogError) -> None:
        first = self._failure is None
        if first:
            self._failure = exc
        self._fail_waiting(exc)
        if first and not self._closing and self.on_lost is not None:
            self.on_lost(exc)

    def _fail_waiting(self, exc: EventLogError) -> None:
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(exc)

    async def _stop_process(self) -> None:
        """Close the child's stdin (it exits at end of input); kill it if it lingers."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        try:
            async with asyncio.timeout(EXIT_TIMEOUT):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()


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
    return EventLogError(message)
