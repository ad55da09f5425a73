"""A tool's timeout, armed at its first suspension.

A timeout can only fire while the tool is suspended, so a tool that returns
without ever suspending could not be interrupted either way. ``run_under``
takes the coroutine's first step itself and enters ``asyncio.timeout`` only
when it suspends, with the deadline still counted from ``started`` (so it is
never later than a timeout entered before the first step). A call that never
suspends then schedules no timer handle: ``benchmarks/dispatch_overhead.py``
shows that handle (scheduled, cancelled, left in the loop's heap) as the
largest single share of a no-op dispatch (benchmarks/README.md, "Dispatcher
stages"). Any other awaitable (a plugin's own) is awaited whole under the
timeout. tests/dispatcher/test_execution_timeout.py drives every way a
coroutine can go on from its first step.
"""

from __future__ import annotations

import asyncio
import time
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


async def run_under(
    steps: Awaitable[T],
    seconds: float,
    started: float,
    armed: Callable[[asyncio.Timeout], None],
) -> T:
    """Await ``steps`` with a deadline ``seconds`` after ``started`` (a
    ``perf_counter`` reading); ``armed`` receives the timeout scope once one
    is entered (cancellation reschedules it)."""
    if not isinstance(steps, types.CoroutineType):
        async with asyncio.timeout(seconds) as scope:
            armed(scope)
            return await steps
    try:
        suspended_on = steps.send(None)
    except StopIteration as returned:
        result: T = returned.value
        return result
    left = seconds - (time.perf_counter() - started)
    async with asyncio.timeout(left) as scope:
        armed(scope)
        resumed: T = await Resumed(steps, suspended_on)
        return resumed


class Resumed:
    """``await`` on a coroutine already stepped once, from the point where it
    suspended (``await steps`` cannot: it would resume it with None in place
    of handing the task the future it suspended on). Hands that future over,
    forwards what comes back, and once the task resumes it plainly (asyncio
    sends None) delegates the rest to ``yield from``, as ``await`` would."""

    __slots__ = ("_steps", "_suspended_on")

    def __init__(self, steps: Coroutine[Any, Any, Any], suspended_on: Any) -> None:
        self._steps = steps
        self._suspended_on = suspended_on

    def __await__(self) -> Generator[Any, Any, Any]:
        steps, pending = self._steps, self._suspended_on
        while True:
            try:
                sent = yield pending
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as exc:  # CancelledError included: the tool sees it
                try:
                    pending = steps.throw(exc)
                except StopIteration as returned:
                    return returned.value
                continue
            if sent is None:
                return (yield from steps.__await__())
            try:
                pending = steps.send(sent)
            except StopIteration as returned:
                return returned.value
