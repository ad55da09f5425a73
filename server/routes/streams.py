"""WebSocket routes: the per-session and the all-sessions event streams."""

from __future__ import annotations

from fastapi import APIRouter, WebSocket

from server.routes.deps import stream_services
from server.streaming import serve_stream

router = APIRouter(tags=["events"])


@router.websocket("/sessions/{session_id}/events")
async def session_events(websocket: WebSocket, session_id: str) -> None:
    """One session's events: replay after ``?after=<session_seq>``, then live."""
    await serve_stream(websocket, stream_services(websocket), session_id)


@router.websocket("/events")
async def all_events(websocket: WebSocket) -> None:
    """Every visible session's events: replay after ``?after=<seq>``, then live."""
    await serve_stream(websocket, stream_services(websocket), None)
