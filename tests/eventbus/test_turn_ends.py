"""``EventLog.turn_ends``: which turns' terminal events the log holds, found
through the partial index (crash recovery asks it at every start)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eventbus.log import _TURN_ENDS, EventLog
from eventbus.record import EventRecord


def record(seq: int, type_: str, turn_id: str | None) -> EventRecord:
    turn = "null" if turn_id is None else json.dumps(turn_id)
    text = (
        f'{{"seq":{seq},"session_seq":{seq},"id":"e{seq}","type":"{type_}",'
        f'"session_id":"s","turn_id":{turn},"ts":"2026-01-01T00:00:00Z","data":{{}}}}'
    )
    return EventRecord(seq, seq, "s", type_, turn_id, "2026-01-01T00:00:00Z", text)


def test_turn_ends_finds_terminal_events_by_index(tmp_path: Path) -> None:
    with EventLog.open(tmp_path / "events.sqlite3") as log:
        log.append_many(
            [
                record(1, "session.created", None),
                record(2, "turn.started", "t1"),
                record(3, "turn.completed", "t1"),
                record(4, "turn.started", "t2"),
                record(5, "message.completed", "t2"),
                record(6, "turn.started", "t3"),
                record(7, "turn.cancelled", "t3"),
            ]
        )
        ends = log.turn_ends(["t1", "t2", "t3", "nope"])
        assert {k: json.loads(v)["type"] for k, v in ends.items()} == {
            "t1": "turn.completed",
            "t3": "turn.cancelled",
        }
        assert log.turn_ends([]) == {}
        plan = log._read.execute("EXPLAIN QUERY PLAN " + _TURN_ENDS, ('["t1"]',)).fetchall()
        assert any("events_turn_end" in str(row) for row in plan), plan
        with pytest.raises(ValueError, match="turn_ids"):
            log.turn_ends([""])
