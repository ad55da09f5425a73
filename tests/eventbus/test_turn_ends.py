"""``EventLog.turn_ends``: which turns' terminal events the log holds, found
through the partial index (crash recovery asks it at every start)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eventbus.log import EventLog
from eventbus.log_sql import TURN_ENDS as _TURN_ENDS
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


def test_a_version_1_log_is_upgraded_in_place(tmp_path: Path) -> None:
    """Version 1 spelled the index's condition with IN (a third of each
    insert's cost); opening such a log re-creates the index and keeps every
    event."""
    import sqlite3

    path = tmp_path / "events.sqlite3"
    with EventLog.open(path) as log:
        log.append_many(
            [
                record(1, "turn.started", "t1"),
                record(2, "turn.failed", "t1"),
                record(3, "turn.started", "t2"),
            ]
        )
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(
        "DROP INDEX events_turn_end;"
        "CREATE INDEX events_turn_end ON events (turn_id)"
        " WHERE type IN ('turn.cancelled', 'turn.completed', 'turn.failed');"
        "PRAGMA user_version = 1;"
    )
    conn.close()

    with EventLog.open(path) as log:
        (sql,) = log._read.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'events_turn_end'"
        ).fetchone()
        assert " IN " not in sql and "OR type = 'turn.failed'" in sql
        assert log._read.execute("PRAGMA user_version").fetchone()[0] == 2
        assert log.last_seq() == 3
        assert list(log.turn_ends(["t1", "t2"])) == ["t1"]
        plan = log._read.execute("EXPLAIN QUERY PLAN " + _TURN_ENDS, ('["t1"]',)).fetchall()
        assert any("events_turn_end" in str(row) for row in plan), plan
        log.append_many([record(4, "turn.completed", "t2")])
        assert sorted(log.turn_ends(["t1", "t2"])) == ["t1", "t2"]


def test_a_log_of_an_unknown_version_is_refused(tmp_path: Path) -> None:
    import sqlite3

    from eventbus.errors import EventLogError

    path = tmp_path / "events.sqlite3"
    EventLog.open(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA user_version = 9")
    conn.close()
    with pytest.raises(EventLogError, match="schema version 9"):
        EventLog.open(path)
