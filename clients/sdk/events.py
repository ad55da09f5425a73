"""Typed events as the SDK hands them out.

Every WebSocket message is one envelope (``seq``, ``session_seq``, ``id``,
``type``, ``session_id``, ``turn_id``, ``ts``, ``data``). :func:`parse_event`
picks a class by ``type``: known types get a typed ``data`` model (so
``event.data.request_id`` type-checks), anything else comes back as
:class:`GenericEvent` with ``data`` as a plain dict, so a newer server never
breaks an older client.

The ``data`` models are the server's own (``protocol.payloads``, the shared
vocabulary): one set of payload types from the publisher to this SDK. They
keep unknown keys (``extra="allow"``) and require what the contract promises.
The ``...Data`` names below are the SDK's earlier names for them, kept as
aliases.

Example::

    async for event in client.events(session_id):
        if isinstance(event, ConfirmationRequested):
            print(event.data.tool_name, event.data.preview.text)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from clients.sdk.errors import ProtocolViolation
from protocol import payloads
from protocol.catalog import EventType
from protocol.validation_errors import describe_errors

log = logging.getLogger("toolrelay.sdk")

TERMINAL_TURN_EVENTS = frozenset(
    {EventType.TURN_COMPLETED, EventType.TURN_FAILED, EventType.TURN_CANCELLED}
)

# The payload models under the names this SDK used before it shared them.
Payload = payloads.Payload
Preview = payloads.Preview
SessionCreatedData = payloads.SessionCreated
SessionDeletedData = payloads.SessionDeleted
ClientPresenceData = payloads.ClientDetached
TurnData = payloads.TurnEnded
MessageDeltaData = payloads.MessageDelta
MessageCompletedData = payloads.MessageCompleted
ToolCalledData = payloads.ToolCalled
ToolInputInvalidData = payloads.ToolInputInvalid
ConfirmationRequestedData = payloads.ToolConfirmationRequested
ConfirmationResolvedData = payloads.ToolConfirmationResolved
ToolOutputDeltaData = payloads.ToolOutputDelta
ToolCompletedData = payloads.ToolCompleted
ToolFailedData = payloads.ToolFailed


DataT = TypeVar("DataT")


class Event(BaseModel, Generic[DataT]):
    """One event envelope; ``data`` is typed in the subclasses below.

    ``seq`` orders events across the server; ``session_seq`` counts 1, 2, 3 ...
    within one session with no gaps.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    seq: int
    session_seq: int
    id: str
    type: str
    session_id: str
    turn_id: str | None
    ts: str
    data: DataT


class GenericEvent(Event[dict[str, Any]]):
    """An event whose type this SDK does not model; ``data`` is the raw dict."""


class SessionCreated(Event[payloads.SessionCreated]):
    """``session.created``."""


class SessionDeleted(Event[payloads.SessionDeleted]):
    """``session.deleted``."""


class ClientAttached(Event[payloads.ClientAttached]):
    """``client.attached``."""


class ClientDetached(Event[payloads.ClientDetached]):
    """``client.detached``."""


class TurnStarted(Event[payloads.TurnStarted]):
    """``turn.started``."""


class TurnCompleted(Event[payloads.TurnCompleted]):
    """``turn.completed``."""


class TurnFailed(Event[payloads.TurnFailed]):
    """``turn.failed``."""


class TurnCancelled(Event[payloads.TurnCancelled]):
    """``turn.cancelled``."""


class MessageDelta(Event[payloads.MessageDelta]):
    """``message.delta``."""


class MessageCompleted(Event[payloads.MessageCompleted]):
    """``message.completed``."""


class ToolCalled(Event[payloads.ToolCalled]):
    """``tool.called``."""


class ToolInputInvalid(Event[payloads.ToolInputInvalid]):
    """``tool.input_invalid``."""


class ConfirmationRequested(Event[payloads.ToolConfirmationRequested]):
    """``tool.confirmation_requested``."""


class ConfirmationResolved(Event[payloads.ToolConfirmationResolved]):
    """``tool.confirmation_resolved``."""


class ToolOutputDelta(Event[payloads.ToolOutputDelta]):
    """``tool.output_delta``."""


class ToolCompleted(Event[payloads.ToolCompleted]):
    """``tool.completed``."""


class ToolFailed(Event[payloads.ToolFailed]):
    """``tool.failed``."""


class ModelRetry(Event[payloads.ModelRetry]):
    """``model.retry``."""


class ToolsChanged(Event[payloads.ToolsChanged]):
    """``tools.changed``."""


class MemoryAdded(Event[payloads.MemoryAdded]):
    """``memory.added``."""


