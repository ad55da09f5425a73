"""One running turn as a small state machine: its phase, the table of the
phases it may move to, and the one place its ``turn.*`` events are published.

A turn starts ``running``. Two requests can arrive while it runs: a client's
cancel (the turn will end ``cancelled`` whatever its runner returns) and the
server's shutdown (it will end ``failed`` with ``server_shutdown``, also when
a cancel came first). When the runner returns, :meth:`Turn.ending` reads the
phase to decide the end (and holds it while the end is recorded);
:meth:`Turn.end` checks the move against
``TRANSITIONS`` and publishes the terminal event, exactly once. The store
keeps only the four :class:`~server.store.TurnStatus` values; ``cancelling``
and ``stopping`` are in-memory phases of a turn that is still ``running``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dispatcher.publisher import EventPublisher
from protocol.payloads import Payload, TurnCancelled, TurnCompleted, TurnFailed, TurnStarted
from server.store import (
    TurnCancelReason,
    TurnFailureReason,
    TurnRecord,
    TurnStatus,
)
from server.turns import TurnContext, TurnOutcome

SHUTDOWN_MESSAGE = "the server stopped while the turn was running"
RESTART_MESSAGE = "the server stopped unexpectedly while the turn was running"
INTERRUPTED_MESSAGE = "the turn's task was cancelled"


class TurnPhase(StrEnum):
    """Where a turn is in its life (finer than the stored TurnStatus)."""

    RUNNING = "running"
    CANCELLING = "cancelling"  # a client asked: the turn ends cancelled
    STOPPING = "stopping"  # the server shuts down: the turn ends failed
    FINISHING = "finishing"  # its end is decided, being recorded; no request changes it
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


# The one table of moves. A shutdown overrides a cancel in progress (the
# server is going away whatever the client wanted); nothing overrides a
# shutdown; an ended turn never moves again.
_ENDS = frozenset({TurnPhase.COMPLETED, TurnPhase.FAILED, TurnPhase.CANCELLED})
TRANSITIONS: dict[TurnPhase, frozenset[TurnPhase]] = {
    # RUNNING -> FAILED directly: recovery ends a turn no runner holds any more.
    TurnPhase.RUNNING: frozenset(
        {TurnPhase.CANCELLING, TurnPhase.STOPPING, TurnPhase.FINISHING, TurnPhase.FAILED}
    ),
    TurnPhase.CANCELLING: frozenset({TurnPhase.STOPPING, TurnPhase.FINISHING}),
    TurnPhase.STOPPING: frozenset({TurnPhase.FINISHING}),
    TurnPhase.FINISHING: _ENDS,
    TurnPhase.COMPLETED: frozenset(),
    TurnPhase.FAILED: frozenset(),
    TurnPhase.CANCELLED: frozenset(),
}

# The stored status of each phase.
STATUS_OF: dict[TurnPhase, TurnStatus] = {
    TurnPhase.RUNNING: TurnStatus.RUNNING,
    TurnPhase.CANCELLING: TurnStatus.RUNNING,
    TurnPhase.STOPPING: TurnStatus.RUNNING,
    TurnPhase.FINISHING: TurnStatus.RUNNING,
    TurnPhase.COMPLETED: TurnStatus.COMPLETED,
    TurnPhase.FAILED: TurnStatus.FAILED,
    TurnPhase.CANCELLED: TurnStatus.CANCELLED,
}


class InvalidTurnTransition(RuntimeError):
    """A move the table does not allow: a bug in the supervisor, never a client's doing."""


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """How a turn ends: its terminal phase, the stored reason and message, and
    the terminal event's data."""

    phase: TurnPhase
    reason: str | None
    data: dict[str, Any]

    @property
    def status(self) -> TurnStatus:
        return STATUS_OF[self.phase]

    @property
    def message(self) -> str | None:
        """What the store keeps as the turn's message (failed turns only)."""
        if self.phase is not TurnPhase.FAILED:
            return None
        message = self.data.get("message")
        return None if message is None else str(message)


