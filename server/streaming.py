"""The event streams: ``WS /sessions/{id}/events`` and ``WS /events``.

One WebSocket = one bus Subscription. The bus hands over each event already
encoded, and that same text goes to every socket (no per-subscriber
encoding). Two tasks serve a socket: the sender drains the subscription, the
receiver watches the client (which may only close; what it sends is ignored,
and a client that keeps talking or sends binary frames is closed). Whichever
ends first ends the other. While the sender waits with nothing queued, the
bus writes each new event to the socket itself (``_SocketSink``), without
waking the sender. Close codes are documented in
specs/streaming-protocol.md and listed in ``CloseCode``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from eventbus import (
    BusClosed,
    BusNotStarted,
    CursorExpired,
    CursorInFuture,
    EventBusError,
    EventRecord,
    SubscriberTooSlow,
    Subscription,
)
from protocol.catalog import EventType
from protocol.payloads import ClientAttached, ClientDetached, Payload
from server.auth import Principal
from server.errors import ApiError, InvalidRequest, error_body
from server.middleware import deny_websocket, principal_of

if TYPE_CHECKING:
    from eventbus import Bus
    from server.cluster import ClusterServices
    from server.presence import Presence
    from server.session_registry import SessionRegistry
    from server.store import Store

log = logging.getLogger("toolrelay.streaming")

# Text messages a client may send (all ignored) before it is closed for talking.
MAX_CLIENT_MESSAGES = 100


class StreamServices(Protocol):
    """What an event stream uses of the server: the bus it subscribes to,
    the sessions and store it checks visibility against, presence, and the
    cluster when there is one (``server.runtime.Services`` provides them)."""

    @property
    def bus(self) -> Bus: ...

    @property
    def sessions(self) -> SessionRegistry: ...

    @property
    def store(self) -> Store: ...

    @property
    def presence(self) -> Presence: ...

    @property
    def cluster(self) -> ClusterServices | None: ...


class CloseCode(IntEnum):
    """Close codes of the event streams."""

    NORMAL = 1000  # the session was deleted: its stream has ended
    UNSUPPORTED_DATA = 1003  # the client sent a binary frame
    POLICY_VIOLATION = 1008  # the client kept sending messages on a one-way stream
    INTERNAL_ERROR = 1011  # the stream failed on the server; resume with after=
    SERVICE_RESTART = 1012  # the server is shutting down; reconnect later with after=
    BAD_CURSOR = 4400  # after= is ahead of the log (a cursor from another server?)
    CURSOR_EXPIRED = 4410  # the events after the cursor were pruned; reload state
    TOO_SLOW = 4429  # the client fell too far behind; reconnect with after=<last>


@dataclass(frozen=True, slots=True)
class _Close:
    code: int
    reason: str


_DISCONNECTED = _Close(0, "client disconnected")


def parse_after(raw: str | None) -> int | None:
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidRequest(f"after must be a non-negative integer, got {raw!r}", field="after")
    return value


def _reason(text: str) -> str:
    # A close reason may hold at most 123 bytes of UTF-8.
    encoded = text.encode("utf-8")
    return text if len(encoded) <= 123 else encoded[:120].decode("utf-8", "ignore") + "..."


async def serve_stream(ws: WebSocket, runtime: StreamServices, session_id: str | None) -> None:
    """Authenticate, subscribe (replay from ``after``), then stream until one side ends."""
    principal = principal_of(ws.scope)
    try:
        if session_id is not None:
            if runtime.cluster is not None:  # the session may live on another replica
                await runtime.cluster.check_visible(principal, session_id)
            else:
                runtime.sessions.get(principal, session_id)
        after = parse_after(ws.query_params.get("after"))
    except ApiError as err:
        await deny_websocket(ws.scope, ws.send, err.status, err.body())
        return
    subscription = await _open(ws, runtime, principal, session_id, after)
    if subscription is None:
        return
    await ws.accept()
    attachment = runtime.presence.attach(
        session_id=session_id, client_name=principal.client_name, token_name=principal.token_name
    )
    if session_id is not None:
        if runtime.cluster is not None:
            await runtime.cluster.attached(session_id, attachment)
        _publish_presence(
            runtime, EventType.CLIENT_ATTACHED, session_id, attachment.client_id, principal
        )
    close: _Close = _DISCONNECTED
    try:
        close = await _pump(ws, runtime, subscription, principal)
    finally:
        subscription.close()
        runtime.presence.detach(attachment)
        if runtime.cluster is not None and session_id is not None:
            await runtime.cluster.detached(session_id, attachment)
        # After session.deleted nothing more belongs to the session's stream.
        if session_id is not None and (
            runtime.store.get_session(session_id) is not None
            or (runtime.cluster is not None and await runtime.cluster.known(session_id))
        ):
            reason = "disconnected" if close is _DISCONNECTED else close.reason
            _publish_presence(
                runtime,
                EventType.CLIENT_DETACHED,
                session_id,
                attachment.client_id,
                principal,
                reason,
            )
    if close is not _DISCONNECTED and ws.client_state == WebSocketState.CONNECTED:
        with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
            await ws.close(close.code, _reason(close.reason))


async def _open(
    ws: WebSocket,
    runtime: StreamServices,
    principal: Principal,
    session_id: str | None,
    after: int | None,
) -> Subscription | None:
    """The socket's subscription, or None once the socket was refused or closed
    with the code that tells the client why (shutting down, a bad cursor)."""
    try:
        return await _subscribe(runtime, principal, session_id, after)
    except (BusClosed, BusNotStarted):
        body = error_body("unavailable", "the server is shutting down")
        await deny_websocket(ws.scope, ws.send, 503, body)
        return None
    except CursorExpired as exc:
        # Accepted, then closed: browsers can read a close code and reason, not an
        # HTTP status, and this one tells the client what to do.
        await _accept_and_close(
            ws, CloseCode.CURSOR_EXPIRED, f"cursor expired; oldest usable after={exc.oldest_cursor}"
        )
        return None
    except CursorInFuture as exc:
        await _accept_and_close(
            ws,
            CloseCode.BAD_CURSOR,
            f"after={exc.cursor} is ahead of the log (latest {exc.latest_cursor})",
        )
        return None
    except EventBusError as exc:
        log.error("cannot open an event stream: %s", exc)
        body = error_body("unavailable", "the event log cannot be read; see the server log")
        await deny_websocket(ws.scope, ws.send, 503, body)
        return None


async def _subscribe(
    runtime: StreamServices, principal: Principal, session_id: str | None, after: int | None
) -> Subscription:
    """The bus subscription behind one socket.

    On the all-sessions stream a user token sees only its own sessions'
    events: the subscription itself is filtered, so events it may not see
    take no room in its queue, and its replay reads only those sessions' rows
    from the log (a token that owns nothing replays nothing and reads nothing).
    """
    if session_id is not None or principal.is_admin:
        return await runtime.bus.subscribe(session_id=session_id, after=after)
    token = principal.token_name
    owner_of = runtime.sessions.owner_of
    store = runtime.store

    # Called for every event fanned out: remember each session's answer (an
    # owner never changes), but not "no such session", which may be created yet.
    seen: dict[str, bool] = {}

    def visible(sid: str) -> bool:
        answer = seen.get(sid)
        if answer is None:
            owner = owner_of(sid)
            answer = owner == token
            if owner is not None:
                seen[sid] = answer
        return answer

    def visible_sessions() -> list[str]:
        return store.session_ids_of(token)

    return await runtime.bus.subscribe(
        session_id=None, after=after, visible=visible, visible_sessions=visible_sessions
    )


async def _accept_and_close(ws: WebSocket, code: int, reason: str) -> None:
    await ws.accept()
    with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
        await ws.close(code, _reason(reason))


async def _pump(
    ws: WebSocket, runtime: StreamServices, subscription: Subscription, principal: Principal
) -> _Close:
    sender = asyncio.create_task(_send_events(ws, runtime, subscription, principal))
    receiver = asyncio.create_task(_watch_client(ws))
    try:
        done, _ = await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (sender, receiver):
            task.cancel()
        await asyncio.gather(sender, receiver, return_exceptions=True)
    first = sender if sender in done else receiver
    if first.cancelled():
        return _DISCONNECTED
    exc = first.exception()
    if exc is not None:
        log.error("event stream failed", exc_info=exc)
        return _Close(CloseCode.INTERNAL_ERROR, "internal error; reconnect with after=")
    return first.result()


class _SocketSink:
    """Writes an event to the socket in the bus's fan-out, while the sender task
    waits with nothing queued (``Subscription.deliver_directly``): the frame
    leaves in the publisher's call instead of one loop iteration later.

    Only a send that completes without suspending is made here: with uvicorn's
    ``websockets-sansio`` (which the server pins, server/cli.py) and no
    middleware around a WebSocket's ``send``, the only suspension is the wait
    for a paused socket to become writable, before any byte is written. Such a
    send is dropped at that point and the event declined: it goes through the
    queue and the sender task, which waits for the socket as before. A record
    the sender must act on (``session.deleted`` ends the stream) is declined
    too, as is anything after an error (the sender meets it and ends).

    Why it stays: on the paced run of benchmarks/fanout.py it keeps the
    publish-to-receive latency at N = 10 and 100 sockets near the bare loop's
    (benchmarks/README.md, "Issue 26: the event bus split"). What it counts on is pinned by
    tests/eventbus/test_direct_socket_write.py (a real uvicorn server and a
    real websockets client).
    """

    __slots__ = ("_failed", "_ws")

    def __init__(self, ws: WebSocket) -> None:
        self._ws = ws
        self._failed = False

    def __call__(self, record: EventRecord) -> bool:
        if self._failed or record.type == "session.deleted":
            return False
        sending = self._ws.send_text(record.text)
        try:
            sending.send(None)
        except StopIteration:
            return True
        except Exception:
            self._failed = True  # (disconnected) the sender task meets it and ends
            return False
        # It would wait for the socket: nothing was written; the sender takes it.
        sending.close()
        return False


async def _send_events(
    ws: WebSocket, runtime: StreamServices, subscription: Subscription, principal: Principal
) -> _Close:
    per_session = subscription.session_id is not None
    subscription.deliver_directly(_SocketSink(ws))
    # (A user token's all-sessions subscription is filtered already: see _subscribe.)
    record: EventRecord
    try:
        async for record in subscription:
            try:
                await ws.send_text(record.text)
            except (WebSocketDisconnect, RuntimeError, OSError):
                return _DISCONNECTED
            if per_session and record.type == "session.deleted":
                return _Close(CloseCode.NORMAL, "session deleted")
    except SubscriberTooSlow:
        # The subscription's own cursor, not the error's: the error records the cursor
        # at the overflow, and the records queued before it were still sent after it.
        last = subscription.last_cursor
        resume = "" if last is None else f" resume with after={last}"
        return _Close(CloseCode.TOO_SLOW, "client too slow;" + resume)
    except CursorExpired as exc:
        return _Close(
            CloseCode.CURSOR_EXPIRED, f"cursor expired; oldest usable after={exc.oldest_cursor}"
        )
    except BusClosed:
        return _Close(CloseCode.SERVICE_RESTART, "server shutting down; reconnect with after=")
    except EventBusError as exc:
        log.error("event stream failed: %s", exc)
        return _Close(CloseCode.INTERNAL_ERROR, "internal error; reconnect with after=")
    # The subscription was closed by us (not expected while the socket is open).
    return _Close(CloseCode.SERVICE_RESTART, "stream closed; reconnect with after=")


async def _watch_client(ws: WebSocket) -> _Close:
    """Read what the client sends: nothing is expected. Ends on disconnect."""
    talked = 0
    while True:
        try:
            message = await ws.receive()
        except (WebSocketDisconnect, RuntimeError, OSError):
            return _DISCONNECTED
        if message["type"] == "websocket.disconnect":
            return _DISCONNECTED
        if message.get("bytes") is not None:
            return _Close(
                CloseCode.UNSUPPORTED_DATA, "this stream is one-way; binary frames refused"
            )
        talked += 1
        if talked > MAX_CLIENT_MESSAGES:
            return _Close(
                CloseCode.POLICY_VIOLATION, "this stream is one-way; act over HTTP instead"
            )


def _publish_presence(
    runtime: StreamServices,
    type: EventType,
    session_id: str,
    client_id: str,
    principal: Principal,
    reason: str | None = None,
) -> None:
    """The one publisher of ``client.attached`` and ``client.detached``."""
    payload: Payload
    if type is EventType.CLIENT_DETACHED:
        payload = ClientDetached(
            client_id=client_id, client_name=principal.client_name, reason=reason
        )
    else:
        payload = ClientAttached(client_id=client_id, client_name=principal.client_name)
    try:
        runtime.bus.emit(payload, session_id=session_id)
    except EventBusError:
        # Shutting down: presence events are not worth failing over.
        log.debug("presence event %s not published: bus closed", type)
