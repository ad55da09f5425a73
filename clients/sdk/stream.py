"""A resumable, gap-checked event stream over the server's WebSocket.

:class:`EventStream` is an async iterator of typed events. When the socket
drops (network trouble, a server restart, the server cutting off a slow
reader) it reconnects with ``after=<last cursor>``, so the caller sees every
event exactly once. It proves that instead of trusting it: on a session
stream each ``session_seq`` must be the previous one plus one; on the
all-sessions stream ``seq`` must increase and each session's ``session_seq``
must stay contiguous. Anything else raises :class:`StreamGap`.

Reconnects are bounded by a :class:`Backoff`; the budget refills whenever a
connection delivers an event, so a long-lived client survives any number of
separate outages but never spins forever against a dead server.

Everything runs in the consumer's task: no background task, nothing to leak.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Iterator
from enum import StrEnum
from types import TracebackType
from typing import Any, NoReturn
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from clients.sdk.backoff import Backoff
from clients.sdk.errors import (
    ConnectionFailed,
    CursorExpired,
    Forbidden,
    NotFound,
    StreamClosed,
    StreamGap,
    ToolrelayError,
    Unauthorized,
    WaitTimeout,
)
from clients.sdk.events import AnyEvent, parse_event
from protocol.catalog import EventType

# Close codes of the event streams (specs/streaming-protocol.md). Codes not
# listed here (1001, 1011, 1012, 4429 "too slow", a dropped network) mean
# "reconnect and resume with after=".
CLOSE_NORMAL = 1000  # the session was deleted: its stream has ended
CLOSE_BAD_CURSOR = 4400  # after= is ahead of the server's log
CLOSE_CURSOR_EXPIRED = 4410  # the events after the cursor were pruned
_TERMINAL_CLOSE_CODES = frozenset({1003, 1008, CLOSE_BAD_CURSOR})

# Large tool results travel inside events; bound what one message may hold.
MAX_EVENT_BYTES = 32 * 1024 * 1024
# How long closing waits for the server's close frame. While the server is
# still replaying, unread events fill the socket's buffer and the close frame
# cannot be read behind them; past this the connection is simply dropped.
CLOSE_TIMEOUT = 0.5


class ConnectionState(StrEnum):
    """Where a stream's connection stands, as reported to ``on_state``."""

    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    CLOSED = "closed"


StateCallback = Callable[[ConnectionState, str], None]


def _ws_base(base_url: str) -> str:
    if base_url.startswith("https://"):
        return "wss://" + base_url[len("https://") :]
    if base_url.startswith("http://"):
        return "ws://" + base_url[len("http://") :]
    if base_url.startswith(("ws://", "wss://")):
        return base_url
    raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")


