"""The event log's tables and statements (SQLite), run by eventbus.log.

Kept apart from the code that runs them so the schema reads in one place:
the events, their indexes (each says which query it serves) and the
per-session counters that survive pruning.
"""

from __future__ import annotations

SCHEMA_VERSION = 2
# Version 1 had the same tables; only events_turn_end's condition differs
# (an IN list): opening such a log re-creates that index (``_prepare``).
UPGRADES_FROM = {1: "DROP INDEX IF EXISTS events_turn_end;"}

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq          INTEGER PRIMARY KEY,
    session_id   TEXT    NOT NULL,
    session_seq  INTEGER NOT NULL,
    type         TEXT    NOT NULL,
    turn_id      TEXT,
    ts           TEXT    NOT NULL,
    json         TEXT    NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS events_by_session ON events (session_id, session_seq);
-- Only turns' terminal events: crash recovery asks which turns already ended (turn_ends).
-- Spelled with OR, not IN: SQLite evaluates the condition at every insert, and
-- an IN list there cost ~1.5 us per event (a third of the insert), OR ~0.3.
CREATE INDEX IF NOT EXISTS events_turn_end ON events (turn_id)
    WHERE type = 'turn.cancelled' OR type = 'turn.completed' OR type = 'turn.failed';
-- Filtered all-sessions replays seek each visible session by seq (replay_page).
CREATE INDEX IF NOT EXISTS events_by_session_and_seq ON events (session_id, seq);
CREATE TABLE IF NOT EXISTS session_counters (
    session_id        TEXT    PRIMARY KEY,
    last_session_seq  INTEGER NOT NULL,
    last_seq          INTEGER NOT NULL
) WITHOUT ROWID;
"""

INSERT = (
    "INSERT INTO events (seq, session_seq, session_id, type, turn_id, ts, json) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
# One upsert per session per batch (a per-row trigger cost more than the insert).
UPDATE_COUNTERS = """
INSERT INTO session_counters (session_id, last_session_seq, last_seq)
SELECT session_id, MAX(session_seq), MAX(seq) FROM events
WHERE seq BETWEEN ? AND ? GROUP BY session_id
ON CONFLICT (session_id) DO UPDATE SET
    last_session_seq = excluded.last_session_seq, last_seq = excluded.last_seq
"""
Row = tuple[int, int, str, str, str | None, str, str]


# One row per page: the metadata as a JSON array and the texts joined by a
# record separator (0x1E), which JSON text can never contain (control
# characters are escaped inside strings, and no byte of a multi-byte UTF-8
# sequence is below 0x80). An append request to the log process is packed
# the same way (see ``unpack_rows``). Both
# aggregates run over the rows in the same pass, so they pair up; the order
# is re-established in Python because aggregate order is not guaranteed.
PAGE = """
SELECT {oldest}, {last},
       json_group_array(json_array(seq, session_seq, session_id, type, turn_id, ts)),
       group_concat(json, char(30))
FROM (SELECT seq, session_seq, session_id, type, turn_id, ts, json FROM events
      WHERE {where} ORDER BY {order} LIMIT :limit)
"""
PAGE_ALL = PAGE.format(
    oldest="(SELECT MIN(seq) FROM events)",
    last="(SELECT MAX(last_seq) FROM session_counters)",
    where="seq > :after",
    order="seq",
)
PAGE_SESSION = PAGE.format(
    oldest="(SELECT MIN(session_seq) FROM events WHERE session_id = :sid)",
    last="(SELECT last_session_seq FROM session_counters WHERE session_id = :sid)",
    where="session_id = :sid AND session_seq > :after",
    order="session_seq",
)
RECORD_SEPARATOR = "\x1e"
# One visible session's events after a global cursor, in seq order: stepped
# lazily, so a filtered page reads about as many rows as it returns.
SESSION_BY_SEQ = (
    "SELECT seq, session_seq, session_id, type, turn_id, ts, json FROM events "
    "WHERE session_id = ? AND seq > ? ORDER BY seq"
)
BOUNDS_ALL = "SELECT (SELECT MIN(seq) FROM events), (SELECT MAX(last_seq) FROM session_counters)"

# The same text as the partial index's WHERE, so SQLite can use that index.
TURN_ENDS = (
    "SELECT turn_id, json FROM events WHERE (type = 'turn.cancelled' OR type = 'turn.completed' "
    "OR type = 'turn.failed') AND turn_id IN (SELECT value FROM json_each(?)) ORDER BY seq"
)
