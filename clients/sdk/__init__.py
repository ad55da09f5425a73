"""Python SDK for toolrelay: an async client over HTTP (httpx2) and WebSocket.

Example::

    import asyncio
    from clients.sdk import ConfirmationRequested, ToolrelayClient

    async def main() -> None:
        async with ToolrelayClient("http://127.0.0.1:8765", "TOKEN", "script") as tr:
            session = await tr.create_session("/tmp/ws")
            turn_id = await tr.send_tool_uses(session.id, [
                {"id": "tu1", "name": "write_file", "input": {"path": "a.txt", "content": "hi"}},
            ])
            async with tr.events(session.id, after=0) as stream:
                event = await stream.next_matching(
                    lambda e: isinstance(e, ConfirmationRequested), within=30
                )
                assert isinstance(event, ConfirmationRequested)
                await tr.allow(session.id, turn_id, event.data.request_id)
            print((await tr.wait_for_turn(session.id, turn_id)).status)

    asyncio.run(main())
"""

from clients.sdk.backoff import NO_RETRY, Backoff
from clients.sdk.client import ToolrelayClient
from clients.sdk.errors import (
    AlreadyResolved,
    ApiError,
    Conflict,
    ConnectionFailed,
    CursorExpired,
    Forbidden,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    ProtocolViolation,
    ServerFault,
    StreamClosed,
    StreamError,
    StreamGap,
    ToolrelayError,
    TurnEndedFailed,
    Unauthorized,
    WaitTimeout,
)
from clients.sdk.events import (
    AnyEvent,
    ClientAttached,
    ClientDetached,
    ConfirmationRequested,
    ConfirmationResolved,
    Event,
    GenericEvent,
    MessageCompleted,
    MessageDelta,
    SessionCreated,
    SessionDeleted,
    ToolCalled,
    ToolCompleted,
    ToolFailed,
    ToolInputInvalid,
    ToolOutputDelta,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    parse_event,
)
from clients.sdk.models import (
    AttachedClient,
    ConversationMessage,
    PendingConfirmation,
    PlannedAction,
    Resolution,
    Session,
    ToolInfo,
    Turn,
)
from clients.sdk.stream import ConnectionState, EventStream

__all__ = [
    "NO_RETRY",
    "AlreadyResolved",
    "AnyEvent",
    "ApiError",
    "AttachedClient",
    "Backoff",
    "ClientAttached",
    "ClientDetached",
    "ConfirmationRequested",
    "ConfirmationResolved",
    "Conflict",
    "ConnectionFailed",
    "ConnectionState",
    "ConversationMessage",
    "CursorExpired",
    "Event",
    "EventStream",
    "Forbidden",
    "GenericEvent",
    "InvalidRequest",
    "MessageCompleted",
    "MessageDelta",
    "NotFound",
    "PayloadTooLarge",
    "PendingConfirmation",
    "PlannedAction",
    "ProtocolViolation",
    "Resolution",
    "ServerFault",
    "Session",
    "SessionCreated",
    "SessionDeleted",
    "StreamClosed",
    "StreamError",
    "StreamGap",
    "ToolCalled",
    "ToolCompleted",
    "ToolFailed",
    "ToolInfo",
    "ToolInputInvalid",
    "ToolOutputDelta",
    "ToolrelayClient",
    "ToolrelayError",
    "Turn",
    "TurnCancelled",
    "TurnCompleted",
    "TurnEndedFailed",
    "TurnFailed",
    "TurnStarted",
    "Unauthorized",
    "WaitTimeout",
    "parse_event",
]
