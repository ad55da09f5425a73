"""The server's pipeline parts that need no server: context compression and
the budget's arithmetic (server/turn_pipeline.py), and the state store's
new columns, including a data dir from before them (server/store.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from protocol.canonical import Message, TextBlock, ToolResultBlock, ToolUseBlock
from server.store import SessionRecord, Store, TurnRecord, TurnStatus
from server.turn_pipeline import budget_step, compress, estimate_tokens


def _call(tool_id: str, name: str) -> Message:
    return Message(role="assistant", content=[ToolUseBlock(id=tool_id, name=name, input={})])


def _result(tool_id: str, text: str, *, error: bool = False) -> Message:
    block = ToolResultBlock(tool_use_id=tool_id, content=[TextBlock(text=text)], is_error=error)
    return Message(role="tool", content=[block])


def test_compression_elides_the_oldest_results_first_and_never_the_latest() -> None:
    conversation = [
        Message(role="user", content=[TextBlock(text="go")]),
        _call("a", "read_file"),
        _result("a", "A" * 8000),
        _call("b", "grep"),
        _result("b", "B" * 8000, error=True),
        _call("c", "read_file"),
        _result("c", "C" * 8000),
    ]
    # Room for about two of the three outputs: only the oldest one goes.
    fitted = compress(conversation, "", limit_tokens=4500)
    assert fitted.elided == 1 and fitted.elided_chars == 8000
    assert fitted.tokens_after <= 4500 < fitted.tokens_before
    first = fitted.messages[2].content[0]
    assert isinstance(first, ToolResultBlock)
    assert first.content == [TextBlock(text="[elided: 8000 chars of read_file output]")]
    assert fitted.messages[3:] == conversation[3:]
    # Tighter: the second goes too (keeping its error flag); the last never does.
    tight = compress(conversation, "", limit_tokens=1000)
    assert tight.elided == 2
    second = tight.messages[4].content[0]
    assert isinstance(second, ToolResultBlock) and second.is_error
    assert "of grep output" in str(second.content[0])
    assert tight.messages[6] == conversation[6]
    # The caller's list is not changed, and a conversation that fits is sent as is.
    assert conversation[2].content[0] == ToolResultBlock(
        tool_use_id="a", content=[TextBlock(text="A" * 8000)]
    )
    assert compress(conversation, "", limit_tokens=None).messages is conversation
    assert estimate_tokens(conversation) == compress(conversation, "", 10**6).tokens_after
    assert compress(conversation, "", 10**6).messages is conversation


def test_the_budget_warning_is_crossed_exactly_once() -> None:
    steps = [
        budget_step(a, b, 1000, 800) for a, b in ((0, 500), (500, 799), (799, 800), (800, 990))
    ]
    assert [s.crossed_warning for s in steps] == [False, False, True, False]
    assert not any(s.exhausted for s in steps)
    assert budget_step(990, 1000, 1000, 800).exhausted
    assert not budget_step(0, 5000, None, None).exhausted


def test_plan_gates_and_tokens_are_stored(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state.db")
    try:
        store.add_session(SessionRecord(id="ses_1", workspace="/w", owner="o", dry_run=True))
        assert store.add_session_tokens("ses_1", 700) == 700
        assert store.add_session_tokens("ses_1", 350) == 1050
        assert store.add_session_tokens("ses_gone", 5) == 0
        session = store.get_session("ses_1")
        assert session is not None and session.dry_run and session.tokens_used == 1050
        turn = TurnRecord(
            id="turn_1",
            session_id="ses_1",
            number=1,
            kind="message",
            status=TurnStatus.RUNNING,
            request={"message": "hi", "dry_run": True},
            created_by="me",
            dry_run=True,
        )
        store.add_turn(turn)
        plan = [{"tool_use_id": "t1", "tool_name": "shell", "summary": "shell: ls", "input": {}}]
        gates = [{"name": "tests", "passed": True, "exit_code": 0, "required": True}]
        store.set_turn_outcome("turn_1", results=None, usage=None, plan=plan, quality_gates=gates)
        ended = store.finish_turn("turn_1", status=TurnStatus.COMPLETED)
        assert ended is not None
        shown = ended.to_json()
        assert shown["dry_run"] is True and shown["plan"] == plan
        assert shown["quality_gates"] == gates
    finally:
        store.close()


def test_a_data_dir_from_before_the_pipeline_opens_and_reads_as_before(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    # The tables as the previous release created them (no pipeline columns).
    conn.executescript(
        """
        CREATE TABLE sessions (id TEXT PRIMARY KEY, name TEXT, workspace TEXT NOT NULL,
            owner TEXT NOT NULL, model TEXT, policy TEXT NOT NULL, created_at TEXT NOT NULL,
            deleted_at TEXT, agent TEXT, profile TEXT, parent_session_id TEXT);
        CREATE TABLE turns (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, number INTEGER NOT NULL,
            kind TEXT NOT NULL, status TEXT NOT NULL, reason TEXT, message TEXT,
            request TEXT NOT NULL, results TEXT, usage TEXT, created_by TEXT NOT NULL,
            created_at TEXT NOT NULL, finished_at TEXT);
        """
    )
    conn.execute(
        "INSERT INTO sessions VALUES ('ses_old', NULL, '/w', 'o', NULL, '{}', 't', NULL,"
        " NULL, NULL, NULL)"
    )
    conn.execute(
        "INSERT INTO turns VALUES ('turn_old', 'ses_old', 1, 'message', 'completed', NULL, NULL,"
        " ?, NULL, ?, 'me', 't', 't')",
        (json.dumps({"message": "hi"}), json.dumps({"input_tokens": 1, "output_tokens": 2})),
    )
    conn.commit()
    conn.close()
    store = Store.open(path)
    try:
        session = store.get_session("ses_old")
        assert session is not None and not session.dry_run and session.tokens_used == 0
        assert store.add_session_tokens("ses_old", 10) == 10
        turn = store.get_turn("turn_old")
        assert turn is not None and turn.usage == {"input_tokens": 1, "output_tokens": 2}
        assert (turn.dry_run, turn.plan, turn.quality_gates) == (False, None, None)
    finally:
        store.close()
