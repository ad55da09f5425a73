"""The ``limits:`` section, and the ledger that holds a turn's whole tree to it.

``LimitsConfig`` is the configuration: a session's token budget
(``max_tokens``), the ratio at which ``budget_warning`` hooks fire, and
``context_tokens`` (the size older tool results are elided to fit,
``context_compress``).

``BudgetLedger`` is the budget of one **tree**: a session and the worker
sessions its ``dispatch_subagent`` calls start (their own model calls draw
from the parent's budget, not from one of their own). Every model call of
the tree goes through it: it *reserves* a bound on what the call can use
before the request is sent, and *settles* the usage the provider reported
(or *releases* the reservation of a call that reported none) after. A
worker is *admitted* (child start) only while the tree is under every
limit, and *leaves* when its turn ends (child stop).

Amounts are kept per **meter**: ``tokens`` (input plus output, against
``limits.max_tokens``) today. A cost meter plugs in the same way: a meter
name (``cost_micro_usd``), its limit (``limits.max_cost_usd`` in millionths
of a dollar) and, per call, a bound (the token bound priced at the model's
rate) and a usage (the reported tokens priced); nothing else changes.

**The reservation rule.** A call whose bound fits (``spent + reserved +
bound <= limit`` on every limited meter) is granted at once, beside any
others in flight. A call that does not fit is granted only as an
*overdraft*: when no other call of the tree is in flight and every meter is
still below its limit; otherwise it waits until one settles. Once a meter's
``spent`` reaches its limit, every reservation and admission is refused.

**Invariants** (checked after every step by the stateful test in
tests/security/test_subagent_budget.py), for every limited meter, provided a
call granted by fit uses at most its bound:

- I1: an overdraft grant is in flight only alone (no other grant beside it);
- I2: while only fitting grants are in flight, ``spent + reserved <= limit``
  or nothing is in flight;
- I3: ``spent <= limit + u``, where ``u`` is the largest usage one call
  reported: **the tree never spends more than its limit plus one model
  request's usage**, however many workers reserve and settle concurrently.

Proof sketch: ``spent`` grows only when a grant settles. A fitting grant
settles to ``spent + used <= spent + bound <= limit`` (I2 before the step).
An overdraft was granted with ``spent < limit`` and, by I1, nothing else
settled while it was in flight, so it settles below ``limit + used``, with
nothing in flight after it (I1, I2 hold); from there either the meter is
exhausted and nothing more is granted, or the same two cases repeat. The
bound of a call is the caller's
(server/tree_budget.py derives it from the request's size and its output
cap); a call that reports more than its bound only makes the excess count
on top. Every decision and its record happen in one step of the event loop
(no ``await`` between them), so concurrent workers cannot both take the
last room.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

WARNING_RATIO = 0.8
# The one meter there is today; see the module docstring for cost.
TOKENS = "tokens"


class LimitsConfig(BaseModel):
    """Per-session budgets (None: no limit). A worker session draws from its
    parent's (the tree's), not from one of its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_tokens: int | None = Field(default=None, ge=1000)
    context_tokens: int | None = Field(default=None, ge=1000)
    warning_ratio: float = Field(default=WARNING_RATIO, gt=0, lt=1)

    def warning_at(self) -> int | None:
        """Tokens used at which ``budget_warning`` fires (None: never)."""
        if self.max_tokens is None:
            return None
        return int(self.max_tokens * self.warning_ratio)

    def meter_limits(self) -> dict[str, int]:
        """The limited meters and their limits (a cost meter joins here)."""
        return {} if self.max_tokens is None else {TOKENS: self.max_tokens}


@dataclass(frozen=True, slots=True)
class Grant:
    """One reservation in flight: what it may use and how it was granted."""

    id: int
    bound: Mapping[str, int]
    overdraft: bool


class Decision(StrEnum):
    """What the ledger says to a reservation right now."""

    GRANT = "grant"
    WAIT = "wait"  # others are in flight and it does not fit beside them
    EXHAUSTED = "exhausted"  # a meter is at its limit: refused for good


