"""EventBus publishing: ordering, the envelope, refusals, flush/close, stats."""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dispatcher.publisher import EventPublisher
from eventbus import (
    DEBUG_ENV,
    BusClosed,
    BusNotStarted,
    EventBus,
    EventLog,
    EventNotSerializable,
    InvalidEvent,
    PayloadInvalid,
    UnknownEventType,
)
from eventbus.commit import GROUP_SEND
from protocol.catalog import EventType
from protocol.envelope import Event
from protocol.payloads import MessageDelta

from .conftest import cursors, mode_options, running_bus, take
from .samples import SAMPLES


def delta(i: int) -> dict[str, Any]:
    return {"text": f"part {i}", "index": i}


async def test_seq_and_session_seq_are_gapless_in_call_order(
    log_mode: str, mode_log: EventLog | None
) -> None:
    async with running_bus(mode_log, **mode_options(log_mode)) as bus:
        everything = await bus.subscribe()
        per_session = {f"ses_{n}": await bus.subscribe(session_id=f"ses_{n}") for n in range(5)}

        async def publisher(worker: int) -> None:
            # Five tasks interleave their publishes across five sessions.
            for i in range(60):
                bus.publish(
                    "message.delta", delta(i), session_id=f"ses_{(worker + i) % 5}", turn_id="t"
                )
                if i % 7 == 0:
                    await asyncio.sleep(0)

        await asyncio.gather(*(publisher(w) for w in range(5)))
        await bus.flush()
        assert bus.last_seq == 300

        records = await take(everything, 300)
        assert cursors(records, per_session=False) == list(range(1, 301))
        seen: dict[str, int] = {}
        for record in records:
            # Within each session the counter goes 1, 2, 3 ... in global order.
            seen[record.session_id] = seen.get(record.session_id, 0) + 1
            assert record.session_seq == seen[record.session_id]
        assert seen == dict.fromkeys(per_session, 60)
        for session_id, sub in per_session.items():
            got = await take(sub, 60)
            assert cursors(got, per_session=True) == list(range(1, 61))
            assert {r.session_id for r in got} == {session_id}
            assert bus.last_session_seq(session_id) == 60


async def test_the_envelope_is_encoded_once_and_shared(
    log_mode: str, mode_log: EventLog | None
) -> None:
    async with running_bus(mode_log, **mode_options(log_mode)) as bus:
        subs = [await bus.subscribe() for _ in range(3)]
        bus.publish("tool.called", SAMPLES[EventType.TOOL_CALLED], session_id="s", turn_id="t1")
        bus.publish(EventType.TURN_STARTED, {}, session_id="s")
        firsts = [await take(sub, 2) for sub in subs]
        # Every subscriber gets the very same text object: encoded once.
        assert firsts[0][0].text is firsts[1][0].text is firsts[2][0].text
        event = firsts[0][0].event
        assert isinstance(event, Event)
        assert event.type == "tool.called" and event.turn_id == "t1"
        assert event.data == SAMPLES[EventType.TOOL_CALLED]
        assert event.id.startswith("evt_")
        assert event.ts.endswith("Z") and "T" in event.ts
        assert list(json.loads(firsts[0][0].text)) == list(Event.model_fields)
        second = firsts[0][1].event
        assert second.type == "turn.started" and second.turn_id is None
        assert second.id != event.id
        # The text is what the Event model itself would produce.
        assert Event.model_validate_json(firsts[0][1].text) == second


async def test_ids_are_unique_across_buses_without_a_log() -> None:
    ids: set[str] = set()
    for _ in range(2):
        async with running_bus(None) as bus:
            sub = await bus.subscribe()
            for i in range(5):
                bus.publish("message.delta", delta(i), session_id="s")
            ids.update(r.event.id for r in await take(sub, 5))
    assert len(ids) == 10


async def test_publish_copies_nothing_it_does_not_own() -> None:
    async with running_bus(None) as bus:
        sub = await bus.subscribe()
        data: dict[str, Any] = {"text": "before"}
        bus.publish("message.delta", data, session_id="s")
        data["text"] = "after"  # the publisher reuses its dict
        (record,) = await take(sub, 1)
        assert record.event.data == {"text": "before"}


