"""Replica loss in cluster mode (server/cluster.py): when an owner's lease
lapses with turns listed as running, one surviving replica ends them.

Its pending confirmations are resolved ``cancelled`` (decided in Redis by
the ``AnswerArbiter`` first, so an answer given meanwhile wins), then each
turn ends ``turn.failed`` with reason ``replica_lost``, flushed to Redis
before the claim counts (specs/scale-out.md, "Replica loss").
"""

from __future__ import annotations

import json
import logging

from dispatcher.call import resolution_event
from dispatcher.confirmations import Resolution
from eventbus.cluster.answers import AnswerArbiter
from eventbus.cluster.bus import ClusterBus
from eventbus.cluster.leases import LostTurns
from protocol.catalog import EventType
from server.records import TurnFailureReason
from server.turn_state import TurnPhase, turn_event

log = logging.getLogger("toolrelay.cluster")

# Bounds on the scan of a lost session's events for pending confirmations.
SCAN_PAGE = 500
SCAN_PAGES = 2_000


async def end_lost_turns(
    bus: ClusterBus, arbiter: AnswerArbiter, replica_id: str, lost: LostTurns
) -> None:
    """End a dead owner's turns, as replica ``replica_id``: their pending
    confirmations ``cancelled`` (each decided in Redis first: an answer given
    meanwhile wins), then each turn ``turn.failed`` (``replica_lost``)."""
    session_id = lost.session_id
    dead = ", ".join(sorted(set(lost.turns.values())))
    for request in await pending_requests(bus, session_id, set(lost.turns)):
        outcome = await arbiter.decide(
            request["request_id"],
            "cancelled",
            resolved_by=f"replica {replica_id}",
            scope="once",
            extra={"tool_use_id": request["tool_use_id"], "message": None},
        )
        if outcome.won:
            resolution = Resolution(
                request_id=request["request_id"],
                decision="cancelled",
                scope="once",
                resolved_by=outcome.resolved_by,
                message=f"replica {dead} running the turn was lost",
            )
            bus.emit(
                resolution_event(resolution, request["tool_use_id"]),
                session_id=session_id,
                turn_id=request["turn_id"],
            )
    for turn_id, replica in sorted(lost.turns.items()):
        lost_end = {
            "reason": TurnFailureReason.REPLICA_LOST.value,
            "message": f"replica {replica} running the turn was lost (its lease lapsed); "
            f"ended by replica {replica_id}",
        }
        bus.emit(turn_event(TurnPhase.FAILED, lost_end), session_id=session_id, turn_id=turn_id)
    # In Redis before the claim counts: if this fails, the watcher lists them again.
    await bus.flush()
    log.warning(
        "cluster: ended %d turn(s) of session %s: replica %s was lost",
        len(lost.turns),
        session_id,
        dead,
    )


async def pending_requests(
    bus: ClusterBus, session_id: str, turn_ids: set[str]
) -> list[dict[str, str]]:
    """Confirmation requests of these turns the session's events never resolved."""
    pending: dict[str, dict[str, str]] = {}
    after = 0
    for _page in range(SCAN_PAGES):
        records = await bus.log.read_page(session_id, after, SCAN_PAGE)
        for record in records:
            if record.type == EventType.TOOL_CONFIRMATION_REQUESTED and record.turn_id in turn_ids:
                data = json.loads(record.text)["data"]
                pending[data["request_id"]] = {
                    "request_id": data["request_id"],
                    "tool_use_id": data["tool_use_id"],
                    "turn_id": record.turn_id or "",
                }
            elif record.type == EventType.TOOL_CONFIRMATION_RESOLVED:
                pending.pop(json.loads(record.text)["data"]["request_id"], None)
        if len(records) < SCAN_PAGE:
            break
        after = records[-1].session_seq
    return list(pending.values())
