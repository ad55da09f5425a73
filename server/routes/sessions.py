"""Session routes: create, list, get, delete; tools, messages, presence."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from server.routes.deps import PrincipalDep, ServicesDep
from server.schemas import CreateSession

router = APIRouter(tags=["sessions"])


@router.post("/sessions", status_code=201)
async def create_session(
    body: CreateSession, runtime: ServicesDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Create a session on an existing workspace directory."""
    sessions = runtime.sessions
    record = await sessions.create(
        principal,
        workspace=body.workspace,
        name=body.name,
        policy=body.policy,
        model=body.model,
    )
    return sessions.to_json(record)


@router.get("/sessions")
async def list_sessions(runtime: ServicesDep, principal: PrincipalDep) -> dict[str, Any]:
    """The sessions this token may see (admin: all; user: its own)."""
    sessions = runtime.sessions
    return {"sessions": [sessions.to_json(r) for r in sessions.list_visible(principal)]}


@router.get("/sessions/{session_id}")
async def get_session(
    session_id: str, runtime: ServicesDep, principal: PrincipalDep
) -> dict[str, Any]:
    sessions = runtime.sessions
    return sessions.to_json(sessions.get(principal, session_id))


@router.delete("/sessions/{session_id}", status_code=204)
async def delete_session(
    session_id: str, runtime: ServicesDep, principal: PrincipalDep
) -> Response:
    """Delete a session; a running turn is cancelled first."""
    await runtime.sessions.delete(principal, session_id)
    return Response(status_code=204)


@router.get("/sessions/{session_id}/tools")
async def session_tools(
    session_id: str, runtime: ServicesDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Definitions of the tools the session can call."""
    sessions = runtime.sessions
    record = sessions.get(principal, session_id)
    return {"tools": [d.model_dump(mode="json") for d in sessions.tools(record)]}


@router.get("/sessions/{session_id}/messages")
async def session_messages(
    session_id: str, runtime: ServicesDep, principal: PrincipalDep
) -> dict[str, Any]:
    """The conversation, in order."""
    sessions = runtime.sessions
    record = sessions.get(principal, session_id)
    return {"messages": [m.to_json() for m in sessions.messages(record)]}


@router.get("/sessions/{session_id}/clients")
async def session_clients(
    session_id: str, runtime: ServicesDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Who is attached to the session's event stream right now."""
    runtime.sessions.get(principal, session_id)
    return {"clients": [a.to_json() for a in runtime.presence.clients(session_id)]}
