"""Load: 50 clients x 20 turns at once against one server; nothing is lost."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from tests.harness import ServerFactory
from tests.reliability.conftest import DEBUG_ENV, config
from tests.reliability.support import (
    Event,
    StatusLog,
    assert_gapless,
    logged_events,
    of_turn,
    server_problems,
)
from tests.server.support import Stream, new_session, start_turn, use

CLIENTS = 50
TURNS = 20
CALLS_PER_TURN = 2
# Per turn, in order of publication (tool events of the two calls may interleave).
TURN_EVENTS = Counter(
    {
        "turn.started": 1,
        "message.completed": 2,  # the assistant message and the tool results
        "tool.called": CALLS_PER_TURN,
        "tool.completed": CALLS_PER_TURN,
        "turn.completed": 1,
    }
)


async def test_fifty_clients_twenty_turns_lose_nothing(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    srv = server_factory(config(), env=DEBUG_ENV)
    status = StatusLog()
    total_turns = CLIENTS * TURNS

    async def one_client(index: int) -> tuple[str, list[str], list[Event]]:
        workspace = tmp_path / f"ws{index}"
        workspace.mkdir()
        async with srv.client(f"client-{index}", event_hooks=status.hooks(), timeout=60) as http:
            sid = await new_session(http, workspace)
            url = srv.ws_url(f"/sessions/{sid}/events", after=0)
            # Stream checks on every event that session_seq grows by exactly one.
            async with await Stream.open(url, after=0) as stream:
                turn_ids = []
                for t in range(TURNS):
                    calls = [
                        use(f"t{t}c{c}", "rl_echo", text=f"{index}/{t}/{c}")
                        for c in range(CALLS_PER_TURN)
                    ]
                    tid = await start_turn(http, sid, *calls)
                    turn_ids.append(tid)
                    await stream.until("turn.completed", of_turn(tid), within=90)
                return sid, turn_ids, stream.events

    async def watch_everything() -> list[Event]:
        # A dashboard on the all-sessions stream, reading for the whole run.
        async with await Stream.open(
            srv.ws_url("/events", after=0), per_session=False, after=0
        ) as watcher:
            done = 0
            while done < total_turns:
                event = await watcher.next(within=90)
                done += event["type"] == "turn.completed"
            return watcher.events

    watcher = asyncio.create_task(watch_everything())
    results = await asyncio.gather(*(one_client(i) for i in range(CLIENTS)))
    global_events = await asyncio.wait_for(watcher, 120)

    assert not status.server_errors, status.server_errors
    assert status.statuses[201] == CLIENTS and status.statuses[202] == total_turns
    for sid, turn_ids, events in results:
        for tid in turn_ids:
            seen = Counter(e["type"] for e in events if e["turn_id"] == tid)
            assert seen == TURN_EVENTS, (sid, tid, seen)
            completed = next(
                e for e in events if e["type"] == "turn.completed" and e["turn_id"] == tid
            )
            assert completed["data"]["results"] == CALLS_PER_TURN
            assert completed["data"]["errors"] == 0

    # The durable log holds exactly what the clients saw, gapless per session.
    logged = logged_events(srv.data_dir)
    assert_gapless(logged)
    by_id = {e["id"]: e for e in logged}
    for _sid, _tids, events in results:
        for event in events:
            assert by_id[event["id"]] == event
    # The all-sessions watcher saw every turn event of every session, in seq order.
    watched = [e for e in global_events if not e["type"].startswith("client.")]
    expected = [e for e in logged if not e["type"].startswith("client.")]
    assert watched == expected[: len(watched)]
    assert sum(e["type"] == "turn.completed" for e in watched) == total_turns
    assert not server_problems(srv), server_problems(srv)
