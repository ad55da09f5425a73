"""EventLog on real SQLite: schema, group commit, replay pages, counters, pruning."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventbus import CursorExpired, EventLog, EventLogError, EventRecord
from eventbus.encoding import EnvelopeEncoder, UtcClock
from eventbus.log_access import pack_append

_encoder = EnvelopeEncoder()
_clock = UtcClock()


def make_records(
    specs: list[tuple[str, dict[str, object]]],
    *,
    first_seq: int = 1,
    start: dict[str, int] | None = None,
) -> list[EventRecord]:
    """Records as the bus would build them: (session_id, data) in publish order."""
    counters = dict(start or {})
    records = []
    for offset, (session_id, data) in enumerate(specs):
        seq = first_seq + offset
        session_seq = counters.get(session_id, 0) + 1
        counters[session_id] = session_seq
        ts = _clock.now()
        text = _encoder.encode(
            seq=seq,
            session_seq=session_seq,
            event_id=f"evt_test{seq:x}",
            type="message.delta",
            session_id=session_id,
            turn_id="trn_1",
            ts=ts,
            data=data,
        )
        records.append(
            EventRecord(seq, session_seq, session_id, "message.delta", "trn_1", ts, text)
        )
    return records


def interleaved(count: int, sessions: int = 3) -> list[tuple[str, dict[str, object]]]:
    return [(f"ses_{i % sessions}", {"text": f"chunk {i}"}) for i in range(count)]


@pytest.fixture(params=["file", "memory"])
def log(request: pytest.FixtureRequest, log_path: Path) -> EventLog:
    opened = EventLog.open(log_path if request.param == "file" else ":memory:")
    request.addfinalizer(opened.close)
    return opened


def test_open_creates_parent_directories_and_uses_wal(log_path: Path) -> None:
    with EventLog.open(log_path) as log:
        log.append_many(make_records(interleaved(3)))
    assert log_path.exists()
    conn = sqlite3.connect(log_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        index = conn.execute("PRAGMA index_info(events_by_session)").fetchall()
        assert [row[2] for row in index] == ["session_id", "session_seq"]
        columns = [row[1] for row in conn.execute("PRAGMA table_info(events)")]
        assert columns == ["seq", "session_id", "session_seq", "type", "turn_id", "ts", "json"]
    finally:
        conn.close()


def test_append_and_replay_all(log: EventLog) -> None:
    records = make_records(interleaved(50))
    log.append_many(records[:20])
    log.append_many(records[20:])
    replayed = log.replay(limit=100)
    assert [r.seq for r in replayed] == list(range(1, 51))
    assert [r.text for r in replayed] == [r.text for r in records]
    assert log.replay(after_seq=45, limit=100)[0].seq == 46
    page = log.replay(after_seq=10, limit=7)
    assert [r.seq for r in page] == list(range(11, 18))
    assert log.replay(after_seq=50, limit=10) == []
    assert log.count() == 50
    assert log.last_seq() == 50


def test_replay_session_pages_in_session_order(log: EventLog) -> None:
    log.append_many(make_records(interleaved(60, sessions=3)))
    s1 = log.replay_session("ses_1", after_session_seq=0, limit=100)
    assert [r.session_seq for r in s1] == list(range(1, 21))
    assert all(r.session_id == "ses_1" for r in s1)
    assert [r.seq for r in s1] == list(range(2, 61, 3))
    page = log.replay_session("ses_1", after_session_seq=5, limit=4)
    assert [r.session_seq for r in page] == [6, 7, 8, 9]
    assert log.replay_session("ses_none", after_session_seq=0, limit=5) == []
    assert log.last_session_seq("ses_2") == 20
    assert log.last_session_seq("ses_none") == 0
    assert log.session_counters() == {"ses_0": 20, "ses_1": 20, "ses_2": 20}


def test_record_fields_and_event_view_come_back_intact(log: EventLog) -> None:
    log.append_many(make_records([("ses_a", {"text": "hi", "index": 3})]))
    (record,) = log.replay(limit=1)
    assert (record.seq, record.session_seq, record.session_id) == (1, 1, "ses_a")
    assert (record.type, record.turn_id) == ("message.delta", "trn_1")
    event = record.event
    assert event.data == {"text": "hi", "index": 3}
    assert event.ts == record.ts and event.ts.endswith("Z")
    assert json.loads(record.text) == event.model_dump()


def test_batches_must_continue_after_the_last_seq(log: EventLog) -> None:
    records = make_records(interleaved(10))
    log.append_many(records[:5])
    with pytest.raises(EventLogError, match="already written"):
        log.append_many(records[3:])
    assert log.count() == 5
    log.append_many(records[5:])
    assert log.count() == 10


def test_prune_keeps_the_newest_and_counters_survive(log: EventLog) -> None:
    log.append_many(make_records(interleaved(30, sessions=2)))
    assert log.prune(keep_last=10) == 20
    assert log.oldest_retained_seq() == 21
    assert log.oldest_retained_session_seq("ses_0") == 11
    assert log.last_seq() == 30
    assert log.session_counters() == {"ses_0": 15, "ses_1": 15}
    assert log.prune(keep_last=0) == 10
    assert log.oldest_retained_seq() is None
    assert log.oldest_retained_session_seq("ses_0") is None
    assert log.last_seq() == 30  # counters outlive their events
    assert log.last_session_seq("ses_1") == 15


def test_replay_from_a_pruned_cursor_is_refused(log: EventLog) -> None:
    log.append_many(make_records(interleaved(30, sessions=2)))
    log.prune(keep_last=10)
    with pytest.raises(CursorExpired) as caught:
        log.replay(after_seq=5, limit=10)
    assert (caught.value.cursor, caught.value.oldest_cursor) == (5, 20)
    assert "after=20" in str(caught.value)
    assert [r.seq for r in log.replay(after_seq=20, limit=3)] == [21, 22, 23]
    assert log.replay(limit=1)[0].seq == 21  # no cursor: from the oldest held

    with pytest.raises(CursorExpired) as session_caught:
        log.replay_session("ses_1", after_session_seq=2, limit=10)
    assert session_caught.value.oldest_cursor == 10
    assert session_caught.value.session_id == "ses_1"
    assert log.replay_session("ses_1", after_session_seq=10, limit=1)[0].session_seq == 11

    log.prune(keep_last=0)
    with pytest.raises(CursorExpired) as empty_caught:
        log.replay(after_seq=29, limit=10)
    assert empty_caught.value.oldest_cursor == 30
    assert log.replay(after_seq=30, limit=10) == []
    assert log.replay_session("ses_0", after_session_seq=15, limit=10) == []


def test_counters_survive_reopening(log_path: Path) -> None:
    with EventLog.open(log_path) as log:
        log.append_many(make_records(interleaved(9)))
        log.prune(keep_last=0)
    with EventLog.open(log_path) as reopened:
        assert reopened.last_seq() == 9
        assert reopened.session_counters() == {"ses_0": 3, "ses_1": 3, "ses_2": 3}
        more = make_records([("ses_1", {"text": "again"})], first_seq=10, start={"ses_1": 3})
        reopened.append_many(more)
        (record,) = reopened.replay_session("ses_1", after_session_seq=3, limit=5)
        assert (record.seq, record.session_seq) == (10, 4)
        with pytest.raises(EventLogError, match="already written"):
            reopened.append_many(make_records(interleaved(1)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 10_001}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": 5, "after_seq": -1}, "after"),
        ({"limit": 5, "after_seq": "3"}, "after"),
    ],
)
def test_bad_replay_arguments_are_named(
    log: EventLog, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        log.replay(**kwargs)  # type: ignore[arg-type]


def test_bad_prune_and_session_arguments(log: EventLog) -> None:
    with pytest.raises(ValueError, match="keep_last"):
        log.prune(keep_last=-1)
    with pytest.raises(ValueError, match="session_id"):
        log.replay_session("", after_session_seq=0, limit=1)


def test_unusable_files_are_named(tmp_path: Path) -> None:
    not_db = tmp_path / "notes.txt"
    not_db.write_text("this is not a database, just some text " * 200)
    with pytest.raises(EventLogError) as caught:
        EventLog.open(not_db)
    assert "notes.txt" in str(caught.value)
    with pytest.raises(EventLogError, match="cannot open"):
        EventLog.open(tmp_path)  # a directory
    future = tmp_path / "future.db"
    conn = sqlite3.connect(future)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(EventLogError, match="schema version 99"):
        EventLog.open(future)


def test_closed_log_refuses_work(log_path: Path) -> None:
    log = EventLog.open(log_path)
    log.close()
    log.close()  # idempotent
    with pytest.raises(EventLogError, match="closed"):
        log.replay(limit=1)
    with pytest.raises(EventLogError, match="closed"):
        log.append_many(make_records(interleaved(1)))


def test_a_packed_append_carries_its_columns_beside_the_text(log: EventLog) -> None:
    # What the log process receives: the index columns travel in the frame,
    # nothing is parsed out of the envelope text.
    records = make_records(interleaved(4))
    meta, _, texts = pack_append(records).decode().partition("\n")[2].partition("\n")
    log.append_packed(meta, texts)
    replayed = log.replay(limit=10)
    assert [(r.seq, r.session_seq, r.session_id, r.type, r.turn_id, r.ts) for r in replayed] == [
        (r.seq, r.session_seq, r.session_id, r.type, r.turn_id, r.ts) for r in records
    ]
    assert [r.text for r in replayed] == [r.text for r in records]
    with pytest.raises(EventLogError, match="malformed append"):
        log.append_packed("[[5, 1]]", '{"seq": 5}')
    with pytest.raises(EventLogError, match="malformed append"):
        log.append_packed("[]", '{"seq": 5}')


# Ids are stored as SQLite text, so they must be valid Unicode (the bus refuses
# ids with lone surrogates); data may hold anything JSON can, surrogates included.
unicode_text = st.characters(exclude_categories=["Cs"])
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(
    session_id=st.text(unicode_text, min_size=1, max_size=20),
    turn_id=st.none() | st.text(unicode_text, max_size=20),
    data=st.dictionaries(st.text(max_size=10), json_values, max_size=5),
)
def test_any_envelope_round_trips_exactly(
    session_id: str, turn_id: str | None, data: dict[str, object]
) -> None:
    # Ids and data with quotes, backslashes, control and non-ASCII characters
    # (and, in data, lone surrogates, which become U+FFFD): the stored text is
    # exactly what was published.
    text = _encoder.encode(
        seq=1,
        session_seq=1,
        event_id="evt_x1",
        type="tool.completed",
        session_id=session_id,
        turn_id=turn_id,
        ts=_clock.now(),
        data=data,
    )
    sent = EventRecord(1, 1, session_id, "tool.completed", turn_id, "ts", text)
    meta, _, texts = pack_append([sent]).decode().partition("\n")[2].partition("\n")
    with EventLog.open(":memory:") as log:
        log.append_packed(meta, texts)
        (record,) = log.replay_session(session_id, after_session_seq=0, limit=1)
    assert record.encoded == text and record.text == sent.text
    assert (record.session_id, record.turn_id) == (session_id, turn_id)
    assert record.event.data == json.loads(text)["data"]
