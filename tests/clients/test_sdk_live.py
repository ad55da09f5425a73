"""The SDK against the real server (a `toolrelay serve` subprocess on 127.0.0.1)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from clients.sdk import (
    AlreadyResolved,
    AnyEvent,
    Backoff,
    ConfirmationRequested,
    ConfirmationResolved,
    Conflict,
    ConnectionFailed,
    ConnectionState,
    CursorExpired,
    EventStream,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    SessionDeleted,
    StreamClosed,
    ToolCompleted,
    ToolrelayClient,
    TurnStarted,
    Unauthorized,
)
from tests.clients.conftest import WRITE_A, eventually
from tests.harness import ServerProcess

FAST_RECONNECT = Backoff(attempts=200, initial=0.05, factor=1.5, max_delay=0.5)


def is_terminal(event: AnyEvent) -> bool:
    return event.type in ("turn.completed", "turn.failed", "turn.cancelled")


async def test_sessions_tools_messages_round_trip(sdk: ToolrelayClient, workspace: Path) -> None:
    session = await sdk.create_session(workspace, name="round-trip")
    assert session.workspace == str(workspace) and session.name == "round-trip"
    assert session.id in [s.id for s in await sdk.list_sessions()]
    assert (await sdk.get_session(session.id)).id == session.id
    tools = {t.name: t for t in await sdk.list_tools(session.id)}
    assert tools["write_file"].side_effects == "write"
    assert await sdk.get_messages(session.id) == []
    await sdk.delete_session(session.id)
    with pytest.raises(NotFound) as missing:
        await sdk.get_session(session.id)
    assert missing.value.status == 404 and session.id in missing.value.server_message


async def test_typed_errors_carry_the_server_message(
    server: ServerProcess, sdk: ToolrelayClient, workspace: Path
) -> None:
    async with ToolrelayClient(server.base_url, "not-the-token-at-all") as stranger:
        with pytest.raises(Unauthorized) as denied:
            await stranger.list_sessions()
    assert denied.value.code == "unauthorized" and "invalid token" in denied.value.server_message

    with pytest.raises(InvalidRequest) as bad:
        await sdk.create_session(workspace / "does-not-exist")
    assert bad.value.status == 422 and "does-not-exist" in bad.value.server_message

    session = await sdk.create_session(workspace)
    with pytest.raises(NotFound):
        await sdk.get_turn(session.id, "turn_unknown")

    big = {"id": "big", "name": "write_file", "input": {"path": "b.txt", "content": "x" * 2**21}}
    with pytest.raises(PayloadTooLarge) as too_big:
        await sdk.send_tool_uses(session.id, [big])
    assert too_big.value.status == 413

    turn_id = await sdk.send_tool_uses(session.id, [WRITE_A])
    # A second turn while the first waits for its confirmation: 409.
    with pytest.raises(Conflict) as busy:
        await sdk.send_tool_uses(session.id, [WRITE_A])
    assert busy.value.code == "turn_in_progress" and turn_id in busy.value.server_message
    pending = await eventually(lambda: sdk.pending_confirmations(session.id), what="pending")
    with pytest.raises(InvalidRequest):
        await sdk._request(  # a decision the server does not know: 422
            "POST",
            f"/sessions/{session.id}/turns/{turn_id}/confirmations/{pending[0].request_id}",
            json={"decision": "maybe"},
        )
    await sdk.cancel_turn(session.id, turn_id)


async def test_confirmation_race_has_one_winner(
    server: ServerProcess, sdk: ToolrelayClient, workspace: Path
) -> None:
    session = await sdk.create_session(workspace)
    turn_id = await sdk.send_tool_uses(session.id, [WRITE_A])
    pending = await eventually(lambda: sdk.pending_confirmations(session.id), what="pending")
    request = pending[0]
    assert request.turn_id == turn_id and request.tool_name == "write_file"
    assert request.preview is not None and request.preview.kind == "diff"
    assert "+hi" in request.preview.text
    assert request.scope_text == "allow write_file for this session"

    answerers = [ToolrelayClient(server.base_url, server.token, f"racer-{i}") for i in range(3)]
    try:
        outcomes = await asyncio.gather(
            *(c.allow(session.id, turn_id, request.request_id) for c in answerers),
            return_exceptions=True,
        )
    finally:
        for c in answerers:
            await c.aclose()
    winners = [o for o in outcomes if not isinstance(o, BaseException)]
    losers = [o for o in outcomes if isinstance(o, AlreadyResolved)]
    assert len(winners) == 1 and len(losers) == 2, outcomes
    assert all(lost.resolution.resolved_by == winners[0].resolved_by for lost in losers)
    assert all(lost.status == 409 and lost.code == "already_resolved" for lost in losers)

    turn = await sdk.wait_for_turn(session.id, turn_id, within=60)
    assert turn.status == "completed"
    assert (workspace / "a.txt").read_text() == "hi"


async def test_events_are_typed_and_deny_message_reaches_the_result(
    sdk: ToolrelayClient, workspace: Path
) -> None:
    session = await sdk.create_session(workspace)
    async with sdk.events(session.id, after=0) as stream:
        turn_id = await sdk.send_tool_uses(session.id, [WRITE_A])
        asked = await stream.next_matching(
            lambda e: isinstance(e, ConfirmationRequested), within=60
        )
        assert isinstance(asked, ConfirmationRequested) and asked.turn_id == turn_id
        assert asked.data.projected_modifications == ["a.txt"]
        won = await sdk.deny(session.id, turn_id, asked.data.request_id, message="not today")
        assert won.decision == "deny" and won.resolved_by == "sdk-test"
        seen: list[AnyEvent] = []
        while not (seen and is_terminal(seen[-1])):
            seen.append(await stream.next_matching(lambda e: True, within=60))
    resolved = [e for e in seen if isinstance(e, ConfirmationResolved)]
    assert [(r.data.decision, r.data.resolved_by) for r in resolved] == [("deny", "sdk-test")]
    assert seen[-1].type == "turn.completed"
    turn = await sdk.get_turn(session.id, turn_id)
    result = (turn.results or [])[0]
    assert result["is_error"] is True and "not today" in str(result["content"])
    assert not (workspace / "a.txt").exists()


async def test_presence_lists_attached_streams(sdk: ToolrelayClient, workspace: Path) -> None:
    session = await sdk.create_session(workspace)
    async with sdk.events(session.id, after=0) as stream:
        attached = await stream.next_matching(lambda e: e.type == "client.attached", within=60)
        assert attached.data.client_name == "sdk-test"
        names = [c.client_name for c in await sdk.attached_clients(session.id)]
        assert names == ["sdk-test"]
    await eventually(
        lambda: _no_clients(sdk, session.id), what="presence to clear after the stream closed"
    )


async def _no_clients(sdk: ToolrelayClient, session_id: str) -> bool:
    return await sdk.attached_clients(session_id) == []


async def test_cursor_ahead_of_the_log_is_a_clear_error(
    sdk: ToolrelayClient, workspace: Path
) -> None:
    session = await sdk.create_session(workspace)
    with pytest.raises(StreamClosed) as closed:
        async with sdk.events(session.id, after=10_000) as stream:
            await stream.next_matching(lambda e: True, within=60)
    assert closed.value.code == 4400 and "ahead of the log" in closed.value.reason


async def test_session_stream_ends_after_delete(sdk: ToolrelayClient, workspace: Path) -> None:
    session = await sdk.create_session(workspace)
    async with sdk.events(session.id, after=0) as stream:
        await stream.next_matching(lambda e: e.type == "client.attached", within=60)
        await sdk.delete_session(session.id)
        rest = [e async for e in stream]
    assert isinstance(rest[-1], SessionDeleted)


async def _drive_one_write(sdk: ToolrelayClient, session_id: str, tool_use_id: str) -> str:
    """Send one write, allow it, wait for the turn; returns the turn id."""
    use = {**WRITE_A, "id": tool_use_id, "input": {"path": f"{tool_use_id}.txt", "content": "x"}}
    turn_id = await sdk.send_tool_uses(session_id, [use])
    pending = await eventually(lambda: sdk.pending_confirmations(session_id), what="pending")
    await sdk.allow(session_id, turn_id, pending[0].request_id)
    assert (await sdk.wait_for_turn(session_id, turn_id, within=60)).status == "completed"
    return turn_id


async def test_streams_resume_across_a_server_restart_without_gap_or_repeat(
    own_server: ServerProcess, own_sdk: ToolrelayClient, workspace: Path
) -> None:
    server, sdk = own_server, own_sdk  # this test restarts its server
    session = await sdk.create_session(workspace)
    states: list[ConnectionState] = []
    session_events: list[AnyEvent] = []
    all_events: list[AnyEvent] = []
    session_stream = sdk.events(
        session.id, after=0, backoff=FAST_RECONNECT, on_state=lambda s, _: states.append(s)
    )
    global_stream = sdk.events(after=0, backoff=FAST_RECONNECT)

    async def collect(stream_events: list[AnyEvent], stream: EventStream, stop_turns: int) -> None:
        completed = 0
        async for event in stream:
            stream_events.append(event)
            if event.session_id == session.id and event.type == "turn.completed":
                completed += 1
                if completed == stop_turns:
                    return

    async with session_stream, global_stream:
        collectors = asyncio.gather(
            collect(session_events, session_stream, 2), collect(all_events, global_stream, 2)
        )
        await _drive_one_write(sdk, session.id, "before")
        await eventually(
            lambda: any(e.type == "turn.completed" for e in session_events), what="first turn"
        )
        await asyncio.to_thread(server.restart)
        await _drive_one_write(sdk, session.id, "after")
        await asyncio.wait_for(collectors, 30)

    assert session_stream.reconnects >= 1 and global_stream.reconnects >= 1
    assert ConnectionState.RECONNECTING in states
    seqs = [e.session_seq for e in session_events]
    assert seqs == list(range(1, len(seqs) + 1))
    global_seqs = [e.seq for e in all_events]
    assert global_seqs == sorted(set(global_seqs))
    # Exactly what a fresh reader replays from the durable log, nothing more or less.
    async with sdk.events(session.id, after=0) as replay:
        fresh = [await replay.next_matching(lambda e: True, within=60) for _ in seqs]
    assert [e.id for e in fresh] == [e.id for e in session_events]
    started = [e for e in session_events if isinstance(e, TurnStarted)]
    done = [e for e in session_events if isinstance(e, ToolCompleted)]
    assert len(started) == 2 and len(done) == 2


async def test_expired_cursor_raises_cursor_expired(server_factory: Any, workspace: Path) -> None:
    pruning = server_factory({"events": {"retention_events": 1000, "prune_interval": 0.1}})
    async with ToolrelayClient(pruning.base_url, pruning.token, "pruner") as client:
        session = await client.create_session(workspace)
        reads = [{"id": f"r{i}", "name": "list_dir", "input": {"path": "."}} for i in range(64)]
        # Each read adds at least two events; push the log well past its retention.
        for _ in range(9):
            turn_id = await client.send_tool_uses(session.id, reads)
            await client.wait_for_turn(session.id, turn_id, within=30)

        async def expired() -> CursorExpired | None:
            try:
                async with client.events(session.id, after=1) as stream:
                    await stream.next_matching(lambda e: True, within=60)
            except CursorExpired as exc:
                return exc
            return None

        error = await eventually(expired, within=60, step=0.2, what="cursor 1 to expire")
        assert error.oldest_after is not None and error.oldest_after > 1
        # Resuming where the server says history starts works again. History
        # keeps moving while events arrive (each attach is an event, pruned to
        # 1000 every 0.1 s), so a client resumes from the latest start it was
        # told of: a bounded number of times, each time from the server's word.
        oldest = error.oldest_after
        for _ in range(RESUME_TRIES):
            try:
                async with client.events(session.id, after=oldest) as stream:
                    first = await stream.next_matching(lambda e: True, within=60)
                break
            except CursorExpired as moved:
                assert moved.oldest_after is not None and moved.oldest_after > oldest
                oldest = moved.oldest_after
        else:
            pytest.fail(f"history kept moving for {RESUME_TRIES} resumes")
        assert first.session_seq == oldest + 1


RESUME_TRIES = 5


def _unused_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_retries_are_bounded_when_nobody_listens() -> None:
    url = f"http://127.0.0.1:{_unused_port()}"
    quick = Backoff(attempts=3, initial=0.01, max_delay=0.02)
    states: list[ConnectionState] = []
    async with ToolrelayClient(url, "t" * 20, backoff=quick) as client:
        with pytest.raises(ConnectionFailed, match="after 3 retries"):
            await client.list_sessions()
        stream = client.events("ses_x", backoff=quick, on_state=lambda s, _: states.append(s))
        with pytest.raises(ConnectionFailed, match="after 3 retries"):
            await stream.connect()
    # One CONNECTING, a RECONNECTING per retry, then CLOSED: bounded, and reported.
    assert states == [ConnectionState.CONNECTING] + [ConnectionState.RECONNECTING] * 3 + [
        ConnectionState.CLOSED
    ]


async def test_a_read_waits_out_a_server_restart(
    own_server: ServerProcess, own_sdk: ToolrelayClient
) -> None:
    patient = Backoff(attempts=100, initial=0.05, factor=1.5, max_delay=0.25)
    async with ToolrelayClient(own_server.base_url, own_server.token, backoff=patient) as client:
        await asyncio.to_thread(own_server.stop)
        pending = asyncio.create_task(client.list_sessions())
        await asyncio.sleep(0.2)
        assert not pending.done()  # still retrying: the server is down
        await asyncio.to_thread(own_server.start)
        assert await asyncio.wait_for(pending, 30) == await own_sdk.list_sessions()
