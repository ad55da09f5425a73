"""Turn and confirmation routes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from dispatcher import UnknownConfirmation
from server.errors import Conflict, NotFound
from server.responses import AsciiJSONResponse, error_responses
from server.routes.deps import BrokerDep, PrincipalDep, SessionsDep, StoreDep, TurnsDep
from server.schemas import AnswerConfirmation, CreateTurn

router = APIRouter(tags=["turns"])


@router.post(
    "/sessions/{session_id}/turns",
    status_code=202,
    responses=error_responses(
        409,
        501,
        s409="A turn is already running (`turn_in_progress`), the server is shutting "
        "down, or the workspace can no longer be used",
        s501='A {"message"} turn on a server without the agent loop',
    ),
)
async def create_turn(
    session_id: str,
    body: CreateTurn,
    sessions: SessionsDep,
    turns: TurnsDep,
    principal: PrincipalDep,
) -> dict[str, Any]:
    """Start a turn; it runs in the background. 409 while another turn runs."""
    record = sessions.get(principal, session_id)
    turn = turns.start(principal, record, body.stored())
    return {"turn_id": turn.id, "session_id": record.id, "status": turn.status}


@router.get("/sessions/{session_id}/turns")
async def list_turns(
    session_id: str,
    sessions: SessionsDep,
    turns: TurnsDep,
    store: StoreDep,
    principal: PrincipalDep,
) -> dict[str, Any]:
    record = sessions.get(principal, session_id)
    return {"turns": [turns.to_json(t) for t in store.list_turns(record.id)]}


@router.get("/sessions/{session_id}/turns/{turn_id}")
async def get_turn(
    session_id: str, turn_id: str, sessions: SessionsDep, turns: TurnsDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Status and, once it ended, the tool results."""
    record = sessions.get(principal, session_id)
    return turns.to_json(turns.get(record, turn_id))


@router.post(
    "/sessions/{session_id}/turns/{turn_id}/cancel",
    responses={
        202: {"description": "Cancellation under way; the turn has not ended yet"},
        **error_responses(409, s409="The turn is not running (`turn_not_running`)"),
    },
)
async def cancel_turn(
    session_id: str, turn_id: str, sessions: SessionsDep, turns: TurnsDep, principal: PrincipalDep
) -> AsciiJSONResponse:
    """Cancel the turn's tools and pending confirmations. 200 once the turn has
    ended (status ``cancelled``), 202 if it is still winding down."""
    record = sessions.get(principal, session_id)
    turn, ended = await turns.cancel(principal, record, turn_id)
    return AsciiJSONResponse(turns.to_json(turn), status_code=200 if ended else 202)


@router.get("/sessions/{session_id}/confirmations")
async def pending_confirmations(
    session_id: str, sessions: SessionsDep, broker: BrokerDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Confirmation requests still waiting for an answer, oldest first."""
    record = sessions.get(principal, session_id)
    pending = broker.pending(record.id)
    return {
        "confirmations": [
            {**r.event_data(), "session_id": r.session_id, "turn_id": r.turn_id} for r in pending
        ]
    }


@router.post(
    "/sessions/{session_id}/turns/{turn_id}/confirmations/{request_id}",
    responses=error_responses(
        409, s409="Already resolved (`already_resolved`); `resolution` names the winning answer"
    ),
)
async def answer_confirmation(
    session_id: str,
    turn_id: str,
    request_id: str,
    body: AnswerConfirmation,
    sessions: SessionsDep,
    broker: BrokerDep,
    principal: PrincipalDep,
) -> dict[str, Any]:
    """Answer a confirmation request. The first answer wins (200); every later
    one gets 409 with the winning decision."""
    sessions.get(principal, session_id)
    request = broker.get(request_id)
    if request is None or request.session_id != session_id or request.turn_id != turn_id:
        raise NotFound(
            f"no confirmation request {request_id!r} in turn {turn_id!r} of session {session_id!r}"
        )
    try:
        resolution = broker.resolve(
            request_id,
            body.decision,
            scope=body.scope,
            resolved_by=principal.client_name,
            resolved_by_token=principal.token_name,
            message=body.message,
        )
    except UnknownConfirmation:
        raise NotFound(f"no confirmation request {request_id!r}") from None
    answer = resolution.event_data(request.tool_use_id)
    if not resolution.won:
        raise Conflict(
            f"confirmation {request_id!r} was already resolved: {resolution.decision} "
            f"by {resolution.resolved_by}",
            code="already_resolved",
            resolution=answer,
        )
    return {**answer, "won": True}