async def test_publish_refuses_bad_events_and_assigns_nothing() -> None:
    async with running_bus(None) as bus:
        with pytest.raises(UnknownEventType, match=r"tool\.exploded"):
            bus.publish("tool.exploded", {}, session_id="s")
        with pytest.raises(InvalidEvent, match="session_id"):
            bus.publish("turn.started", {}, session_id="")
        with pytest.raises(InvalidEvent, match="session_id"):
            bus.publish("turn.started", {}, session_id=7)  # type: ignore[arg-type]
        with pytest.raises(InvalidEvent, match="turn_id"):
            bus.publish("turn.started", {}, session_id="s", turn_id=3)  # type: ignore[arg-type]
        with pytest.raises(InvalidEvent, match="mapping"):
            bus.publish("turn.started", ["x"], session_id="s")  # type: ignore[arg-type]
        with pytest.raises(EventNotSerializable, match=r"turn\.failed"):
            bus.publish("turn.failed", {"reason": object()}, session_id="s")
        with pytest.raises(EventNotSerializable):
            bus.publish("turn.failed", {"reason": b"bytes"}, session_id="s")
        looped: dict[str, Any] = {}
        looped["self"] = looped
        with pytest.raises(EventNotSerializable):
            bus.publish("turn.failed", looped, session_id="s")
        with pytest.raises(EventNotSerializable, match="Unicode"):
            bus.publish("turn.started", {}, session_id="ses_\udcff")
        assert bus.last_seq == 0 and bus.last_session_seq("s") == 0
        bus.publish("turn.failed", {"reason": "fine"}, session_id="s")
        assert (bus.last_seq, bus.last_session_seq("s")) == (1, 1)


async def test_nan_and_infinities_become_null_and_surrogates_become_fffd() -> None:
    # orjson writes NaN/Infinity as null (strict JSON either way); a lone
    # surrogate (from text that bypassed the decoders) becomes U+FFFD instead of
    # failing the publisher.
    async with running_bus(None) as bus:
        sub = await bus.subscribe(session_id="s")
        bus.publish("turn.failed", {"reason": "r", "x": [math.nan, -math.inf]}, session_id="s")
        bus.emit(MessageDelta(text="a\ud800b\udcffc"), session_id="s")
        # A provider's JSON may spell "\ud800": json.loads gives a lone surrogate.
        provider_text = json.loads('"x\\ud800"')
        bus.publish("turn.failed", {"reason": provider_text, "k\udfff": 1}, session_id="s")
        first, second, third = await take(sub, 3)
        assert first.event.data == {"reason": "r", "x": [None, None]}
        assert second.event.data["text"] == "a\ufffdb\ufffdc"
        assert third.event.data == {"reason": "x\ufffd", "k\ufffd": 1}
        for record in (second, third):
            record.encoded.decode("utf-8")  # strict UTF-8


async def test_mappings_and_enum_types_are_accepted() -> None:
    from types import MappingProxyType

    async with running_bus(None) as bus:
        sub = await bus.subscribe(session_id="s")
        bus.publish(EventType.TURN_FAILED, MappingProxyType({"reason": "r"}), session_id="s")
        (record,) = await take(sub, 1)
        assert record.type == "turn.failed" and type(record.type) is str
        assert record.event.data == {"reason": "r"}


async def test_debug_mode_validates_payloads(monkeypatch: pytest.MonkeyPatch) -> None:
    async with running_bus(None, validate_payloads=True) as bus:
        with pytest.raises(PayloadInvalid, match="tool_use_id"):
            bus.publish("tool.failed", {"tool_name": "x"}, session_id="s")
        for event_type, sample in SAMPLES.items():
            bus.publish(event_type, sample, session_id="s")
        assert bus.last_seq == len(SAMPLES)
    monkeypatch.setenv(DEBUG_ENV, "1")
    async with running_bus(None) as bus:
        with pytest.raises(PayloadInvalid):
            bus.publish("turn.failed", {}, session_id="s")
    monkeypatch.setenv(DEBUG_ENV, "0")
    async with running_bus(None) as bus:
        bus.publish("turn.failed", {}, session_id="s")  # not checked outside debug mode


async def test_lifecycle_refusals(log_path: Path) -> None:
    bus = EventBus(None)
    with pytest.raises(BusNotStarted):
        bus.publish("turn.started", {}, session_id="s")
    with pytest.raises(BusNotStarted):
        await bus.subscribe()
    await bus.start()
    await bus.start()  # idempotent while running
    assert bus.running
    await bus.close()
    await bus.close()  # idempotent
    assert not bus.running
    with pytest.raises(BusClosed):
        bus.publish("turn.started", {}, session_id="s")
    with pytest.raises(BusClosed):
        await bus.subscribe()
    with pytest.raises(BusClosed, match="closed"):
        await bus.start()
    await bus.flush()  # nothing outstanding: returns


