"""Helpers for the event bus tests: real SQLite files, real child processes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from eventbus import EventBus, EventLog, EventRecord, Subscription

# Every wait in these tests is bounded; none should come near this.
STEP_TIMEOUT = 20.0


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "events.db"


@asynccontextmanager
async def running_bus(log: EventLog | None, **options: Any) -> AsyncIterator[EventBus]:
    """A started bus that is closed (flushed) on the way out, checking its
    invariants as it goes (the debug mode, see eventbus.bus)."""
    options.setdefault("check_invariants", True)
    bus = EventBus(log, **options)
    await bus.start()
    try:
        yield bus
    finally:
        await bus.close()


async def take(sub: Subscription, count: int) -> list[EventRecord]:
    """Exactly ``count`` records from ``sub``, or a timeout failure."""
    records: list[EventRecord] = []
    async with asyncio.timeout(STEP_TIMEOUT):
        for _ in range(count):
            records.append(await anext(sub))
    return records


def cursors(records: list[EventRecord], *, per_session: bool) -> list[int]:
    return [r.cursor(per_session=per_session) for r in records]


LOG_MODES = ["process", "thread", "memory", "none"]


@pytest.fixture(params=LOG_MODES)
def log_mode(request: pytest.FixtureRequest) -> str:
    mode: str = request.param
    return mode


@pytest.fixture
def mode_log(log_mode: str, log_path: Path) -> Iterator[EventLog | None]:
    """The log for ``log_mode`` (None for a bus without durability)."""
    if log_mode == "none":
        yield None
        return
    log = EventLog.open(":memory:" if log_mode == "memory" else log_path)
    try:
        yield log
    finally:
        log.close()


def mode_options(log_mode: str) -> dict[str, Any]:
    return {"log_access": "thread"} if log_mode == "thread" else {}
