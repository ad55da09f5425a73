"""A call's timeout is armed at the tool's first suspension
(dispatcher/lazy_timeout.py): every way a coroutine can go on from there
behaves as a plain ``await`` did."""

from __future__ import annotations

import asyncio
import contextvars
import time
from pathlib import Path
from typing import Any

import pytest

from dispatcher import (
    AutoAllowPolicy,
    DispatchSession,
    ToolContext,
    ToolDispatcher,
    ToolExecutionError,
    ToolOutput,
    WorkspaceFileAPI,
)
from protocol.canonical import SideEffects, ToolDefinition, ToolUseBlock
from tests.dispatcher.support import RecordingPublisher

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


def _definition(name: str) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=name,
        input_schema={"type": "object", "properties": {}},
        side_effects=SideEffects.NONE,
    )


class Base:
    cancels = 0
    finally_ran = 0

    async def cancel(self) -> bool:
        type(self).cancels += 1
        return True


class Steps(Base):
    definition = _definition("steps")

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        seen = [VAR.get()]
        for _ in range(3):
            await asyncio.sleep(0)
            seen.append(VAR.get())
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, fut.set_result, "f")
        got = await fut
        return ToolOutput.text(",".join([*seen, got]))


class Hangs(Base):
    definition = _definition("hangs")

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        try:
            await asyncio.sleep(30)
        finally:
            type(self).finally_ran += 1
        return ToolOutput.text("never")


class SlowFirstStep(Base):
    """Burns past its timeout before it first suspends."""

    definition = _definition("slow_first")

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        time.sleep(0.15)  # noqa: ASYNC251 (a first step that blocks is the case tested)
        await asyncio.sleep(5)
        return ToolOutput.text("late")


class SlowNoSuspend(Base):
    """Burns past its timeout and returns without ever suspending."""

    definition = _definition("slow_sync")

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        time.sleep(0.15)  # noqa: ASYNC251 (a tool that never suspends is the case tested)
        return ToolOutput.text("sync")


class RaisesAfterSuspend(Base):
    definition = _definition("raises_late")

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        await asyncio.sleep(0)
        raise ToolExecutionError("handled failure")


class RaisesBeforeSuspend(Base):
    definition = _definition("raises_early")

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        raise ValueError("bug")


class FutureTool(Base):
    """Registered with an async ``execute``; the test then swaps in
    ``future_execute``, a plain function returning a future."""

    definition = _definition("future")

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput.text("coroutine")

    def future_execute(self, input: dict[str, Any], context: ToolContext) -> Any:
        fut = asyncio.get_running_loop().create_future()
        if input.get("hang"):
            return fut
        asyncio.get_running_loop().call_soon(fut.set_result, ToolOutput.text("from future"))
        return fut


class CatchesCancel(Base):
    """Swallows the first cancellation, then returns what it has."""

    definition = _definition("catches")

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # suspends again after the throw
            return ToolOutput.text("partial")
        return ToolOutput.text("never")


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ToolDispatcher, DispatchSession, RecordingPublisher]:
    publisher = RecordingPublisher()
    dispatcher = ToolDispatcher(publisher, cancel_grace=0.3)
    dispatcher.register(Steps)
    dispatcher.register(Hangs, timeout=0.1)
    dispatcher.register(SlowFirstStep, timeout=0.1)
    dispatcher.register(SlowNoSuspend, timeout=0.1)
    dispatcher.register(RaisesAfterSuspend)
    dispatcher.register(RaisesBeforeSuspend)
    dispatcher.register(FutureTool, timeout=0.1)
    dispatcher.register(CatchesCancel)
    session = DispatchSession("s", WorkspaceFileAPI(tmp_path), policy=AutoAllowPolicy())
    return dispatcher, session, publisher


def use(name: str, **input: Any) -> ToolUseBlock:
    return ToolUseBlock(id=f"tu_{name}", name=name, input=input)


async def test_suspending_tool_runs_to_its_result_in_its_context(setup: Any) -> None:
    dispatcher, session, publisher = setup
    VAR.set("caller")
    result = await dispatcher.dispatch(use("steps"), session, turn_id="t")
    assert not result.is_error and result.text() == "caller,caller,caller,caller,f"
    assert publisher.types() == ["tool.called", "tool.completed"]