class EventStream:
    """Typed events of one session (``session_id``) or of every visible session.

    ``after`` is the cursor to resume from: a ``session_seq`` for a session
    stream, a global ``seq`` for the all-sessions stream; ``None`` starts with
    live events only. Use as ``async with client.events(...) as stream:`` and
    ``async for event in stream``; the ``cursor`` property is the last cursor
    delivered, ready to hand to a later stream.

    A session stream ends (``StopAsyncIteration``) after delivering
    ``session.deleted``.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        session_id: str | None = None,
        after: int | None = None,
        client_name: str | None = None,
        backoff: Backoff | None = None,
        on_state: StateCallback | None = None,
        open_timeout: float = 10.0,
    ) -> None:
        if after is not None and after < 0:
            raise ValueError(f"after must be >= 0, got {after}")
        self._base = _ws_base(base_url.rstrip("/"))
        self._token = token
        self.session_id = session_id
        self._cursor = after
        self._client_name = client_name
        self._backoff = backoff or Backoff()
        self._on_state = on_state
        self._open_timeout = open_timeout
        self._ws: ClientConnection | None = None
        self._state = ConnectionState.CLOSED
        self._closed = False
        self._ended = False
        self._delays: Iterator[float] | None = None
        # On the all-sessions stream: the last session_seq seen per session.
        self._session_seqs: dict[str, int] = {}
        self.connects = 0
        self.reconnects = 0

    # -- public surface -------------------------------------------------------

    @property
    def cursor(self) -> int | None:
        """The cursor of the last event delivered (``after`` until then)."""
        return self._cursor

    @property
    def state(self) -> ConnectionState:
        """The connection's current state (also reported to ``on_state``)."""
        return self._state

    @property
    def url(self) -> str:
        """The WebSocket URL the next (re)connect would use."""
        path = f"/sessions/{self.session_id}/events" if self.session_id else "/events"
        query: dict[str, str] = {}
        if self._cursor is not None:
            query["after"] = str(self._cursor)
        if self._client_name:
            query["client"] = self._client_name
        return f"{self._base}{path}" + (f"?{urlencode(query)}" if query else "")

    async def connect(self) -> None:
        """Open the connection now (iteration would open it lazily)."""
        if self._closed:
            raise StreamClosed("stream was closed by the client", code=None)
        if self._ws is None:
            await self._open(first=self.connects == 0)

    async def aclose(self) -> None:
        """Close the socket; iteration then ends."""
        self._closed = True
        await self._drop_socket()
        self._set_state(ConnectionState.CLOSED, "closed by client")

    async def _drop_socket(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            # Closing a socket the peer already dropped may raise; it is gone either way.
            with contextlib.suppress(ConnectionClosed, OSError):
                await ws.close()

    async def __aenter__(self) -> EventStream:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> AnyEvent:
        while True:
            if self._closed or self._ended:
                raise StopAsyncIteration
            if self._ws is None:
                await self._open(first=self.connects == 0)
                assert self._ws is not None
            try:
                raw = await self._ws.recv()
            except ConnectionClosed as exc:
                self._ws = None
                if self._closed:
                    raise StopAsyncIteration from None
                self._on_closed(exc)
                continue
            try:
                event = parse_event(raw)
                accepted = self._accept(event)
            except ToolrelayError:
                await self._drop_socket()
                raise
            if not accepted:
                continue
            # A connection that delivers refills the reconnect budget.
            self._delays = None
            if self.session_id is not None and event.type == EventType.SESSION_DELETED:
                self._ended = True
            return event

    async def next_matching(
        self, predicate: Callable[[AnyEvent], bool], *, within: float
    ) -> AnyEvent:
        """Consume events until one satisfies ``predicate``; WaitTimeout after ``within`` s.

        Events that do not match are consumed (not delivered elsewhere).
        """
        try:
            async with asyncio.timeout(within):
                async for event in self:
                    if predicate(event):
                        return event
        except TimeoutError:
            raise WaitTimeout(f"no matching event within {within:g} s") from None
        raise StreamClosed("the stream ended before a matching event arrived", code=None)

    # -- connection handling --------------------------------------------------

    def _set_state(self, state: ConnectionState, detail: str) -> None:
        self._state = state
        if self._on_state is not None:
            self._on_state(state, detail)

    async def _open(self, *, first: bool) -> None:
        """Connect, retrying with backoff; raises once the budget is spent."""
        if self._delays is None:
            self._delays = self._backoff.delays()
        self._set_state(
            ConnectionState.CONNECTING if first else ConnectionState.RECONNECTING, self.url
        )
        headers = {"Authorization": f"Bearer {self._token}"}
        if self._client_name:
            headers["X-Client-Name"] = self._client_name
        while True:
            failure: str
            try:
                self._ws = await connect(
                    self.url,
                    additional_headers=headers,
                    open_timeout=self._open_timeout,
                    close_timeout=CLOSE_TIMEOUT,
                    compression=None,  # event sockets are not compressed: see DESIGN.md
                    proxy=None,
                    max_size=MAX_EVENT_BYTES,
                    user_agent_header="toolrelay-sdk",
                )
            except InvalidStatus as exc:
                status = exc.response.status_code
                self._raise_for_handshake(status, bytes(exc.response.body or b""))
                failure = f"handshake refused with HTTP {status}"
            except (OSError, TimeoutError, InvalidHandshake) as exc:
                failure = f"{type(exc).__name__}: {exc}"
            else:
                self.connects += 1
                if not first:
                    self.reconnects += 1
                self._set_state(ConnectionState.CONNECTED, self.url)
                return
            delay = next(self._delays, None)
            if delay is None:
                self._set_state(ConnectionState.CLOSED, failure)
                raise ConnectionFailed(
                    f"could not connect to {self.url} after {self._backoff.attempts} retries: "
                    f"{failure}"
                )
            self._set_state(ConnectionState.RECONNECTING, f"{failure}; retrying in {delay:.2f} s")
            await asyncio.sleep(delay)

    def _raise_for_handshake(self, status: int, body: bytes) -> None:
        text = body.decode("utf-8", "replace")[:500]
        kwargs: dict[str, Any] = {
            "status": status,
            "message": text or f"HTTP {status}",
            "method": "WS",
            "path": self.url.split("?", 1)[0],
        }
        if status == 401:
            self._fail(Unauthorized(**kwargs))
        if status == 403:
            self._fail(Forbidden(**kwargs))
        if status == 404:
            self._fail(NotFound(**kwargs))
        if status == 410:
            self._fail(
                CursorExpired(f"server refused cursor {self._cursor}: {text}", oldest_after=None)
            )
        if 400 <= status < 500 and status not in (408, 429):
            self._fail(
                StreamClosed(f"server refused the stream: HTTP {status} {text}", code=status)
            )

    def _fail(self, error: ToolrelayError) -> NoReturn:
        self._closed = True
        self._set_state(ConnectionState.CLOSED, str(error))
        raise error

    def _on_closed(self, exc: ConnectionClosed) -> None:
        """Decide what a closed socket means: end, fail, or resume."""
        code = exc.rcvd.code if exc.rcvd is not None else None
        reason = exc.rcvd.reason if exc.rcvd is not None else ""
        if code == CLOSE_CURSOR_EXPIRED:
            match = re.search(r"after=(\d+)", reason)
            self._fail(
                CursorExpired(
                    f"cursor {self._cursor} has expired: {reason}",
                    oldest_after=int(match.group(1)) if match else None,
                )
            )
        if code == CLOSE_NORMAL and self.session_id is not None:
            self._ended = True  # the session is gone; nothing more will come
            self._set_state(ConnectionState.CLOSED, reason or "session ended")
            return
        if code in _TERMINAL_CLOSE_CODES:
            self._fail(
                StreamClosed(f"server closed the stream: {code} {reason}", code=code, reason=reason)
            )
        # Anything else (restart, going away, slow-reader cut-off, network drop):
        # reconnect and resume from the cursor.
        self._set_state(ConnectionState.RECONNECTING, f"closed ({code} {reason}); resuming")

    # -- ordering checks --------------------------------------------------------

    def _accept(self, event: AnyEvent) -> bool:
        """Check the event continues the sequence; advance the cursor."""
        if self.session_id is not None:
            if event.session_id != self.session_id:
                return False  # not ours; a server bug, but not a gap in our stream
            if self._cursor is not None and event.session_seq != self._cursor + 1:
                self._gap(self._cursor + 1, event.session_seq, "session_seq", self.session_id)
            self._cursor = event.session_seq
            return True
        if self._cursor is not None and event.seq <= self._cursor:
            self._gap(self._cursor + 1, event.seq, "seq", None)
        last = self._session_seqs.get(event.session_id)
        if last is not None and event.session_seq != last + 1:
            self._gap(last + 1, event.session_seq, "session_seq", event.session_id)
        self._session_seqs[event.session_id] = event.session_seq
        if event.type == EventType.SESSION_DELETED:
            self._session_seqs.pop(event.session_id, None)
        self._cursor = event.seq
        return True

    def _gap(self, expected: int, received: int, field: str, session_id: str | None) -> NoReturn:
        self._fail(
            StreamGap(expected=expected, received=received, field=field, session_id=session_id)
        )
