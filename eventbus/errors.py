"""The closed set of errors the event bus and its log raise::

    EventBusError
    ├── InvalidEvent(ValueError)         an event that may not be published
    │   ├── UnknownEventType             its type is not in the catalog
    │   ├── PayloadInvalid               its data does not fit the type's payload
    │   └── EventNotSerializable         its data is not JSON
    ├── CursorError                      a resume cursor the log cannot serve
    │   ├── CursorExpired                older than the oldest retained event
    │   └── CursorInFuture(ValueError)   beyond the newest event
    ├── SubscriberTooSlow                a subscriber fell too far behind
    ├── BusNotStarted
    ├── BusClosed
    └── EventLogError                    the durable log failed
        ├── StorageFault                 a storage fault stops commits
        ├── OutOfSequence                a batch sent behind one that failed
        └── LogBehind                    a replay the log cannot serve yet

Every error names what was wrong and, where a caller can recover (a cursor
that is too old, a subscriber that fell behind), carries the number it needs
to recover with. ``InvalidEvent`` is a condition refined by narrower ones;
``CursorError`` and ``EventLogError`` are families.

Naming rule, the same in every package's ``errors`` module: a base class
(one that exists to be caught as a family) ends in ``Error``; a concrete
exception is named for the condition it reports, without ``Error``. A
condition refined by a narrower one keeps its condition name.

The cluster's forwarding (eventbus.cluster.forwarding) has its own small
tree: ``ForwardError`` > ``ReplicaUnavailable``, and ``HandlerRefused``.
"""

from __future__ import annotations

import errno
import sqlite3


class EventBusError(Exception):
    """Base of every error raised by ``eventbus``."""


# -- publishing ---------------------------------------------------------------


class InvalidEvent(EventBusError, ValueError):
    """``publish`` refused an event: bad type, ids or data. Nothing was assigned."""


class UnknownEventType(InvalidEvent):
    """The type is not in ``protocol.catalog.EventType``."""

    def __init__(self, event_type: object) -> None:
        super().__init__(
            f"unknown event type {event_type!r}; the catalog (protocol.catalog.EventType) "
            "is closed: add the type there and a payload model in protocol.payloads first"
        )
        self.event_type = event_type


class PayloadInvalid(InvalidEvent):
    """The data does not match the payload model of its type (debug validation)."""

    def __init__(self, event_type: str, errors: list[str]) -> None:
        joined = "; ".join(errors)
        super().__init__(f"invalid {event_type} payload: {joined}")
        self.event_type = event_type
        self.errors = errors


class EventNotSerializable(InvalidEvent):
    """The data cannot be encoded as strict JSON (NaN, bytes, arbitrary objects)."""


# -- cursors -------------------------------------------------------------------


class CursorError(EventBusError):
    """Base for a replay cursor the bus cannot serve.

    ``session_id`` is None for the all-sessions stream, whose cursor is the
    global ``seq``; otherwise the cursor is that session's ``session_seq``.
    """

    def __init__(self, message: str, *, cursor: int, session_id: str | None) -> None:
        super().__init__(message)
        self.cursor = cursor
        self.session_id = session_id


def _scope(session_id: str | None) -> str:
    return "all sessions (seq)" if session_id is None else f"session {session_id!r} (session_seq)"


class CursorExpired(CursorError):
    """The events right after the cursor were pruned from the log.

    ``oldest_cursor`` is the smallest ``after`` value the log can still serve
    without a gap; a client must reload its state before resuming from it.
    """

    def __init__(self, *, cursor: int, oldest_cursor: int, session_id: str | None) -> None:
        super().__init__(
            f"cursor after={cursor} for {_scope(session_id)} has expired: the log no longer "
            f"holds the events after it; the oldest usable cursor is after={oldest_cursor}",
            cursor=cursor,
            session_id=session_id,
        )
        self.oldest_cursor = oldest_cursor


