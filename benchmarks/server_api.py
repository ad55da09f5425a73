"""Small, bounded HTTP helpers for talking to the benchmark server."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2


class ApiError(RuntimeError):
    """The server answered something a benchmark did not expect."""


async def create_session(http: httpx2.AsyncClient, workspace: str, **body: Any) -> str:
    response = await http.post("/sessions", json={"workspace": workspace, **body})
    if response.status_code != 201:
        raise ApiError(f"POST /sessions: {response.status_code} {response.text[:300]}")
    session_id: str = response.json()["id"]
    return session_id


async def start_turn(http: httpx2.AsyncClient, session_id: str, tool_uses: list[Any]) -> str:
    response = await http.post(f"/sessions/{session_id}/turns", json={"tool_uses": tool_uses})
    if response.status_code != 202:
        raise ApiError(f"POST turn: {response.status_code} {response.text[:300]}")
    turn_id: str = response.json()["turn_id"]
    return turn_id


async def wait_turn(
    http: httpx2.AsyncClient, session_id: str, turn_id: str, *, within: float = 120.0
) -> dict[str, Any]:
    """Poll until the turn has ended; returns it. Bounded by ``within`` seconds."""
    async with asyncio.timeout(within):
        while True:
            response = await http.get(f"/sessions/{session_id}/turns/{turn_id}")
            if response.status_code != 200:
                raise ApiError(f"GET turn: {response.status_code} {response.text[:300]}")
            turn: dict[str, Any] = response.json()
            if turn["status"] != "running":
                return turn
            await asyncio.sleep(0.02)


async def wait_health(
    http: httpx2.AsyncClient, key: str, value: int, *, within: float = 120.0
) -> dict[str, Any]:
    """Poll ``/healthz`` until ``key`` (``clients``, ``turns_running``) equals ``value``."""
    async with asyncio.timeout(within):
        while True:
            health: dict[str, Any] = (await http.get("/healthz")).json()
            if health.get(key) == value:
                return health
            await asyncio.sleep(0.05)


def tool_use(tool_use_id: str, name: str, **tool_input: Any) -> dict[str, Any]:
    return {"id": tool_use_id, "name": name, "input": tool_input}
