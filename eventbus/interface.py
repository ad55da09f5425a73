"""``Bus``: what every event bus offers the server, declared once.

Three buses implement it: ``EventBus`` without a log (in memory), ``EventBus``
with its SQLite log (durable), and ``eventbus.cluster.bus.ClusterBus`` (the
Redis log of a replica). The server holds a ``Bus`` and never asks which one
it has; a bus that lacks something answers it truthfully (``local_log`` is
None where no SQLite file of this process holds the events), it does not
pretend. mypy checks each implementation against this protocol
(``_implementations`` below); tests/eventbus/test_bus_protocol.py checks
that each has every member at run time.

The guarantees behind these methods (ordering, no gaps, replay then live)
are written in eventbus.bus's module docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from eventbus.bus import EventBus
    from eventbus.cluster.bus import ClusterBus
    from eventbus.log import EventLog
    from eventbus.subscription import Subscription, Visibility
    from protocol.payloads import Payload


@dataclass(frozen=True, slots=True)
class BusStats:
    """Counters for monitoring and benchmarks; cheap to take."""

    published: int
    committed: int
    delivered: int  # records handed to subscriber queues, summed over subscribers
    batches: int
    largest_batch: int
    pending: int
    subscribers: int
    dropped_subscribers: int
    replay_pages: int = 0  # log pages requested by subscribers catching up
    replay_records: int = 0  # records those pages returned


class Bus(Protocol):
    """Publish events in order, subscribe with a cursor, wait for durability."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def publish(
        self, type: str, data: Mapping[str, Any], *, session_id: str, turn_id: str | None = None
    ) -> None:
        """Queue one event; never waits (see ``dispatcher.publisher``)."""

    def emit(self, payload: Payload, *, session_id: str, turn_id: str | None = None) -> None:
        """Publish a typed payload: its class names the event type."""

    async def subscribe(
        self,
        *,
        session_id: str | None = None,
        after: int | None = None,
        max_queue: int | None = None,
        max_queue_bytes: int | None = None,
        visible: Visibility | None = None,
        visible_sessions: Callable[[], Collection[str]] | None = None,
    ) -> Subscription:
        """Replay after the cursor (if any), then live events, no gap, no repeat."""

    async def flush(self) -> None:
        """Wait until everything published so far is committed and delivered."""

    async def durable(self) -> None:
        """Wait until everything published so far would survive a crash."""

    async def prune(
        self,
        *,
        keep_last: int | None = None,
        max_bytes: int | None = None,
        max_age_s: float | None = None,
    ) -> int:
        """Apply a retention policy to the log; how many events were removed."""

    def stats(self) -> BusStats: ...

    def subscriber_count(self, session_id: str | None = None) -> int: ...

    def last_session_seq(self, session_id: str) -> int: ...

    @property
    def last_seq(self) -> int: ...

    @property
    def running(self) -> bool: ...

    @property
    def fault(self) -> str | None:
        """What the bus is retrying through while degraded (None when well)."""

    @property
    def failure(self) -> BaseException | None:
        """Why the bus stopped for good (None while it has not)."""

    @property
    def local_log(self) -> EventLog | None:
        """The SQLite log file this process writes the events to, if any
        (metrics measure its size); None without durability or when the log
        lives elsewhere (Redis)."""


if TYPE_CHECKING:

    def _implementations(embedded: EventBus, cluster: ClusterBus) -> tuple[Bus, Bus]:
        return embedded, cluster  # mypy: both are a Bus
