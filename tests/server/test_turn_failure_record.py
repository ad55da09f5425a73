"""A failed turn's message is kept in its record, also in a state database
written before the record had that column."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from server.store import SessionRecord, Store, TurnRecord


def test_an_old_state_database_gains_the_message_column(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    with sqlite3.connect(path) as old:
        old.execute(
            "CREATE TABLE turns (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, number INTEGER"
            " NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL, reason TEXT, request TEXT NOT"
            " NULL, results TEXT, usage TEXT, created_by TEXT NOT NULL, created_at TEXT NOT NULL,"
            " finished_at TEXT)"
        )
    store = Store.open(path)
    try:
        store.add_session(SessionRecord(id="ses_1", workspace="/w", owner="a", name=None))
        store.add_turn(
            TurnRecord(
                id="turn_1",
                session_id="ses_1",
                number=1,
                kind="message",
                status="running",
                request={"message": "hi"},
                created_by="a",
            )
        )
        ended = store.finish_turn(
            "turn_1", status="failed", reason="model_error", message="anthropic: auth (HTTP 401)"
        )
        assert ended is not None and ended.message == "anthropic: auth (HTTP 401)"
        assert store.get_turn("turn_1") == ended
        assert ended.to_json()["message"] == "anthropic: auth (HTTP 401)"
    finally:
        store.close()
