"""Helpers shared by the reliability tests. Everything is bounded in time."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import psutil

from tests.harness import REPO_ROOT, ServerProcess

Event = dict[str, Any]


class StatusLog:
    """Counts every HTTP status a client saw (an httpx2 response hook)."""

    def __init__(self) -> None:
        self.statuses: Counter[int] = Counter()
        self.server_errors: list[str] = []

    async def __call__(self, response: httpx2.Response) -> None:
        self.statuses[response.status_code] += 1
        if response.status_code >= 500:
            await response.aread()
            self.server_errors.append(
                f"{response.request.method} {response.request.url.path}: "
                f"{response.status_code} {response.text[:200]}"
            )

    def hooks(self) -> dict[str, list[Any]]:
        return {"response": [self]}


def of_turn(turn_id: str) -> Callable[[Event], bool]:
    """A filter for ``Stream.until``: events of one turn."""

    def match(event: Event) -> bool:
        return bool(event["turn_id"] == turn_id)

    return match


def logged_events(data_dir: Path) -> list[Event]:
    """Every event in a server's durable log, straight from the SQLite file."""
    conn = sqlite3.connect(f"file:{data_dir / 'events.sqlite3'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT json FROM events ORDER BY seq").fetchall()
    finally:
        conn.close()
    return [json.loads(r[0]) for r in rows]


def integrity(path: Path) -> str:
    """SQLite's own integrity check of a database file ("ok" when sound)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def assert_gapless(events: list[Event]) -> None:
    """``session_seq`` counts 1, 2, 3 ... within every session; ``seq`` only grows."""
    by_session: dict[str, list[int]] = {}
    last_seq = 0
    for event in events:
        assert event["seq"] > last_seq, f"seq went from {last_seq} to {event['seq']}"
        last_seq = event["seq"]
        by_session.setdefault(event["session_id"], []).append(event["session_seq"])
    for session_id, seqs in by_session.items():
        assert seqs == list(range(1, len(seqs) + 1)), f"gap in {session_id}: {seqs[:20]}..."


def server_problems(srv: ServerProcess) -> list[str]:
    """What in the server's output reports a bug of ours: ERROR lines of our
    loggers (``toolrelay.*``) and tracebacks that pass through our code.
    uvicorn's own reports of malformed traffic it rejected are not bugs."""
    problems: list[str] = []
    block: list[str] = []
    for line in srv.all_output().splitlines():
        if line.startswith("Traceback"):
            block = [line]
        elif block and line[:1].isspace():
            block.append(line)  # a frame of the traceback
        elif block:
            block.append(line)  # the exception line ends it
            if any(_is_ours(b) for b in block):
                problems.append("\n".join(block))
            block = []
        elif line.startswith(("ERROR:", "CRITICAL:")) and " toolrelay" in line:
            problems.append(line)
    return problems


def _is_ours(line: str) -> bool:
    if 'File "' not in line:
        return False
    path = line.split('File "', 1)[1].split('"', 1)[0]
    return path.startswith(str(REPO_ROOT)) and "/.venv/" not in path


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)
