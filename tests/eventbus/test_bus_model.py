"""A Hypothesis state machine drives the event bus against a plain list model.

Rules: publish (small events, events that fill the ring, events too large for
it), the log's reply to a batch (committed or failed), subscribe (a session's
stream or all, with or without a cursor), a slow subscriber that stops
reading and later reads again, and a crash with a restart. After every step
the invariants of eventbus.bus's module docstring are checked: the bus's own
(debug mode) and, from outside, every subscriber's stream against the model:
each event of its scope once, in order, gapless, from its cursor on, ended
only explicitly; after a crash everything any subscriber saw is in the
restarted log and ``seq`` continues after the newest durable event.

The log process is a fake (``_ModelLog``) whose replies the rules hand out,
in order, as the real child sends them; the ring is the real one, in a file,
so a restart recovers what it holds exactly as the log process does.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import eventbus.commit as commit_module
from eventbus import EventBus, EventBusError, EventRecord, SubscriberTooSlow, Subscription
from eventbus.log import LogBehind, OutOfSequence, StorageFault
from eventbus.log_access import ProcessLogAccess
from eventbus.ring import Ring

SESSIONS = ("s1", "s2")
CHUNK = 4  # fanout_chunk and the slow subscribers' queue: small, so they overflow
RING_BYTES = 64 * 1024  # the smallest ring: a few big events fill it
BIG = 11 * 1024  # fits the ring (a quarter of it at most), five of them fill it
HUGE = 20 * 1024  # never fits the ring: visible once committed
PUMP_ROUNDS = 30  # loop iterations per step: bounded, enough to settle a step


@dataclass
class _Model:
    """What was published, as the bus must number it."""

    events: list[dict[str, Any]] = field(default_factory=list)

    def add(self, session_id: str, n: int) -> None:
        session_seq = 1 + sum(1 for e in self.events if e["session_id"] == session_id)
        self.events.append(
            {
                "seq": len(self.events) + 1,
                "session_id": session_id,
                "session_seq": session_seq,
                "n": n,
            }
        )

    def scope(self, session_id: str | None, after_seq: int) -> list[dict[str, Any]]:
        """The events a subscriber of ``session_id`` (None: all) must get after ``after_seq``."""
        return [
            e
            for e in self.events
            if e["seq"] > after_seq and (session_id is None or e["session_id"] == session_id)
        ]


def _n(record: EventRecord) -> int:
    n: int = json.loads(record.text)["data"]["n"]
    return n


class _ModelLog(ProcessLogAccess):
    """The log process, played by the test: ``sent`` holds the batches sent
    ahead, answered when a rule says so; ``rows`` is what SQLite holds. It
    refuses a batch that does not continue the log, as the child does."""

    def __init__(self, ring_path: str, rows: list[EventRecord]) -> None:
        super().__init__("unused-path")
        self.ring_path = ring_path
        self.rows = rows
        self.sent: list[tuple[list[EventRecord], Callable[[BaseException | None], None], int]] = []

    async def start(self) -> tuple[int, dict[str, int]]:
        ring = Ring.open(self.ring_path, log_inode=1, capacity=RING_BYTES)
        recovered, position = ring.recover(self.last)
        for row in recovered:
            self.rows.append(EventRecord(row[0], row[1], row[2], row[3], row[4], row[5], row[6]))
        ring.mark_ingested(position)
        ring.start_at(position)
        self.ring = ring
        counters: dict[str, int] = {}
        for record in self.rows:
            counters[record.session_id] = record.session_seq
        return self.last, counters

    @property
    def last(self) -> int:
        return self.rows[-1].seq if self.rows else 0

    def commit(self, records: list[EventRecord], ring_end: int) -> BaseException | None:
        if records[0].seq != self.last + 1:
            return OutOfSequence("an earlier batch is missing")
        self.rows.extend(records)
        if ring_end and self.ring is not None:
            self.ring.mark_ingested(ring_end)
        return None

    def send_append(
        self,
        records: list[EventRecord],
        on_reply: Callable[[BaseException | None], None],
        ring_end: int = 0,
    ) -> None:
        self.sent.append((list(records), on_reply, ring_end))

    def reply(self, fail: bool) -> None:
        records, on_reply, ring_end = self.sent.pop(0)
        on_reply(
            StorageFault("disk full", cause="disk full (model)")
            if fail
            else self.commit(records, ring_end)
        )

    async def append(self, records: list[EventRecord], ring_end: int = 0) -> None:
        await asyncio.sleep(0)
        error = self.commit(records, ring_end)
        if error is not None:
            raise error

    async def read_page(
        self,
        session_id: str | None,
        after: int,
        limit: int,
        *,
        sessions: Any = None,
        max_bytes: int | None = None,
        through: int = 0,
    ) -> list[EventRecord]:
        await asyncio.sleep(0)
        if through > self.last:
            raise LogBehind(f"the log holds seq {self.last}, not {through}")
        key = (lambda r: r.seq) if session_id is None else (lambda r: r.session_seq)
        rows = [r for r in self.rows if session_id is None or r.session_id == session_id]
        return [r for r in rows if key(r) > after][:limit]

    @property
    def unsent_bytes(self) -> int:
        return 0

    async def close(self) -> None:
        if self.ring is not None:
            self.ring.close()

    def abort(self) -> None:
        return None


@dataclass
class _Reader:
    """One subscription and what its consumer took from it."""

    session_id: str | None
    after_seq: int  # the model's seq after which its scope starts
    slow: bool
    sub: Subscription | None = None
    received: list[EventRecord] = field(default_factory=list)
    end: BaseException | None = None
    done: bool = False
    gate: asyncio.Event = field(default_factory=asyncio.Event)


class BusMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = tempfile.TemporaryDirectory()
        self.ring_path = str(Path(self.dir.name) / "events.ring")
        self.rows: list[EventRecord] = []
        self.model = _Model()
        self.readers: list[_Reader] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.counter = 0
        self.timing = (
            commit_module.RETRY_FIRST_S,
            commit_module.RETRY_MAX_S,
            commit_module.SEND_DELAY_S,
        )
        # The model has no clock: a failed reply is retried at once, and the
        # send timer fires only when the rule time_passes says so.
        commit_module.RETRY_FIRST_S = commit_module.RETRY_MAX_S = 0.0
        commit_module.SEND_DELAY_S = 3600.0
        self.bus = self._start_bus()

    # -- plumbing --------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def _pump(self) -> None:
        async def rounds() -> None:
            for _ in range(PUMP_ROUNDS):
                await asyncio.sleep(0)

        self._run(rounds())

    def _start_bus(self) -> EventBus:
        async def start() -> EventBus:
            bus = EventBus(
                None,
                fanout_chunk=CHUNK,
                max_queue=64,
                check_invariants=True,
                validate_payloads=False,
            )
            self.log = _ModelLog(self.ring_path, self.rows)
            # The bus reaches its log process through this fake (see _ModelLog).
            bus._commit.access = bus._commit.sender = self.log
            self.log.on_lost = bus._commit._log_lost
            await bus.start()
            return bus

        return self._run(start())

    def _publish(self, session_id: str, size: int) -> None:
        self.counter += 1
        n = self.counter

        async def publish() -> None:
            self.bus.publish("message.delta", {"text": "x" * size, "n": n}, session_id=session_id)

        self._run(publish())
        self.model.add(session_id, n)
        assert self.bus.last_seq == len(self.model.events)
        assert self.bus.last_session_seq(session_id) == self.model.events[-1]["session_seq"]
        self._pump()

    def _subscribe(self, session_id: str | None, cursor: int | None, slow: bool) -> None:
        reader = _Reader(session_id, 0, slow)
        if not slow:
            reader.gate.set()

        async def consume() -> None:
            bus = self.bus
            if cursor is None:
                # Registered within this same step: it starts after what is delivered.
                reader.after_seq = bus._fanout.delivered_seq
            elif session_id is None:
                reader.after_seq = cursor
            else:
                mine = [e for e in self.model.events if e["session_id"] == session_id]
                reader.after_seq = mine[cursor - 1]["seq"] if cursor else 0
            try:
                reader.sub = await bus.subscribe(
                    session_id=session_id, after=cursor, max_queue=CHUNK if slow else None
                )
                while True:
                    await reader.gate.wait()
                    reader.received.append(await anext(reader.sub))
            except StopAsyncIteration:
                pass
            except EventBusError as exc:
                reader.end = exc
            reader.done = True

        self.readers.append(reader)
        self.tasks.append(self.loop.create_task(consume()))
        self._pump()

    # -- rules -----------------------------------------------------------------------

    @initialize()
    def first_reader(self) -> None:
        self._subscribe(None, None, slow=False)

    @rule(session=st.sampled_from(SESSIONS), size=st.sampled_from([10, 10, 10, BIG, HUGE]))
    def publish(self, session: str, size: int) -> None:
        self._publish(session, size)

    @rule(session=st.sampled_from(SESSIONS), count=st.integers(2, 12))
    def burst(self, session: str, count: int) -> None:
        for _ in range(count):
            self._publish(session, 10)

    @precondition(lambda self: bool(self.log.sent))
    @rule(fail=st.booleans())
    def log_replies(self, fail: bool) -> None:
        self.log.reply(fail)
        self._pump()

    @rule()
    def time_passes(self) -> None:
        """The SEND_DELAY_S timer fires: what gathered is sent."""
        self._fire_send_timer()
        self._pump()

    def _fire_send_timer(self) -> None:
        commit = self.bus._commit
        timer = commit._send_timer
        if timer is not None:
            timer.cancel()
            commit._send_later()

    @rule(
        session=st.sampled_from((None, *SESSIONS)),
        position=st.floats(0.0, 1.0),
        with_cursor=st.booleans(),
    )
    def subscribe(self, session: str | None, position: float, with_cursor: bool) -> None:
        cursor = None
        if with_cursor:
            latest = self.bus.last_seq if session is None else self.bus.last_session_seq(session)
            cursor = int(latest * position)
        self._subscribe(session, cursor, slow=False)

    @rule(session=st.sampled_from((None, *SESSIONS)))
    def slow_subscriber(self, session: str | None) -> None:
        self._subscribe(session, None, slow=True)

    @rule()
    def slow_ones_read_again(self) -> None:
        for reader in self.readers:
            reader.gate.set()
        self._pump()

    @rule(child_committed_what_it_got=st.booleans())
    def crash_and_restart(self, child_committed_what_it_got: bool) -> None:
        if child_committed_what_it_got:
            while self.log.sent:
                records, _, ring_end = self.log.sent.pop(0)
                self.log.commit(records, ring_end)
        self.log.sent.clear()
        seen = {r.seq: r.text for reader in self.readers for r in reader.received}
        # The crash: the writer dies where it stands; nothing is flushed.
        assert self.bus._writer is not None
        self.bus._writer.cancel()
        for reader in self.readers:
            reader.gate.set()
        self._pump()
        assert self.log.ring is not None
        self.log.ring.close()
        assert all(r.done for r in self.readers if r.sub is not None), "a stream outlived its bus"
        for task in self.tasks:
            task.cancel()
        self._pump()
        self.readers, self.tasks = [], []
        self.bus = self._start_bus()
        logged = {r.seq: r.text for r in self.rows}
        assert [r.seq for r in self.rows] == list(range(1, len(self.rows) + 1))
        lost = {seq for seq in seen if logged.get(seq) != seen[seq]}
        assert not lost, f"events seen by subscribers are missing after the restart: {sorted(lost)}"
        # What survives is the model now; seq continues after it.
        assert self.bus.last_seq == len(self.rows) <= len(self.model.events)
        self.model = _Model()
        for record in self.rows:
            self.model.add(record.session_id, _n(record))
        self._subscribe(None, None, slow=False)

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def bus_invariants_hold(self) -> None:
        self.bus.check_invariants()
        assert self.bus.failure is None, self.bus.failure

    @invariant()
    def each_reader_has_a_gapless_prefix_of_its_scope(self) -> None:
        for reader in self.readers:
            expected = self.model.scope(reader.session_id, reader.after_seq)
            got = [(r.seq, r.session_id, r.session_seq, _n(r)) for r in reader.received]
            want = [(e["seq"], e["session_id"], e["session_seq"], e["n"]) for e in expected]
            assert got == want[: len(got)], (reader.session_id, reader.after_seq, got, want)
            if reader.done:
                # Ended only explicitly: a slow reader is told, never skipped.
                assert isinstance(reader.end, SubscriberTooSlow) and reader.slow, reader.end

    def teardown(self) -> None:
        try:
            self._drain_and_check()
        finally:
            for task in self.tasks:
                task.cancel()
            while self.log.sent:  # close() waits for the replies to what was sent
                self.log.reply(fail=False)
            self._run(asyncio.wait_for(self.bus.close(), 2.0))
            self._pump()
            self.loop.close()
            self.dir.cleanup()
            (
                commit_module.RETRY_FIRST_S,
                commit_module.RETRY_MAX_S,
                commit_module.SEND_DELAY_S,
            ) = self.timing

    def _drain_and_check(self) -> None:
        """Every reply given, every reader reading: each live reader has its
        whole scope, and the log holds everything published."""
        for reader in self.readers:
            reader.gate.set()
        for _ in range(200):  # bounded: each round answers what was sent
            while self.log.sent:
                self.log.reply(fail=False)
            self._fire_send_timer()
            self._pump()
            if not self.log.sent and self.bus._fanout.delivered_seq == self.bus.last_seq:
                break
        self._run(asyncio.wait_for(self.bus.flush(), 2.0))
        self._pump()
        assert [r.seq for r in self.rows] == list(range(1, len(self.model.events) + 1))
        for reader in self.readers:
            if reader.done:
                continue
            expected = self.model.scope(reader.session_id, reader.after_seq)
            assert [r.seq for r in reader.received] == [e["seq"] for e in expected]


TestBusModel = BusMachine.TestCase
TestBusModel.settings = settings(
    max_examples=80,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