async def test_close_flushes_to_the_log_and_ends_subscriptions(
    log_mode: str, mode_log: EventLog | None, log_path: Path
) -> None:
    bus = EventBus(mode_log, **mode_options(log_mode))
    await bus.start()
    sub = await bus.subscribe(session_id="s")
    for i in range(500):
        bus.publish("message.delta", delta(i), session_id="s")
    await bus.close()  # no flush() first
    # What was queued before the close is still handed out, then BusClosed.
    got = await take(sub, 500)
    assert cursors(got, per_session=True) == list(range(1, 501))
    with pytest.raises(BusClosed):
        await anext(sub)
    with pytest.raises(BusClosed):
        await anext(sub)  # and it stays ended
    if log_mode in ("process", "thread"):
        conn = sqlite3.connect(log_path)
        try:
            assert conn.execute("SELECT COUNT(*), MAX(session_seq) FROM events").fetchone() == (
                500,
                500,
            )
        finally:
            conn.close()
    if mode_log is not None and log_mode == "memory":
        assert mode_log.count() == 500


async def test_flush_waits_for_commit_and_delivery(log_path: Path) -> None:
    log = EventLog.open(log_path)
    try:
        async with running_bus(log) as bus:
            sub = await bus.subscribe()
            for i in range(1000):
                bus.publish("message.delta", delta(i), session_id=f"s{i % 4}")
            await bus.flush()
            stats = bus.stats()
            assert stats.published == stats.committed == 1000
            assert stats.delivered == 1000 and stats.pending == 0
            assert sub.queued == 1000  # delivered into its queue, nothing taken yet
            assert log.count() == 1000  # committed, as seen through another connection
    finally:
        log.close()


async def test_group_commit_batches_many_events(log_path: Path) -> None:
    log = EventLog.open(log_path)
    try:
        async with running_bus(log) as bus:
            for i in range(3000):
                bus.publish("message.delta", delta(i), session_id="s")
            await bus.flush()
            stats = bus.stats()
            # Published without yielding: the first leaves alone, the rest travel
            # as group commits of GROUP_SEND (or what the last reply finds gathered).
            assert stats.batches <= 1 + 3000 // GROUP_SEND + 1
            assert stats.largest_batch >= GROUP_SEND
    finally:
        log.close()


async def test_subscriptions_are_counted_and_closed() -> None:
    async with running_bus(None) as bus:
        a = await bus.subscribe()
        b = await bus.subscribe(session_id="s1")
        c = await bus.subscribe(session_id="s1")
        assert bus.subscriber_count() == 3
        assert bus.subscriber_count("s1") == 2
        b.close()
        assert bus.subscriber_count("s1") == 1
        with pytest.raises(StopAsyncIteration):
            await anext(b)
        async with c:
            bus.publish("turn.started", {}, session_id="s1")
            assert [r.seq for r in await take(c, 1)] == [1]
        assert bus.subscriber_count() == 1
        assert bus.stats().subscribers == 1
        a.close()
        assert bus.subscriber_count() == 0


async def test_subscribe_rejects_bad_arguments() -> None:
    async with running_bus(None, fanout_chunk=64) as bus:
        with pytest.raises(ValueError, match="session_id"):
            await bus.subscribe(session_id="")
        with pytest.raises(ValueError, match="after"):
            await bus.subscribe(after=-1)
        with pytest.raises(ValueError, match="after"):
            await bus.subscribe(after=True)
        with pytest.raises(ValueError, match="max_queue"):
            await bus.subscribe(max_queue=10)


def test_constructor_rejects_bad_options(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fanout_chunk"):
        EventBus(None, max_queue=8, fanout_chunk=16)
    with pytest.raises(ValueError, match="max_batch"):
        EventBus(None, max_batch=0)
    with pytest.raises(ValueError, match="replay_page_size"):
        EventBus(None, replay_page_size=100_000)
    memory = EventLog.open(":memory:")
    with pytest.raises(ValueError, match="memory"):
        EventBus(memory, log_access="process")
    with pytest.raises(ValueError, match="log_access"):
        EventBus(memory, log_access="carrier pigeon")  # type: ignore[arg-type]
    memory.close()


def test_emit_matches_the_dispatcher_publisher_protocol() -> None:
    ours = inspect.signature(EventBus.emit)
    theirs = inspect.signature(EventPublisher.emit)
    assert list(ours.parameters) == list(theirs.parameters)
    for name, param in theirs.parameters.items():
        assert ours.parameters[name].kind == param.kind
        assert ours.parameters[name].default == param.default