@dataclass(frozen=True, slots=True)
class Settled:
    """What one settled call did to each meter: totals before and after."""

    before: Mapping[str, int]
    after: Mapping[str, int]

    def crossed(self, meter: str, mark: int | None) -> bool:
        """Whether this call carried ``meter`` from below ``mark`` to at or
        above it (true for exactly one call of a tree's life)."""
        if mark is None:
            return False
        return self.before.get(meter, 0) < mark <= self.after.get(meter, 0)


@dataclass
class BudgetLedger:
    """The budget of one tree; see the module docstring for the rule and
    the invariants. Not thread-safe: one event loop owns it."""

    limits: Mapping[str, int]
    spent: dict[str, int] = field(default_factory=dict)
    # Worker sessions running now (admitted, not yet left).
    members: int = 0
    _in_flight: dict[int, Grant] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    # -- reading --------------------------------------------------------------

    def used(self, meter: str = TOKENS) -> int:
        return self.spent.get(meter, 0)

    def reserved(self, meter: str = TOKENS) -> int:
        return sum(g.bound.get(meter, 0) for g in self._in_flight.values())

    def in_flight(self) -> list[Grant]:
        return list(self._in_flight.values())

    def exhausted(self) -> str | None:
        """The first limited meter at or over its limit (None: room left)."""
        for meter, limit in self.limits.items():
            if self.spent.get(meter, 0) >= limit:
                return meter
        return None

    def decide(self, bound: Mapping[str, int]) -> Decision:
        """What a reservation of ``bound`` gets now (nothing is recorded)."""
        if self.exhausted() is not None:
            return Decision.EXHAUSTED
        if self._fits(bound) or not self._in_flight:
            return Decision.GRANT
        return Decision.WAIT

    def _fits(self, bound: Mapping[str, int]) -> bool:
        return all(
            self.spent.get(m, 0) + self.reserved(m) + bound.get(m, 0) <= limit
            for m, limit in self.limits.items()
        )

    # -- moving ---------------------------------------------------------------

    def try_reserve(self, bound: Mapping[str, int]) -> Grant | Decision:
        """A grant, or why not (WAIT or EXHAUSTED); decided and recorded in one step."""
        decision = self.decide(bound)
        if decision is not Decision.GRANT:
            return decision
        grant = Grant(next(self._ids), dict(bound), overdraft=not self._fits(bound))
        self._in_flight[grant.id] = grant
        return grant

    async def reserve(
        self, bound: Mapping[str, int], cancel: asyncio.Event | None = None
    ) -> Grant | None:
        """A grant, waiting while others are in flight and ``bound`` does not
        fit beside them; None when a meter is exhausted or ``cancel`` is set.
        The wait ends: each call in flight settles or is released."""
        while True:
            if cancel is not None and cancel.is_set():
                return None
            got = self.try_reserve(bound)
            if isinstance(got, Grant):
                return got
            if got is Decision.EXHAUSTED:
                return None
            await self._wait_for_change(cancel)

    async def _wait_for_change(self, cancel: asyncio.Event | None) -> None:
        self._changed.clear()
        waits = [asyncio.ensure_future(self._changed.wait())]
        if cancel is not None:
            waits.append(asyncio.ensure_future(cancel.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()

    def settle(self, grant: Grant, used: Mapping[str, int]) -> Settled:
        """Record what a granted call used; its reservation ends."""
        self._in_flight.pop(grant.id, None)
        before = dict(self.spent)
        for meter, amount in used.items():
            self.spent[meter] = self.spent.get(meter, 0) + max(0, amount)
        self._changed.set()
        return Settled(before, dict(self.spent))

    def release(self, grant: Grant) -> None:
        """End a reservation whose call reported no usage (it failed or was
        cancelled before the provider's count arrived)."""
        self._in_flight.pop(grant.id, None)
        self._changed.set()

    def admit(self) -> str | None:
        """Child start: a worker joins unless a meter is exhausted (then the
        exhausted meter's name is returned and nothing changes)."""
        meter = self.exhausted()
        if meter is None:
            self.members += 1
        return meter

    def leave(self) -> None:
        """Child stop: a worker's turn ended."""
        self.members = max(0, self.members - 1)
