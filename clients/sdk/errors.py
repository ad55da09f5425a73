"""Every error the SDK raises: a closed set, all under :class:`ToolrelayError`::

    ToolrelayError
    ├── ApiError                   the server answered with an error
    │   ├── Unauthorized           401
    │   ├── Forbidden              403
    │   ├── NotFound               404
    │   ├── Conflict               409
    │   │   └── AlreadyResolved    a confirmation someone else answered first
    │   ├── PayloadTooLarge        413
    │   ├── InvalidRequest         422 (and 400)
    │   └── ServerFault            5xx
    ├── ConnectionFailed           the server could not be reached (after retries)
    ├── ProtocolViolation          an answer or event that breaks the contract
    ├── TurnEndedFailed            a turn the caller waited on failed
    ├── WaitTimeout(TimeoutError)  a bounded wait ran out
    └── StreamError                the event stream cannot go on
        ├── StreamGap              a session_seq went missing
        ├── CursorExpired          the resume point is older than the log holds
        └── StreamClosed           the server closed the stream

HTTP answers map onto one type per status the server documents, each
carrying the server's own error code and message so a caller can show it
unchanged. Stream problems have their own types, so nothing is ever
reported as a bare ``Exception``.

Naming rule, the same in every package's ``errors`` module: a base class
(one that exists to be caught as a family) ends in ``Error``; a concrete
exception is named for the condition it reports, without ``Error``. A
condition refined by a narrower one keeps its condition name
(``Conflict``, refined by ``AlreadyResolved``). ``TurnEndedFailed`` is not
``TurnFailed`` because that name is the event's payload class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clients.sdk.models import Resolution


class ToolrelayError(Exception):
    """Base of every error raised by the SDK."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ApiError(ToolrelayError):
    """The server answered an HTTP call with an error status.

    ``code`` and ``message`` come from the server's ``{"error": {...}}`` body
    when it sent one; ``body`` keeps the whole decoded body for anything else.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        method: str = "",
        path: str = "",
        body: Any = None,
    ) -> None:
        where = f"{method} {path}: " if method else ""
        super().__init__(f"{where}{status} {message}")
        self.status = status
        self.code = code
        self.server_message = message
        self.method = method
        self.path = path
        self.body = body


class Unauthorized(ApiError):
    """401: the token is missing, wrong, or revoked."""


class Forbidden(ApiError):
    """403: the token is valid but may not do this."""


class NotFound(ApiError):
    """404: no such session, turn or request (or the token may not see it)."""


class Conflict(ApiError):
    """409: the request clashes with the current state (e.g. a turn is running)."""


class AlreadyResolved(Conflict):
    """409 on a confirmation answer: someone else answered first.

    ``resolution`` is the winning answer as the server reported it.
    """

    def __init__(self, resolution: Resolution, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.resolution = resolution


class PayloadTooLarge(ApiError):
    """413: the request body is over the server's limit."""


class InvalidRequest(ApiError):
    """400/422: the server rejected the request body or parameters."""


class ServerFault(ApiError):
    """5xx (including 501 for features the server does not offer yet)."""


class ConnectionFailed(ToolrelayError):
    """The server could not be reached, even after the bounded retries."""


class ProtocolViolation(ToolrelayError):
    """The server sent something that does not match the documented contract."""


class TurnEndedFailed(ToolrelayError):
    """A turn ended ``failed``: ``reason`` (``model_error``, ``step_limit``,
    ``server_shutdown`` ...) and the server's ``failure`` message, e.g.
    ``model call 1 failed: anthropic: auth (HTTP 401): invalid x-api-key``.

    ``turn`` is the final turn record; ``details`` the rest of the
    ``turn.failed`` event's data (``error_kind``, ``provider``, ``status_code``)
    when the SDK saw it.
    """

    def __init__(
        self,
        turn_id: str,
        reason: str | None,
        failure: str | None,
        *,
        turn: Any = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        text = f"turn {turn_id} failed: {reason or 'unknown reason'}"
        if failure:
            text += f": {failure}"
        super().__init__(text)
        self.turn_id = turn_id
        self.reason = reason
        self.failure = failure
        self.turn = turn
        self.details = dict(details or {})


class WaitTimeout(ToolrelayError, TimeoutError):
    """A wait (for a turn, for an event) ran past its deadline."""


class StreamError(ToolrelayError):
    """Base of the errors an event stream can end with."""


class StreamGap(StreamError):
    """The stream skipped or repeated a sequence number.

    ``expected`` is the cursor the stream should have delivered next,
    ``received`` the one it did; ``session_id`` is set when the check was a
    per-session one.
    """

    def __init__(self, *, expected: int, received: int, field: str, session_id: str | None) -> None:
        kind = "repeated" if received < expected else "skipped"
        scope = f" in session {session_id}" if session_id else ""
        super().__init__(
            f"event stream {kind} events{scope}: expected {field} {expected}, got {received}"
        )
        self.expected = expected
        self.received = received
        self.field = field
        self.session_id = session_id


class CursorExpired(StreamError):
    """The requested resume point is older than what the server's log still holds.

    ``oldest_after`` is the oldest cursor the server can still resume from, when
    it said so; a client that accepts the loss can reload state and resume there.
    """

    def __init__(self, message: str, *, oldest_after: int | None) -> None:
        super().__init__(message)
        self.oldest_after = oldest_after


class StreamClosed(StreamError):
    """The server closed the stream for a reason a reconnect cannot fix.

    ``code`` is the WebSocket close code (or HTTP status when the handshake was
    refused) and ``reason`` the server's text.
    """

    def __init__(self, message: str, *, code: int | None, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
