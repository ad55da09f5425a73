"""Session routes: create, list, get, delete; tools, messages, presence."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from dispatcher.pipeline.hooks import HookEvent
from server.errors import Conflict
from server.responses import error_responses
from server.routes.deps import (
    ClusterDep,
    DispatcherDep,
    PresenceDep,
    PrincipalDep,
    SessionsDep,
)
from server.schemas import CreateSession, SessionInfo
from server.session_registry import SessionRegistry
from server.store import SessionRecord
from server.turn_pipeline import run_hooks

router = APIRouter(tags=["sessions"])


@router.post(
    "/sessions",
    status_code=201,
    responses={
        201: {"model": SessionInfo},
        **error_responses(
            403,
            s403="A user token outside its allowed roots, or asking for a policy, profile "
            "or agent looser than the server's",
        ),
    },
)
async def create_session(
    body: CreateSession, sessions: SessionsDep, cluster: ClusterDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Create a session on an existing workspace directory."""
    record = await sessions.create(
        principal,
        workspace=body.workspace,
        name=body.name,
        policy=body.policy,
        model=body.model,
        agent=body.agent,
        profile=body.profile,
        dry_run=body.dry_run,
    )
    await _session_hooks(sessions, record, HookEvent.SESSION_START)
    if cluster is not None:  # this replica owns it: lease + directory entry
        await cluster.session_created(record)
    return sessions.to_json(record)


async def _session_hooks(
    sessions: SessionRegistry, record: SessionRecord, event: HookEvent
) -> None:
    """session_start / session_end hooks (awaited: the answer comes after
    them; a failing hook only warns). A session whose workspace cannot be
    used any more has no dispatcher view, and no hooks run for it."""
    try:
        dispatch = sessions.dispatch_session(record)
    except Conflict:
        return
    await run_hooks(dispatch, event)


@router.get("/sessions")
async def list_sessions(
    sessions: SessionsDep, cluster: ClusterDep, principal: PrincipalDep
) -> dict[str, Any]:
    """The sessions this token may see (admin: all; user: its own)."""
    listed = [sessions.to_json(r) for r in sessions.list_visible(principal)]
    if cluster is not None:  # and those other replicas own
        listed += await cluster.remote_sessions(principal, {s["id"] for s in listed})
    return {"sessions": listed}


@router.get("/sessions/{session_id}", responses={200: {"model": SessionInfo}})
async def get_session(
    session_id: str, sessions: SessionsDep, principal: PrincipalDep
) -> dict[str, Any]:
    return sessions.to_json(sessions.get(principal, session_id))


@router.delete("/sessions/{session_id}", status_code=204)
async def delete_session(
    session_id: str, sessions: SessionsDep, principal: PrincipalDep
) -> Response:
    """Delete a session; session_end hooks run first (in its workspace,
    while it still has one), then a running turn is cancelled."""
    record = sessions.get(principal, session_id)
    await _session_hooks(sessions, record, HookEvent.SESSION_END)
    await sessions.delete(principal, session_id)
    return Response(status_code=204)


@router.get(
    "/sessions/{session_id}/tools",
    responses=error_responses(409, s409="The session's workspace can no longer be used"),
)
async def session_tools(
    session_id: str, sessions: SessionsDep, dispatcher: DispatcherDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Definitions of the tools the session can call, each with its
    effective call timeout (``timeout_s``)."""
    record = sessions.get(principal, session_id)
    entries = dispatcher.entries_for(sessions.dispatch_session(record))
    return {
        "tools": [{**e.definition.model_dump(mode="json"), "timeout_s": e.timeout} for e in entries]
    }


@router.get("/sessions/{session_id}/messages")
async def session_messages(
    session_id: str, sessions: SessionsDep, principal: PrincipalDep
) -> dict[str, Any]:
    """The conversation, in order."""
    record = sessions.get(principal, session_id)
    return {"messages": [m.to_json() for m in sessions.messages(record)]}


@router.get("/sessions/{session_id}/clients")
async def session_clients(
    session_id: str,
    sessions: SessionsDep,
    cluster: ClusterDep,
    presence: PresenceDep,
    principal: PrincipalDep,
) -> dict[str, Any]:
    """Who is attached to the session's event stream right now."""
    sessions.get(principal, session_id)
    if cluster is not None:  # every replica's clients (forwarded to the owner)
        return {"clients": await cluster.clients(session_id)}
    return {"clients": [a.to_json() for a in presence.clients(session_id)]}
