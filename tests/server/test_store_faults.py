"""The state database under a storage fault: SQLite's own SQLITE_FULL,
produced by capping the connection's ``max_page_count`` at the file's size
(lifting the cap is "space freed"). A failed write is a 503 naming the cause,
writes nothing, leaves the connection usable, and the fault clears by itself
with the next write that succeeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.errors import StorageUnavailable
from server.store import SessionRecord, Store, TurnRecord

BIG = {"role": "user", "content": [{"type": "text", "text": "x" * 20_000}]}


def cap(store: Store, pages: int | None) -> None:
    conn = store._conn
    if pages is None:
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    conn.execute(f"PRAGMA max_page_count = {pages}")


def test_a_full_state_database_answers_503_and_recovers(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state.sqlite3")
    try:
        store.add_session(SessionRecord(id="ses_1", workspace="/w", owner="alice"))
        turn = TurnRecord(
            id="turn_1",
            session_id="ses_1",
            number=1,
            kind="tool_uses",
            status="running",
            request={"tool_uses": []},
            created_by="alice",
        )
        store.add_turn(turn)
        kept = store.append_message("ses_1", BIG, turn_id="turn_1")
        cap(store, None)
        with pytest.raises(StorageUnavailable) as caught:
            for _ in range(50):  # bounded: a capped file fills within a few
                store.append_message("ses_1", BIG, turn_id="turn_1")
        error = caught.value
        assert error.status == 503 and error.code == "storage_unavailable"
        assert "disk full" in error.message and "disk full" in error.extra["cause"]
        assert store.fault is not None and "disk full" in store.fault
        assert store.probe() is not None  # still full
        count = len(store.messages("ses_1"))
        assert store.get_turn("turn_1").status == "running"  # type: ignore[union-attr]

        cap(store, 1 << 30)
        assert store.probe() is None and store.fault is None
        store.append_message("ses_1", {"role": "user", "content": []}, turn_id="turn_1")
        assert len(store.messages("ses_1")) == count + 1
        assert store.messages("ses_1")[0] == kept
        ended = store.finish_turn("turn_1", status="completed")
        assert ended is not None and ended.status == "completed"
    finally:
        store.close()
