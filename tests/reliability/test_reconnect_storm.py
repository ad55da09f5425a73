"""Reconnect storm: 100 clients lose their streams to a server restart and all
reconnect at once with ``after=``; each gets exactly what it missed, then live."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx2

from tests.harness import ServerFactory
from tests.reliability.conftest import DEBUG_ENV, config
from tests.reliability.support import (
    StatusLog,
    assert_gapless,
    logged_events,
    of_turn,
    server_problems,
)
from tests.server.support import Stream, new_session, start_turn, use, wait_turn

SESSIONS = 10
PER_SESSION = 9  # + 10 watchers of /events = 100 clients
WATCHERS = 10


async def _turn(http: httpx2.AsyncClient, sid: str, tag: str) -> str:
    tid = await start_turn(http, sid, *(use(f"{tag}-{i}", "rl_echo", text=tag) for i in range(3)))
    assert (await wait_turn(http, sid, tid, within=60))["status"] == "completed"
    return tid


async def _all_completed(stream: Stream, turn_ids: set[str]) -> None:
    waiting = set(turn_ids)
    while waiting:
        event = await stream.until("turn.completed", within=30)
        waiting.discard(event["turn_id"])


async def test_a_hundred_clients_reconnect_at_once_after_a_restart(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    srv = server_factory(config(), env=DEBUG_ENV)
    status = StatusLog()
    async with srv.client("storm", event_hooks=status.hooks()) as http:
        sids = []
        for i in range(SESSIONS):
            ws = tmp_path / f"ws{i}"
            ws.mkdir()
            sids.append(await new_session(http, ws))
        session_clients = [
            (sid, await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0), after=0))
            for sid in sids
            for _ in range(PER_SESSION)
        ]
        watchers = [
            await Stream.open(srv.ws_url("/events", after=0), per_session=False, after=0)
            for _ in range(WATCHERS)
        ]
        first = {sid: await _turn(http, sid, "before") for sid in sids}
        for sid, stream in session_clients:
            await stream.until("turn.completed", of_turn(first[sid]))
        for watcher in watchers:
            for tid in first.values():
                await watcher.until("turn.completed", of_turn(tid))

    # Graceful restart: every stream is closed by the server (1012).
    srv.restart()
    for _, stream in session_clients:
        code, _reason = await stream.closed()
        assert code == 1012
    for watcher in watchers:
        assert (await watcher.closed())[0] == 1012

    async with srv.client("storm", event_hooks=status.hooks()) as http:
        # Work happens while nobody is attached.
        missed = {sid: await _turn(http, sid, "missed") for sid in sids}
        # The storm: every client reconnects at once from its own cursor.
        cursors = [stream.cursor for _, stream in session_clients]
        watcher_cursors = [w.cursor for w in watchers]
        reconnected = await asyncio.gather(
            *(
                Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=c), after=c)
                for (sid, _), c in zip(session_clients, cursors, strict=True)
            ),
            *(
                Stream.open(srv.ws_url("/events", after=c), per_session=False, after=c)
                for c in watcher_cursors
            ),
        )
        resumed, resumed_watchers = reconnected[: len(cursors)], reconnected[len(cursors) :]
        # Each receives what it missed (Stream checks that the cursor continues
        # by one, so nothing is skipped or repeated), then live events.
        live = {sid: asyncio.create_task(_turn(http, sid, "live")) for sid in sids}
        live_ids = {sid: await task for sid, task in live.items()}
        for (sid, _), stream in zip(session_clients, resumed, strict=True):
            await stream.until("turn.completed", of_turn(missed[sid]))
            await stream.until("turn.completed", of_turn(live_ids[sid]))
        for watcher in resumed_watchers:
            # The live turns ran at once: they may complete in any order.
            await _all_completed(watcher, set(live_ids.values()))
        health = (await http.get("/healthz")).json()
        assert health["clients"] == len(reconnected)

    logged = logged_events(srv.data_dir)
    assert_gapless(logged)
    by_id = {e["id"]: e for e in logged}
    for (sid, before), after in zip(session_clients, resumed, strict=True):
        # What each saw across both connections is the session's log, in order.
        seen = before.events + after.events
        assert all(by_id[e["id"]] == e for e in seen)
        session_log = [e for e in logged if e["session_id"] == sid]
        assert seen == session_log[: len(seen)]
    for old, new in zip(watchers, resumed_watchers, strict=True):
        seen = old.events + new.events
        assert [e["seq"] for e in seen] == [e["seq"] for e in logged[: len(seen)]]
    for stream in reconnected:
        await stream.close()
    assert not status.server_errors, status.server_errors
    assert not server_problems(srv), server_problems(srv)
