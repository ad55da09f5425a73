"""A turn reads only the messages stored since the session's last turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from protocol.canonical import Message
from server.agent_loop import _Conversations
from server.store import SessionRecord, Store


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": [{"type": "text", "text": text}]}


def test_messages_after_reads_the_tail_in_order(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state.db")
    try:
        for sid in ("s1", "s2"):
            store.add_session(SessionRecord(id=sid, workspace=str(tmp_path), owner="o"))
        for i in range(5):
            store.append_message("s1", _text("user", f"m{i}"), turn_id=None)
            store.append_message("s2", _text("user", f"other{i}"), turn_id=None)
        assert [m.index for m in store.messages_after("s1", -1)] == [0, 1, 2, 3, 4]
        tail = store.messages_after("s1", 2)
        assert [(m.index, m.message) for m in tail] == [
            (3, _text("user", "m3")),
            (4, _text("user", "m4")),
        ]
        assert store.messages_after("s1", 4) == []
    finally:
        store.close()


def test_the_cached_conversation_follows_the_store(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state.db")
    try:
        store.add_session(SessionRecord(id="s1", workspace=str(tmp_path), owner="o"))
        conversations = _Conversations(store)
        assert conversations.load("s1") == []
        store.append_message("s1", _text("user", "hello"), turn_id="t1")
        first = conversations.load("s1")
        first.append(Message.model_validate(_text("assistant", "not stored")))  # a turn's copy
        store.append_message("s1", _text("assistant", "hi"), turn_id="t1")
        store.append_message("s1", _text("user", "again"), turn_id="t2")
        again = conversations.load("s1")
        expected = [Message.model_validate(m.message) for m in store.messages("s1")]
        assert again == expected and len(again) == 3
    finally:
        store.close()


def test_only_the_most_recent_sessions_are_kept(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state.db")
    try:
        conversations = _Conversations(store)
        count = _Conversations.MAX_SESSIONS + 5
        for i in range(count):
            sid = f"s{i}"
            store.add_session(SessionRecord(id=sid, workspace=str(tmp_path), owner="o"))
            store.append_message(sid, _text("user", sid), turn_id=None)
            assert len(conversations.load(sid)) == 1
        assert len(conversations._held) == _Conversations.MAX_SESSIONS
        assert "s0" not in conversations._held and f"s{count - 1}" in conversations._held
        assert conversations.load("s0") == [Message.model_validate(_text("user", "s0"))]
    finally:
        store.close()
