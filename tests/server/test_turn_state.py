"""A turn's state machine (server/turn_state.py): one table of moves, the end
each request leads to, and each terminal event published exactly once; and
the reasons it writes are the ones the spec lists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from protocol.canonical import text_result
from protocol.payloads import Payload
from server.store import TurnCancelReason, TurnFailureReason, TurnRecord, TurnStatus
from server.turn_state import TRANSITIONS, InvalidTurnTransition, Turn, TurnEnd, TurnPhase
from server.turns import TurnFailure, TurnOutcome

SPEC = Path(__file__).resolve().parents[2] / "specs" / "server-api.md"


class _Recorder:
    """An EventPublisher that keeps what it was given."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any], str | None]] = []

    def publish(
        self,
        type: str,
        data: Any,
        *,
        session_id: str,
        turn_id: str | None = None,
    ) -> Any:
        self.events.append((type, dict(data), turn_id))
        return None

    def emit(self, payload: Payload, *, session_id: str, turn_id: str | None = None) -> None:
        # Recorded as clients read it: the keys the publisher set.
        data = payload.model_dump(mode="json", exclude_unset=True)
        self.events.append((str(payload.event_type), data, turn_id))


def _turn() -> tuple[Turn, _Recorder]:
    record = TurnRecord(
        id="turn_1",
        session_id="ses_1",
        number=1,
        kind="tool_uses",
        status=TurnStatus.RUNNING,
        request={"tool_uses": []},
        created_by="test",
    )
    publisher = _Recorder()
    return Turn(record=record, publisher=publisher), publisher


def _finish(turn: Turn, **kwargs: Any) -> TurnEnd:
    args: dict[str, Any] = {
        "outcome": None,
        "failure": None,
        "failure_reason": TurnFailureReason.INTERNAL_ERROR,
        "interrupted": False,
        "usage": None,
        "results": 0,
    }
    args.update(kwargs)
    end = turn.decide(**args)
    turn.end(end)
    return end


def test_the_table_covers_every_phase_and_ended_turns_never_move() -> None:
    assert set(TRANSITIONS) == set(TurnPhase)
    for phase in (TurnPhase.COMPLETED, TurnPhase.FAILED, TurnPhase.CANCELLED):
        assert TRANSITIONS[phase] == frozenset()


def test_a_cancelled_turn_ends_cancelled_whatever_its_runner_did() -> None:
    turn, publisher = _turn()
    assert turn.request_cancel("alice", TurnCancelReason.CANCELLED)
    # A second cancel does not replace the first.
    assert not turn.request_cancel("bob", TurnCancelReason.SESSION_DELETED)
    end = _finish(turn, failure="boom", usage={"input_tokens": 1, "output_tokens": 2})
    assert (end.status, end.reason, end.message) == (TurnStatus.CANCELLED, "cancelled", None)
    assert publisher.events == [
        (
            "turn.cancelled",
            {
                "reason": "cancelled",
                "cancelled_by": "alice",
                "usage": {"input_tokens": 1, "output_tokens": 2},
            },
            "turn_1",
        )
    ]


def test_a_shutdown_overrides_a_cancel_and_nothing_overrides_a_shutdown() -> None:
    turn, publisher = _turn()
    turn.request_cancel("alice", TurnCancelReason.CANCELLED)
    turn.request_stop(TurnFailureReason.SERVER_SHUTDOWN)
    assert not turn.request_cancel("bob", TurnCancelReason.CANCELLED)
    end = _finish(turn, outcome=TurnOutcome(results=[]))
    assert (end.status, end.reason) == (TurnStatus.FAILED, "server_shutdown")
    assert [(t, d["reason"]) for t, d, _ in publisher.events] == [
        ("turn.failed", "server_shutdown")
    ]


def test_a_decided_end_holds_and_is_published_once() -> None:
    turn, publisher = _turn()
    outcome = TurnOutcome(results=[text_result("t1", "ok"), text_result("t2", "no", is_error=True)])
    end = turn.decide(
        outcome, None, TurnFailureReason.INTERNAL_ERROR, False, None, results=len(outcome.results)
    )
    # A cancel arriving while the end is being recorded changes nothing.
    assert not turn.request_cancel("alice", TurnCancelReason.CANCELLED)
    turn.request_stop(TurnFailureReason.SERVER_SHUTDOWN)
    turn.end(end)
    with pytest.raises(InvalidTurnTransition):
        turn.end(end)
    assert publisher.events == [
        ("turn.completed", {"usage": None, "results": 2, "errors": 1}, "turn_1")
    ]


def test_a_handled_failure_keeps_its_details_and_an_interruption_fails() -> None:
    turn, publisher = _turn()
    failure = TurnFailure(TurnFailureReason.STEP_LIMIT, "too many steps", {"steps": 3})
    end = _finish(turn, outcome=TurnOutcome(results=[], failure=failure))
    assert (end.status, end.reason, end.message) == (
        TurnStatus.FAILED,
        "step_limit",
        "too many steps",
    )
    assert publisher.events[0][1] == {
        "steps": 3,
        "reason": "step_limit",
        "message": "too many steps",
        "usage": None,
    }
    other, _ = _turn()
    assert _finish(other, interrupted=True).reason == "interrupted"


def test_every_reason_a_turn_can_end_with_is_in_the_spec() -> None:
    """The reasons are a client contract: specs/server-api.md lists each one."""
    text = SPEC.read_text()
    section = text[text.index("`reason`: `null` when completed") :]
    section = section[: section.index("\n\n")]
    listed = set(re.findall(r"`([a-z_ ]+)`", section))
    assert {r.value for r in TurnFailureReason} <= listed
    assert {r.value for r in TurnCancelReason} <= listed