class MemoryReplaced(Event[payloads.MemoryReplaced]):
    """``memory.replaced``."""


class MemoryDeleted(Event[payloads.MemoryDeleted]):
    """``memory.deleted``."""


class MemoryConsolidated(Event[payloads.MemoryConsolidated]):
    """``memory.consolidated``."""


class HookCompleted(Event[payloads.HookCompleted]):
    """``hook.completed``."""


class ToolPlanned(Event[payloads.ToolPlanned]):
    """``tool.planned``."""


class GuardrailWarning(Event[payloads.GuardrailWarning]):
    """``guardrail.warning``."""


class QualityGateCompleted(Event[payloads.QualityGateCompleted]):
    """``quality_gate.completed``."""


AnyEvent = Event[Any]

EVENT_CLASSES: Mapping[str, type[AnyEvent]] = {
    EventType.SESSION_CREATED: SessionCreated,
    EventType.SESSION_DELETED: SessionDeleted,
    EventType.CLIENT_ATTACHED: ClientAttached,
    EventType.CLIENT_DETACHED: ClientDetached,
    EventType.TURN_STARTED: TurnStarted,
    EventType.TURN_COMPLETED: TurnCompleted,
    EventType.TURN_FAILED: TurnFailed,
    EventType.TURN_CANCELLED: TurnCancelled,
    EventType.MESSAGE_DELTA: MessageDelta,
    EventType.MESSAGE_COMPLETED: MessageCompleted,
    EventType.MODEL_RETRY: ModelRetry,
    EventType.TOOL_CALLED: ToolCalled,
    EventType.TOOL_INPUT_INVALID: ToolInputInvalid,
    EventType.TOOL_CONFIRMATION_REQUESTED: ConfirmationRequested,
    EventType.TOOL_CONFIRMATION_RESOLVED: ConfirmationResolved,
    EventType.TOOL_OUTPUT_DELTA: ToolOutputDelta,
    EventType.TOOL_COMPLETED: ToolCompleted,
    EventType.TOOL_FAILED: ToolFailed,
    EventType.TOOLS_CHANGED: ToolsChanged,
    EventType.MEMORY_ADDED: MemoryAdded,
    EventType.MEMORY_REPLACED: MemoryReplaced,
    EventType.MEMORY_DELETED: MemoryDeleted,
    EventType.MEMORY_CONSOLIDATED: MemoryConsolidated,
    EventType.HOOK_COMPLETED: HookCompleted,
    EventType.TOOL_PLANNED: ToolPlanned,
    EventType.GUARDRAIL_WARNING: GuardrailWarning,
    EventType.QUALITY_GATE_COMPLETED: QualityGateCompleted,
}
"""The event class of every catalog type (keys are ``EventType`` members, which
hash and compare as their plain names)."""


def parse_event(raw: str | bytes | Mapping[str, Any]) -> AnyEvent:
    """Decode one envelope (JSON text or a dict) into its typed event class.

    Raises :class:`ProtocolViolation` naming the event type and the bad fields when
    the envelope does not match the contract. A known type whose payload this
    SDK does not recognise (a newer server changed it) comes back as a
    :class:`GenericEvent` with a logged warning, so one event never ends a stream.
    """
    if isinstance(raw, str | bytes):
        try:
            decoded = json.loads(raw)
        except ValueError as exc:
            raise ProtocolViolation(f"event is not valid JSON: {exc}") from None
    else:
        decoded = raw
    if not isinstance(decoded, Mapping):
        raise ProtocolViolation(f"event must be a JSON object, got {type(decoded).__name__}")
    event_type = decoded.get("type")
    cls = EVENT_CLASSES.get(event_type, GenericEvent) if isinstance(event_type, str) else None
    if cls is None:
        raise ProtocolViolation("event has no string 'type' field")
    try:
        return cls.model_validate(decoded)
    except ValidationError as exc:
        problems = "; ".join(describe_errors(exc))
        if cls is GenericEvent or any(err["loc"][:1] != ("data",) for err in exc.errors()):
            raise ProtocolViolation(
                f"event {event_type!r} does not match the contract: {problems}"
            ) from None
    # The envelope is sound but a known payload is not what this SDK expects (a
    # newer server changed it): hand it out untyped rather than end the stream.
    log.warning("event %r has a payload this SDK does not know: %s", event_type, problems)
    try:
        return GenericEvent.model_validate(decoded)
    except ValidationError:  # pragma: no cover - the envelope validated above
        raise ProtocolViolation(f"event {event_type!r} does not match the contract") from None