async def test_timeout_after_first_suspension(setup: Any) -> None:
    dispatcher, session, publisher = setup
    Hangs.cancels = Hangs.finally_ran = 0
    result = await dispatcher.dispatch(use("hangs"), session, turn_id="t")
    assert result.is_error and "timed out after 0.1 s" in result.text()
    assert publisher.first("tool.failed").data["error_class"] == "timeout"
    assert Hangs.cancels == 1 and Hangs.finally_ran == 1


async def test_deadline_counts_the_first_step(setup: Any) -> None:
    dispatcher, session, _ = setup
    result = await dispatcher.dispatch(use("slow_first"), session, turn_id="t")
    # Timed out at its first suspension, not after the tool's 5 s sleep ("late").
    assert result.is_error and "timed out" in result.text()


async def test_tool_that_never_suspends_completes_as_before(setup: Any) -> None:
    dispatcher, session, _ = setup
    result = await dispatcher.dispatch(use("slow_sync"), session, turn_id="t")
    assert not result.is_error and result.text() == "sync"


async def test_errors_before_and_after_the_first_suspension(setup: Any) -> None:
    dispatcher, session, publisher = setup
    late = await dispatcher.dispatch(use("raises_late"), session, turn_id="t")
    assert late.is_error and "handled failure" in late.text()
    early = await dispatcher.dispatch(use("raises_early"), session, turn_id="t")
    assert early.is_error and "internal error (ValueError)" in early.text()
    classes = [e.data["error_class"] for e in publisher.events if e.type == "tool.failed"]
    assert classes == ["execution_error", "execution_error"]


async def test_a_plain_awaitable_is_awaited_under_the_timeout(
    setup: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatcher, session, _ = setup
    monkeypatch.setattr(FutureTool, "execute", FutureTool.future_execute)
    ok = await dispatcher.dispatch(use("future"), session, turn_id="t")
    assert not ok.is_error and ok.text() == "from future"
    hung = await dispatcher.dispatch(use("future", hang=True), session, turn_id="t")
    assert hung.is_error and "timed out" in hung.text()


async def test_caller_cancellation_reaches_a_suspended_tool(setup: Any) -> None:
    dispatcher, session, publisher = setup
    Hangs.finally_ran = 0
    task = asyncio.create_task(dispatcher.dispatch(use("hangs"), session, turn_id="t"))
    await publisher.wait_for("tool.called")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert Hangs.finally_ran == 1
    assert publisher.first("tool.failed").data["error_class"] == "cancelled"


async def test_session_cancel_with_a_tool_that_catches_it(setup: Any) -> None:
    dispatcher, session, publisher = setup
    task = asyncio.create_task(dispatcher.dispatch(use("catches"), session, turn_id="t"))
    await publisher.wait_for("tool.called")
    await dispatcher.cancel_session_tools("s")
    async with asyncio.timeout(60):
        result = await task
    assert result.is_error  # cancelled, with what it had
    assert publisher.first("tool.failed").data["error_class"] == "cancelled"


def test_resumed_forwards_sends_throws_and_close() -> None:
    import types as _types

    from dispatcher.lazy_timeout import Resumed

    @_types.coroutine
    def suspend(value: Any) -> Any:
        return (yield value)

    log: list[Any] = []

    async def inner() -> str:
        got = await suspend("first")
        log.append(got)
        try:
            await suspend("second")
        except KeyError as exc:
            log.append(exc)
        got = await suspend("third")
        log.append(got)
        return "done"

    async def outer(steps: Any, first: Any) -> Any:
        return await Resumed(steps, first)

    steps = inner()
    first = steps.send(None)
    assert first == "first"
    driver = outer(steps, first)
    assert driver.send(None) == "first"  # handed over as it was
    assert driver.send("a") == "second"  # a non-None send is forwarded by hand
    assert driver.throw(KeyError("k")) == "third"
    with pytest.raises(StopIteration) as stop:
        driver.send("z")
    assert stop.value.value == "done"
    assert log[0] == "a" and isinstance(log[1], KeyError) and log[2] == "z"

    closed: list[bool] = []

    async def closable() -> None:
        try:
            await suspend("x")
            await suspend("y")
        finally:
            closed.append(True)

    steps2 = closable()
    driver2 = outer(steps2, steps2.send(None))
    driver2.send(None)
    driver2.close()
    assert closed == [True]