@dataclass(slots=True)
class Turn:
    """A running turn: its record, what its runner sees, its task and phase.

    The phase changes only through :meth:`request_cancel`,
    :meth:`request_stop` and :meth:`end`, each checked against ``TRANSITIONS``;
    :meth:`start` and :meth:`end` publish the turn's events.
    """

    record: TurnRecord
    publisher: EventPublisher
    # What the runner sees; None for a turn only recovery ends (no runner left).
    context: TurnContext | None = None
    phase: TurnPhase = TurnPhase.RUNNING
    task: asyncio.Task[None] | None = None
    cancelled_by: str | None = None
    cancel_reason: TurnCancelReason | None = None
    stop_reason: TurnFailureReason | None = None
    # The task winding the turn down after a cancel (started once).
    canceller: asyncio.Task[None] | None = field(default=None)

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def session_id(self) -> str:
        return self.record.session_id

    def _move(self, to: TurnPhase) -> None:
        if to not in TRANSITIONS[self.phase]:
            raise InvalidTurnTransition(f"turn {self.id}: {self.phase} cannot become {to}")
        self.phase = to

    def start(self, data: dict[str, Any]) -> None:
        """Publish ``turn.started`` (the record is stored, the task not yet made)."""
        self._publish(TurnPhase.RUNNING, data)

    def request_cancel(self, by: str, reason: TurnCancelReason) -> bool:
        """Mark the turn to end cancelled; False if it is already ending
        otherwise (a first cancel or a shutdown wins)."""
        if TurnPhase.CANCELLING not in TRANSITIONS[self.phase]:
            return False
        self._move(TurnPhase.CANCELLING)
        self.cancelled_by = by
        self.cancel_reason = reason
        return True

    def request_stop(self, reason: TurnFailureReason) -> None:
        """Mark the turn to end failed with ``reason`` (the server is stopping)."""
        if TurnPhase.STOPPING in TRANSITIONS[self.phase]:
            self._move(TurnPhase.STOPPING)
            self.stop_reason = reason

    @property
    def cancel_requested(self) -> bool:
        return self.cancelled_by is not None

    def decide(
        self,
        outcome: TurnOutcome | None,
        failure: str | None,
        failure_reason: TurnFailureReason,
        interrupted: bool,
        usage: dict[str, int] | None,
        results: int,
        plan: list[dict[str, Any]] | None = None,
    ) -> TurnEnd:
        """Decide the turn's end (see :meth:`ending`) and hold it: from here on a
        cancel or stop request no longer changes it."""
        end = self.ending(outcome, failure, failure_reason, interrupted, usage, results, plan)
        self._move(TurnPhase.FINISHING)
        return end

    def ending(
        self,
        outcome: TurnOutcome | None,
        failure: str | None,
        failure_reason: TurnFailureReason,
        interrupted: bool,
        usage: dict[str, int] | None,
        results: int,
        plan: list[dict[str, Any]] | None = None,
    ) -> TurnEnd:
        """The end this turn takes now that its runner returned (``outcome``),
        raised (``failure``, ``failure_reason``) or had its task cancelled
        (``interrupted``). A stop, then a cancel request decides it first.
        ``plan`` (a dry-run turn's planned actions) goes into a completed
        turn's event; the turn record keeps it whatever the end."""
        if self.phase is TurnPhase.STOPPING:
            reason = self.stop_reason or TurnFailureReason.SERVER_SHUTDOWN
            return TurnEnd(
                TurnPhase.FAILED, reason, {"reason": reason.value, "message": SHUTDOWN_MESSAGE}
            )
        if self.phase is TurnPhase.CANCELLING:
            cancel = self.cancel_reason or TurnCancelReason.CANCELLED
            data: dict[str, Any] = {"reason": cancel.value, "cancelled_by": self.cancelled_by}
            if usage is not None:
                data["usage"] = usage
            return TurnEnd(TurnPhase.CANCELLED, cancel, data)
        if failure is not None:
            return TurnEnd(
                TurnPhase.FAILED,
                failure_reason,
                {"reason": failure_reason.value, "message": failure},
            )
        if outcome is not None and outcome.failure is not None:
            # The runner ended the turn on an error it handled (a provider error, a step limit).
            handled = outcome.failure
            data = {
                **handled.details,
                "reason": str(handled.reason),
                "message": handled.message,
                "usage": usage,
            }
            return TurnEnd(TurnPhase.FAILED, handled.reason, data)
        if interrupted:
            reason = TurnFailureReason.INTERRUPTED
            return TurnEnd(
                TurnPhase.FAILED, reason, {"reason": reason.value, "message": INTERRUPTED_MESSAGE}
            )
        errors = sum(1 for r in outcome.results if r.is_error) if outcome else 0
        data = {"usage": usage, "results": results, "errors": errors}
        if outcome is not None:
            data.update(outcome.details)
        if plan is not None:
            data["plan"] = plan
        return TurnEnd(TurnPhase.COMPLETED, None, data)

    def end(self, end: TurnEnd) -> None:
        """Take ``end`` (checked against the table) and publish its terminal event."""
        self._move(end.phase)
        self._publish(end.phase, end.data)

    def _publish(self, phase: TurnPhase, data: dict[str, Any]) -> None:
        self.publisher.emit(turn_event(phase, data), session_id=self.session_id, turn_id=self.id)


def turn_event(phase: TurnPhase, data: dict[str, Any]) -> Payload:
    """The one builder of ``turn.*`` payloads (tests/test_event_publishers.py):
    ``turn.started`` for a running turn, else the event of its end. Besides
    :class:`Turn`, only server/cluster.py uses it, to end the turns of a lost
    replica that no ``Turn`` object here holds."""
    if phase is TurnPhase.COMPLETED:
        return TurnCompleted(**data)
    if phase is TurnPhase.FAILED:
        return TurnFailed(**data)
    if phase is TurnPhase.CANCELLED:
        return TurnCancelled(**data)
    return TurnStarted(**data)
