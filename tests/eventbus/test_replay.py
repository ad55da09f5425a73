"""Replay from a cursor, the seam into live events, restarts, expiry."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from eventbus import CursorExpired, CursorInFuture, EventBus, EventLog, EventRecord

from .conftest import cursors, mode_options, running_bus, take

TS = "2026-01-01T00:00:00.000000Z"


def publish_round(bus: EventBus, count: int, sessions: int = 3) -> None:
    for i in range(count):
        bus.publish("message.delta", {"text": str(i)}, session_id=f"ses_{i % sessions}")


@pytest.mark.parametrize("log_mode", ["process", "thread", "memory"], indirect=True)
async def test_replay_after_n_for_one_session_and_for_all(
    log_mode: str, mode_log: EventLog | None
) -> None:
    async with running_bus(mode_log, replay_page_size=7, **mode_options(log_mode)) as bus:
        publish_round(bus, 90)
        await bus.flush()
        everything = await bus.subscribe(after=40)
        assert cursors(await take(everything, 50), per_session=False) == list(range(41, 91))
        one = await bus.subscribe(session_id="ses_2", after=11)
        got = await take(one, 19)
        assert cursors(got, per_session=True) == list(range(12, 31))
        assert {r.session_id for r in got} == {"ses_2"}
        # Then live, seamlessly.
        publish_round(bus, 3)
        assert [r.seq for r in await take(everything, 3)] == [91, 92, 93]
        assert cursors(await take(one, 1), per_session=True) == [31]
        assert one.last_cursor == 31 and everything.last_cursor == 93
        # after=0 replays from the very first event; after=latest waits for new ones.
        from_start = await bus.subscribe(session_id="ses_0", after=0)
        assert cursors(await take(from_start, 31), per_session=True) == list(range(1, 32))
        at_end = await bus.subscribe(after=93)
        publish_round(bus, 1)
        assert [r.seq for r in await take(at_end, 1)] == [94]


async def test_cursor_in_the_future_is_refused(log_path: Path) -> None:
    log = EventLog.open(log_path)
    try:
        async with running_bus(log) as bus:
            publish_round(bus, 6)  # not even flushed: the bus knows what it assigned
            with pytest.raises(CursorInFuture) as caught:
                await bus.subscribe(after=7)
            assert (caught.value.cursor, caught.value.latest_cursor) == (7, 6)
            assert "after=7" in str(caught.value) and "6" in str(caught.value)
            with pytest.raises(CursorInFuture):
                await bus.subscribe(session_id="ses_1", after=3)
            with pytest.raises(CursorInFuture):
                await bus.subscribe(session_id="ses_new", after=1)
            sub = await bus.subscribe(session_id="ses_1", after=2)
            publish_round(bus, 2)
            assert cursors(await take(sub, 1), per_session=True) == [3]
            assert bus.subscriber_count() == 1  # the refused ones were not registered
    finally:
        log.close()


@pytest.mark.parametrize("log_mode", ["process", "thread", "memory"], indirect=True)
@pytest.mark.parametrize(("page", "queue"), [(3, 8), (50, 16), (500, 1024)])
async def test_no_gap_and_no_repeat_at_the_seam_under_concurrent_publishing(
    log_mode: str, mode_log: EventLog | None, page: int, queue: int
) -> None:
    # Small pages force many log reads; a small live queue overflows while
    # catching up, which must cost nothing (the log holds those events).
    options = {"replay_page_size": page, "max_queue": queue, "fanout_chunk": 4}
    async with running_bus(mode_log, **options, **mode_options(log_mode)) as bus:
        total = 1200

        async def publisher() -> None:
            for i in range(total):
                bus.publish("message.delta", {"text": str(i)}, session_id=f"ses_{i % 3}")
                if i % 5 == 0:
                    await asyncio.sleep(0)

        task = asyncio.create_task(publisher())
        async with asyncio.timeout(20):
            while bus.last_seq < 300:  # noqa: ASYNC110 - polls a counter the publisher bumps
                await asyncio.sleep(0)
        start_all = bus.last_seq // 2
        start_one = bus.last_session_seq("ses_1") // 3
        # Subscribe mid-stream, while the publisher keeps going, and consume at
        # once: a subscription nobody reads is a slow subscriber.
        everything = await bus.subscribe(after=start_all)
        all_task = asyncio.create_task(take(everything, total - start_all))
        one = await bus.subscribe(session_id="ses_1", after=start_one)
        got_one = await take(one, total // 3 - start_one)
        got_all = await all_task
        await task
        assert cursors(got_all, per_session=False) == list(range(start_all + 1, total + 1))
        assert cursors(got_one, per_session=True) == list(range(start_one + 1, total // 3 + 1))
        assert bus.stats().dropped_subscribers == 0


async def test_counters_survive_a_restart(log_path: Path) -> None:
    log = EventLog.open(log_path)
    async with running_bus(log) as bus:
        publish_round(bus, 8, sessions=2)  # ses_0: 4, ses_1: 4
    log.close()

    log = EventLog.open(log_path)  # a new process would do just this
    try:
        async with running_bus(log) as bus:
            assert (bus.last_seq, bus.last_session_seq("ses_1")) == (8, 4)
            sub = await bus.subscribe(session_id="ses_1", after=0)
            bus.publish("turn.started", {}, session_id="ses_1")
            bus.publish("turn.started", {}, session_id="ses_new")
            got = await take(sub, 5)
            assert cursors(got, per_session=True) == [1, 2, 3, 4, 5]
            assert got[-1].seq == 9
            assert bus.last_session_seq("ses_new") == 1
            # Prune everything; the counters still continue after another restart.
            assert await bus.prune(keep_last=0) == 10
    finally:
        log.close()

    log = EventLog.open(log_path)
    try:
        async with running_bus(log) as bus:
            assert (bus.last_seq, bus.last_session_seq("ses_1")) == (10, 5)
            live = await bus.subscribe(session_id="ses_1", after=5)
            bus.publish("turn.started", {}, session_id="ses_1")
            (record,) = await take(live, 1)
            assert (record.seq, record.session_seq) == (11, 6)
    finally:
        log.close()


@pytest.mark.parametrize("log_mode", ["process", "thread", "memory"], indirect=True)
async def test_cursor_expired_after_prune_names_the_oldest_cursor(
    log_mode: str, mode_log: EventLog | None
) -> None:
    async with running_bus(mode_log, **mode_options(log_mode)) as bus:
        publish_round(bus, 100, sessions=2)
        await bus.flush()
        assert await bus.prune(keep_last=30) == 70
        with pytest.raises(CursorExpired) as caught:
            await bus.subscribe(after=10)
        assert (caught.value.cursor, caught.value.oldest_cursor) == (10, 70)
        assert caught.value.session_id is None
        assert "after=70" in str(caught.value)
        with pytest.raises(CursorExpired) as session_caught:
            await bus.subscribe(session_id="ses_1", after=0)
        assert session_caught.value.oldest_cursor == 35
        assert bus.subscriber_count() == 0
        # The oldest usable cursor works and loses nothing.
        resumed = await bus.subscribe(after=70)
        assert cursors(await take(resumed, 30), per_session=False) == list(range(71, 101))
        session_resumed = await bus.subscribe(session_id="ses_1", after=35)
        got = await take(session_resumed, 15)
        assert cursors(got, per_session=True) == list(range(36, 51))


async def test_prune_during_catch_up_is_reported_not_skipped(log_path: Path) -> None:
    log = EventLog.open(log_path)
    try:
        async with running_bus(log, replay_page_size=10) as bus:
            publish_round(bus, 100)
            await bus.flush()
            sub = await bus.subscribe(after=0)  # first page read, 90 more to go
            first_page = await take(sub, 10)
            assert cursors(first_page, per_session=False) == list(range(1, 11))
            await bus.prune(keep_last=50)
            with pytest.raises(CursorExpired) as caught:
                await take(sub, 1)
            assert (caught.value.cursor, caught.value.oldest_cursor) == (10, 50)
            assert bus.subscriber_count() == 0
            with pytest.raises(CursorExpired):
                await anext(sub)  # it stays ended
    finally:
        log.close()


async def test_without_a_log_only_undelivered_cursors_are_served() -> None:
    async with running_bus(None) as bus:
        publish_round(bus, 9)
        # Nothing delivered yet: after=0 still misses nothing.
        early = await bus.subscribe(session_id="ses_0", after=0)
        await bus.flush()
        assert cursors(await take(early, 3), per_session=True) == [1, 2, 3]
        with pytest.raises(CursorExpired) as caught:
            await bus.subscribe(after=4)
        assert caught.value.oldest_cursor == 9
        current = await bus.subscribe(after=9)
        publish_round(bus, 1)
        assert [r.seq for r in await take(current, 1)] == [10]
        assert await bus.prune(keep_last=0) == 0


# -- filtered replays cost what they deliver (issue 11, item 7) ------------------------


def _publish_crowd(bus: EventBus, total: int, mine_every: int) -> list[int]:
    """``total`` events of ten sessions of someone else's, with one of "ses_mine"
    every ``mine_every``; returns the seqs of the latter."""
    mine: list[int] = []
    for i in range(total):
        if i % mine_every == mine_every - 1:
            bus.publish("message.delta", {"text": str(i)}, session_id="ses_mine")
            mine.append(bus.last_seq)
        else:
            bus.publish("message.delta", {"text": str(i)}, session_id=f"ses_other_{i % 10}")
    return mine


async def test_a_filtered_global_replay_reads_only_the_visible_sessions(log_path: Path) -> None:
    log = EventLog.open(log_path)
    try:
        async with running_bus(log) as bus:  # the log in its own process, pages of 500
            mine = _publish_crowd(bus, 50_000, mine_every=2000)
            await bus.flush()
            assert len(mine) == 25

            # A token that sees no session: nothing to replay, and no page is read.
            # (Its first session is created later: that one it sees, live.)
            nothing = await bus.subscribe(
                after=0, visible=lambda sid: sid == "ses_later", visible_sessions=lambda: []
            )
            bus.publish("turn.started", {}, session_id="ses_other_1")
            bus.publish("session.created", {"workspace": "/w"}, session_id="ses_later")
            (first,) = await take(nothing, 1)
            assert (first.session_id, first.seq) == ("ses_later", bus.last_seq)
            assert (bus.stats().replay_pages, bus.stats().replay_records) == (0, 0)

            # A token that sees one session: one page, holding exactly its events,
            # where the unfiltered replay would read 101 pages of 500.
            visible = {"ses_mine"}
            sub = await bus.subscribe(
                after=0, visible=visible.__contains__, visible_sessions=lambda: sorted(visible)
            )
            got = await take(sub, len(mine))
            assert [r.seq for r in got] == mine
            assert (bus.stats().replay_pages, bus.stats().replay_records) == (1, len(mine))
            # Then live, with the cursor moving past what it may not see.
            bus.publish("message.delta", {"text": "x"}, session_id="ses_other_2")
            bus.publish("message.delta", {"text": "y"}, session_id="ses_mine")
            (record,) = await take(sub, 1)
            assert (record.session_id, record.seq) == ("ses_mine", bus.last_seq)
            assert nothing.queued == 0  # it never held anything it may not see

            # Resuming mid-way reads from the cursor on, not from the start.
            resumed = await bus.subscribe(
                after=mine[20], visible=visible.__contains__, visible_sessions=lambda: ["ses_mine"]
            )
            assert [r.seq for r in await take(resumed, 4)] == mine[21:]
            assert bus.stats().replay_records == len(mine) + 5
    finally:
        log.close()


def test_a_filtered_page_steps_over_few_rows(tmp_path: Path) -> None:
    # Rows read, not rows returned: SQLite's progress handler counts the virtual
    # machine's steps, which grow with every row a query visits.
    log = EventLog.open(tmp_path / "events.db")
    try:
        counts: dict[str, int] = {}
        records: list[EventRecord] = []
        for seq in range(1, 30_001):
            sid = "ses_mine" if seq % 1000 == 0 else f"ses_other_{seq % 7}"
            counts[sid] = counts.get(sid, 0) + 1
            records.append(
                EventRecord(seq, counts[sid], sid, "message.delta", None, TS, f'{{"seq":{seq}}}')
            )
        log.append_many(records)
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0  # go on

        log._read.set_progress_handler(count, 100)
        assert len(log.replay(after_seq=0, limit=500)) == 500
        scan_steps, steps = steps, 0
        meta, texts = log.replay_page(None, 0, 500, sessions=["ses_mine", "ses_gone"])
        assert texts is not None and len(texts.split("\x1e")) == 30
        # 30 rows of one session against 500 rows of all: a small fraction, not a
        # scan of the 30 000 rows to filter them afterwards.
        assert steps * 5 < scan_steps, (steps, scan_steps)
        meta, texts = log.replay_page(None, 0, 500, sessions=["ses_gone"])
        assert texts is None and meta == "[]"
    finally:
        log.close()


# -- retention by age and by size (issue 11, item 5) -----------------------------------


def test_prune_by_age_deletes_only_what_is_older(tmp_path: Path) -> None:
    log = EventLog.open(tmp_path / "events.db")
    try:
        # One event a minute from 00:00 to 01:39 (UTC) on 2026-01-01.
        log.append_many(
            [
                EventRecord(i + 1, i + 1, "s", "message.delta", None,
                            f"2026-01-01T{i // 60:02d}:{i % 60:02d}:00.000000Z", "{}")
                for i in range(100)
            ]
        )  # fmt: skip
        one_forty = 1767225600.0 + 100 * 60  # 2026-01-01T01:40:00Z
        assert log.prune(max_age_s=3600, now=one_forty) == 40  # 00:00 .. 00:39 go
        assert log.oldest_retained_seq() == 41
        with pytest.raises(CursorExpired) as caught:
            log.replay(after_seq=10, limit=10)
        assert caught.value.oldest_cursor == 40
        assert log.prune(max_age_s=3600, now=one_forty) == 0  # idempotent
        assert log.prune(max_age_s=60, now=one_forty + 86400) == 60  # all of it
        assert log.count() == 0 and log.last_seq() == 100  # counters survive
        with pytest.raises(ValueError, match="max_age_s"):
            log.prune(max_age_s=-1)
        with pytest.raises(ValueError, match="keep_last, max_bytes or max_age_s"):
            log.prune()
    finally:
        log.close()


@pytest.mark.parametrize("log_mode", ["process", "thread"], indirect=True)
async def test_prune_by_size_keeps_the_newest_within_the_budget(
    log_mode: str, mode_log: EventLog | None
) -> None:
    assert mode_log is not None
    async with running_bus(mode_log, **mode_options(log_mode)) as bus:
        for i in range(3000):
            bus.publish("message.delta", {"text": f"{i:04d}" + "x" * 1000}, session_id="s")
        await bus.flush()
        budget = 1024 * 1024
        deleted = await bus.prune(max_bytes=budget)
        held = mode_log.count()
        assert deleted + held == 3000 and 0 < held < 1100  # ~1 KiB each, within ~1 MiB
        assert mode_log.oldest_retained_seq() == deleted + 1  # the oldest went first
        # An old cursor gets the explicit expiry; the oldest usable one loses nothing.
        with pytest.raises(CursorExpired) as caught:
            await bus.subscribe(after=0)
        assert caught.value.oldest_cursor == deleted
        sub = await bus.subscribe(after=deleted)
        assert cursors(await take(sub, held), per_session=False) == list(range(deleted + 1, 3001))
        assert await bus.prune(max_bytes=budget) == 0  # within the budget now


@pytest.mark.parametrize("log_mode", ["process", "thread", "memory"], indirect=True)
async def test_replay_pages_are_bounded_in_bytes_and_lose_nothing(
    log_mode: str, mode_log: EventLog | None
) -> None:
    assert mode_log is not None
    page_bytes = 64 * 1024
    options = {"replay_page_bytes": page_bytes, **mode_options(log_mode)}
    async with running_bus(mode_log, **options) as bus:
        for i in range(200):  # ~10 KiB each, a few much larger
            size = 100_000 if i % 50 == 7 else 10_000
            bus.publish("message.delta", {"text": "x" * size}, session_id=f"ses_{i % 2}")
        await bus.flush()
        visible = {"ses_1"}
        everything = await bus.subscribe(after=0)
        assert cursors(await take(everything, 200), per_session=False) == list(range(1, 201))
        one = await bus.subscribe(session_id="ses_1", after=0)
        assert cursors(await take(one, 100), per_session=True) == list(range(1, 101))
        mine = await bus.subscribe(
            after=0, visible=visible.__contains__, visible_sessions=lambda: sorted(visible)
        )
        assert [r.seq for r in await take(mine, 100)] == list(range(2, 201, 2))
        stats = bus.stats()
        # ~4 MB through pages of at most 64 KiB (plus one event): dozens of pages,
        # not the one page of 500 events the count alone would allow.
        assert stats.replay_records == 400
        assert stats.replay_pages >= 4_000_000 // (page_bytes + 100_000)
        # Then live, without a gap.
        bus.publish("turn.started", {}, session_id="ses_1")
        assert [r.seq for r in await take(everything, 1)] == [201]
        assert [r.seq for r in await take(mine, 1)] == [201]
        assert cursors(await take(one, 1), per_session=True) == [101]


def test_a_page_cut_by_bytes_keeps_its_first_event_however_large(tmp_path: Path) -> None:
    log = EventLog.open(tmp_path / "events.db")
    try:
        texts = [f'{{"n":{i},"pad":"{"y" * size}"}}' for i, size in enumerate([50, 5000, 50, 50])]
        log.append_many(
            [
                EventRecord(i + 1, i + 1, "s", "message.delta", None, TS, t)
                for i, t in enumerate(texts)
            ]
        )
        # The second event alone exceeds the budget: a page still holds it.
        assert [r.seq for r in log.replay(after_seq=1, limit=10)] == [2, 3, 4]
        _, joined = log.replay_page(None, 1, 10, max_bytes=100)
        assert joined == texts[1]
        _, joined = log.replay_page(None, 2, 10, max_bytes=100)
        assert joined is not None and joined.split("\x1e") == texts[2:]
        _, joined = log.replay_page("s", 0, 10, max_bytes=len(texts[0]) + 1)
        assert joined is not None and joined.split("\x1e") == texts[:2]
        _, joined = log.replay_page(None, 0, 10, sessions=["s"], max_bytes=1)
        assert joined == texts[0]
        with pytest.raises(ValueError, match="max_bytes"):
            log.replay_page(None, 0, 10, max_bytes=0)
    finally:
        log.close()
