"""The event envelope: every message on a WebSocket is one of these."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Event(BaseModel):
    """One event as logged and streamed.

    ``seq`` orders events across the whole server; ``session_seq`` counts
    1, 2, 3 ... within one session with no gaps, so a client can prove it
    missed nothing. ``ts`` is RFC 3339 in UTC.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq: int
    session_seq: int
    id: str
    type: str
    session_id: str
    turn_id: str | None
    ts: str
    data: dict[str, Any]