class CursorInFuture(CursorError, ValueError):
    """The cursor is beyond the newest event published so far."""

    def __init__(self, *, cursor: int, latest_cursor: int, session_id: str | None) -> None:
        super().__init__(
            f"cursor after={cursor} for {_scope(session_id)} is in the future: the newest "
            f"event so far is {latest_cursor}",
            cursor=cursor,
            session_id=session_id,
        )
        self.latest_cursor = latest_cursor


# -- subscribers and lifecycle ---------------------------------------------------


class SubscriberTooSlow(EventBusError):
    """The subscriber's queue overflowed and it was cut off.

    ``last_cursor`` is the cursor of the last event it was given (None if it
    was given none); resubscribing with ``after=last_cursor`` misses nothing.
    ``max_bytes`` set: the queue's byte budget was exceeded (the message says
    so); otherwise its count budget, ``max_queue`` events.
    """

    def __init__(
        self,
        *,
        last_cursor: int | None,
        session_id: str | None,
        max_queue: int,
        max_bytes: int | None = None,
    ) -> None:
        resume = (
            f"resubscribe with after={last_cursor}" if last_cursor is not None else "resubscribe"
        )
        behind = (
            f"fell more than {max_queue} events behind (the queue's event count limit)"
            if max_bytes is None
            else f"fell more than {max_bytes} bytes of events behind (the queue's byte limit)"
        )
        super().__init__(
            f"subscriber to {_scope(session_id)} {behind} and was cut off; "
            f"{resume} to continue without a gap"
        )
        self.last_cursor = last_cursor
        self.session_id = session_id
        self.max_queue = max_queue
        self.max_bytes = max_bytes


class BusNotStarted(EventBusError):
    """The bus was used before ``await bus.start()``."""


class BusClosed(EventBusError):
    """The bus is closed (or stopped after a log failure, given as ``__cause__``)."""


class EventLogError(EventBusError):
    """The durable log failed or was misused: unreadable file, closed log, bad batch."""


# -- the log's own conditions (also importable from eventbus.log) -----------------


class OutOfSequence(EventLogError):
    """A batch does not start right after the last ``seq`` written.

    Nothing of it was written. The bus sends batches ahead of earlier
    commits' replies (see eventbus.bus); when one of those earlier batches
    fails, every later one is refused this way until it is retried, so a hole
    can never be committed. The bus sends the batch again after the earlier
    one is in.
    """


class LogBehind(EventLogError):
    """A replay asked for a log that holds events up to a ``seq`` it does not
    hold yet (an append before it failed and is being retried): nothing was
    read. Subscribers may already have seen those events (they are durable in
    the ring, see eventbus.ring), so a page without them would be a gap; the
    bus waits for the commit and reads again."""


class StorageFault(EventLogError):
    """A write failed because of the storage (disk full, I/O error, read-only).

    Nothing of the batch was written; the same batch may be retried.
    ``cause`` says what failed in a few words plus SQLite's message.
    """

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


# SQLite result codes that mean the storage under the file failed, not the
# request: the same write may succeed once the fault clears (space is freed,
# the disk is remounted read-write), so the bus retries instead of stopping.
_STORAGE_FAULTS = (
    ("SQLITE_FULL", "disk full"),
    ("SQLITE_IOERR", "I/O error"),
    ("SQLITE_READONLY", "read-only storage"),
    ("SQLITE_CANTOPEN", "cannot open a database file"),
)


def storage_cause(exc: BaseException) -> str | None:
    """What ``exc`` says about the storage (``"disk full (...)"``), or None if it
    is not a storage fault (a bug, a second writer, a corrupt file)."""
    if isinstance(exc, StorageFault):
        return exc.cause
    if isinstance(exc, sqlite3.Error):
        name = getattr(exc, "sqlite_errorname", None) or ""
        for prefix, what in _STORAGE_FAULTS:
            if name.startswith(prefix):
                return f"{what} ({exc})"
    if isinstance(exc, OSError) and exc.errno is not None:
        if exc.errno == errno.ENOSPC:
            return f"disk full ({exc.strerror})"
        if exc.errno == errno.EROFS:
            return f"read-only storage ({exc.strerror})"
        if exc.errno == errno.EIO:
            return f"I/O error ({exc.strerror})"
    return None
