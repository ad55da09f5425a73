"""A turn's tool results are stored once: the conversation's tool message holds
them, the turn record only references its blocks, and ``GET .../turns``
assembles them whole. Turn records written before (results inline) still read."""

from __future__ import annotations

import json
import secrets
import sqlite3
from pathlib import Path
from typing import Any

from server.runtime import STATE_FILE
from server.store import SessionRecord, Store, TurnRecord
from tests.harness import ServerProcess
from tests.server.support import result_text, start_turn, use, wait_turn

MIB = 1024 * 1024


async def test_a_large_read_result_is_stored_once_and_returned_whole(
    server: ServerProcess, workspace: Path
) -> None:
    marker = "marker-" + secrets.token_hex(12)
    line = "0123456789abcdefghijklmnopqrstuvwxyz " * 2 + "\n"
    body = line * (MIB // len(line)) + marker + "\n"
    (workspace / "big.txt").write_text(body)
    async with server.client() as http:
        r = await http.post("/sessions", json={"workspace": str(workspace)})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        tid = await start_turn(http, sid, use("r1", "read_file", path="big.txt"))
        turn = await wait_turn(http, sid, tid)
        listed = (await http.get(f"/sessions/{sid}/turns")).json()["turns"]
        messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
    assert turn["status"] == "completed", turn
    # The turn endpoint (and the listing) return the result whole, as the conversation has it.
    (result,) = turn["results"]
    assert result["tool_use_id"] == "r1" and result["is_error"] is False
    text = result_text(result)
    assert len(text) >= MIB and marker in text
    assert listed[0]["results"] == turn["results"]
    assert messages[-1]["content"] == turn["results"]

    # In the state database the output is there once: in the tool message only.
    with sqlite3.connect(f"file:{server.data_dir / STATE_FILE}?mode=ro", uri=True) as db:
        in_messages = db.execute(
            "SELECT count(*) FROM messages WHERE instr(message, ?) > 0", (marker,)
        ).fetchone()[0]
        in_turns = db.execute(
            "SELECT count(*) FROM turns WHERE instr(results, ?) > 0 OR instr(request, ?) > 0",
            (marker, marker),
        ).fetchone()[0]
        stored = db.execute("SELECT results FROM turns WHERE id = ?", (tid,)).fetchone()[0]
        message_bytes = db.execute("SELECT sum(length(message)) FROM messages").fetchone()[0]
        turn_bytes = db.execute("SELECT sum(length(results)) FROM turns").fetchone()[0]
    assert (in_messages, in_turns) == (1, 0)
    assert json.loads(stored) == [{"ref": [1, 0], "tool_use_id": "r1"}]
    # Measured: about 1 MiB of output costs about 1 MiB, not 2.
    assert MIB <= message_bytes < MIB + 64 * 1024
    assert turn_bytes < 200


def _store(tmp_path: Path) -> Store:
    store = Store.open(tmp_path / STATE_FILE)
    store.add_session(SessionRecord(id="ses_1", workspace="/w", owner="a"))
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
    return store


def _result(tool_use_id: str, text: str, *, is_error: bool = False) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": [{"type": "text", "text": text}],
        "is_error": is_error,
    }


def _exchange(store: Store, tool_use_id: str, result: dict[str, Any]) -> None:
    use_block = {"type": "tool_use", "id": tool_use_id, "name": "read_file", "input": {}}
    store.append_message("ses_1", {"role": "assistant", "content": [use_block]}, turn_id="turn_1")
    store.append_message("ses_1", {"role": "tool", "content": [result]}, turn_id="turn_1")


def test_references_find_each_result_in_order_even_with_a_reused_id(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        # Two steps of one turn reuse the id "t1" with different results.
        first, second = _result("t1", "one"), _result("t1", "two", is_error=True)
        _exchange(store, "t1", first)
        _exchange(store, "t1", second)
        outside = _result("t9", "never appended")
        store.set_turn_outcome("turn_1", results=[first, second, outside], usage=None)
        ended = store.finish_turn("turn_1", status="completed")
        assert ended is not None and ended.results == [first, second, outside]
        assert store.get_turn("turn_1") == ended
        assert store.list_turns("ses_1")[0].results == [first, second, outside]
        (raw,) = store._conn.execute("SELECT results FROM turns").fetchone()
        assert json.loads(raw) == [
            {"ref": [1, 0], "tool_use_id": "t1"},
            {"ref": [3, 0], "tool_use_id": "t1"},
            outside,  # not in the conversation: kept inline
        ]
    finally:
        store.close()


def test_a_turn_record_with_inline_results_still_reads(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        inline = [_result("t1", "from an older server")]
        # As a server before references wrote it.
        store._conn.execute(
            "UPDATE turns SET results = ?, status = 'completed' WHERE id = 'turn_1'",
            (json.dumps(inline),),
        )
        turn = store.get_turn("turn_1")
        assert turn is not None and turn.results == inline
        assert store.list_turns("ses_1")[0].results == inline
    finally:
        store.close()
