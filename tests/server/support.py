"""Helpers for the server's end-to-end tests: an event-stream reader that checks
ordering as it goes, and small HTTP shortcuts. Everything is bounded in time."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

Event = dict[str, Any]
# Generous upper bound for anything a test waits on: waits poll or read until
# their state arrives, so this only matters when the machine is slow (a busy
# 2-core CI runner parses a 200 KB streamed argument in tens of seconds).
WAIT = 60.0


class Stream:
    """A WebSocket event stream that records every event it receives and
    asserts, as it goes, that the cursor grows by exactly one each time."""

    def __init__(self, ws: ClientConnection, *, cursor_key: str, after: int | None) -> None:
        self.ws = ws
        self.cursor_key = cursor_key
        self.cursor = after
        self.events: list[Event] = []

    @classmethod
    async def open(
        cls, url: str, *, per_session: bool = True, after: int | None = None, **kwargs: Any
    ) -> Stream:
        # Unbounded client queue: a test that stops reading must still be able to
        # close (websockets stops reading the socket past max_queue, close frame too).
        kwargs.setdefault("max_queue", None)
        ws = await connect(url, open_timeout=WAIT, compression=None, **kwargs)
        return cls(ws, cursor_key="session_seq" if per_session else "seq", after=after)

    async def next(self, within: float = WAIT) -> Event:
        text = await asyncio.wait_for(self.ws.recv(), within)
        event: Event = json.loads(text)
        value = event[self.cursor_key]
        if self.cursor is not None and self.cursor_key == "session_seq":
            assert value == self.cursor + 1, f"gap or repeat: {self.cursor} -> {value}"
        elif self.cursor is not None:
            assert value > self.cursor, f"repeat or reorder: {self.cursor} -> {value}"
        self.cursor = value
        self.events.append(event)
        return event

    async def until(
        self,
        type: str,
        where: Callable[[Event], bool] = lambda e: True,
        within: float = WAIT,
    ) -> Event:
        """Read until an event of ``type`` matching ``where`` arrives."""
        async with asyncio.timeout(within):
            while True:
                event = await self.next(within)
                if event["type"] == type and where(event):
                    return event

    def of(self, type: str) -> list[Event]:
        return [e for e in self.events if e["type"] == type]

    async def closed(self, within: float = WAIT) -> tuple[int | None, str]:
        """Drain until the server closes; returns (code, reason)."""
        try:
            async with asyncio.timeout(within):
                while True:
                    await self.next(within)
        except ConnectionClosed as exc:
            rcvd = exc.rcvd
            return (rcvd.code, rcvd.reason) if rcvd else (None, "")

    async def close(self) -> None:
        await self.ws.close()

    async def __aenter__(self) -> Stream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.ws.close()


async def new_session(http: httpx2.AsyncClient, workspace: Path, **body: Any) -> str:
    response = await http.post("/sessions", json={"workspace": str(workspace), **body})
    assert response.status_code == 201, response.text
    session_id: str = response.json()["id"]
    return session_id


async def start_turn(http: httpx2.AsyncClient, session_id: str, *tool_uses: Event) -> str:
    response = await http.post(f"/sessions/{session_id}/turns", json={"tool_uses": list(tool_uses)})
    assert response.status_code == 202, response.text
    turn_id: str = response.json()["turn_id"]
    return turn_id


async def wait_turn(
    http: httpx2.AsyncClient, session_id: str, turn_id: str, within: float = WAIT
) -> Event:
    """Poll the turn until it is no longer running (bounded)."""
    async with asyncio.timeout(within):
        while True:
            response = await http.get(f"/sessions/{session_id}/turns/{turn_id}")
            assert response.status_code == 200, response.text
            turn: Event = response.json()
            if turn["status"] != "running":
                return turn
            await asyncio.sleep(0.02)


async def wait_session_status(
    http: httpx2.AsyncClient, session_id: str, status: str, within: float = WAIT
) -> None:
    """Poll the session until its status is ``status`` (bounded)."""
    async with asyncio.timeout(within):
        while True:
            response = await http.get(f"/sessions/{session_id}")
            if response.json()["status"] == status:
                return
            await asyncio.sleep(0.02)


def use(tool_use_id: str, name: str, **tool_input: Any) -> Event:
    return {"id": tool_use_id, "name": name, "input": tool_input}


def result_text(result: Event) -> str:
    return "".join(b.get("text", "") for b in result["content"])
