"""Checkpoints of a file log, beside its commits rather than inside them.

SQLite's automatic checkpoint runs inside the commit that happens to fill the
WAL and fsyncs twice, which made one commit in ~70 stall (see
specs/event-bus-and-trace-catalog.md, "Commit path"); eventbus.log turns it
off and runs a ``Checkpointer`` instead.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import suppress

# The checkpointer runs after this many bytes of envelopes were committed since
# its last run (about what SQLite's default of 1000 WAL pages holds), and at
# least every CHECKPOINT_IDLE_S while commits arrive.
CHECKPOINT_BYTES = 1024 * 1024
CHECKPOINT_IDLE_S = 5.0


class Checkpointer:
    """Moves the WAL into the database from a thread with its own connection.

    PASSIVE checkpoints neither wait for nor block the writer: commits keep
    appending to the WAL meanwhile (the GIL is released while SQLite works).
    A failed checkpoint (disk full, I/O error) is left to the next one; the
    commits themselves are unaffected.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._wanted = threading.Event()
        self._stopping = False
        self._written = 0
        self._thread = threading.Thread(target=self._run, name="eventlog-checkpoint", daemon=True)
        self._thread.start()

    def committed(self, size: int) -> None:
        """Called by the writer after each commit of ``size`` bytes."""
        self._written += size
        if self._written >= CHECKPOINT_BYTES:
            self._written = 0
            self._wanted.set()

    def _run(self) -> None:
        while True:
            self._wanted.wait(CHECKPOINT_IDLE_S)
            self._wanted.clear()
            if self._stopping:
                return
            with suppress(sqlite3.Error):
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()

    def close(self) -> None:
        self._stopping = True
        self._wanted.set()
        self._thread.join()
        self._conn.close()
