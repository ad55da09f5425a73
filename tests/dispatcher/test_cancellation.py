"""Cancelling a session's tools: cancel_event, cancel(), partial output, abandonment."""

from __future__ import annotations

import asyncio
import logging

import pytest

from dispatcher import DispatchSession, ToolDispatcher, WorkspaceFileAPI
from protocol.canonical import ToolUseBlock
from tests.dispatcher.support import (
    Gauge,
    PollingTool,
    RecordingPublisher,
    StreamingTool,
    StubbornTool,
    make_slow_tool,
)


def use(name: str, tool_use_id: str = "tu_1") -> ToolUseBlock:
    return ToolUseBlock(id=tool_use_id, name=name, input={})


async def test_cancel_returns_partial_output(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(StreamingTool)
    task = asyncio.create_task(dispatcher.dispatch(use("stream"), session, turn_id="t"))
    await publisher.wait_for("tool.output_delta")
    await dispatcher.cancel_session_tools(session.session_id)
    result = await task
    assert result.is_error
    assert "line 1" in result.text()
    assert publisher.types() == ["tool.called", "tool.output_delta", "tool.failed"]
    failed = publisher.events[-1].data
    assert failed["error_class"] == "cancelled"
    assert failed["partial_output"] == "line 1\n"
    delta = publisher.events[1].data
    assert delta == {"tool_use_id": "tu_1", "stream": "stdout", "text": "line 1\n"}


async def test_polling_tool_raising_cancelled_keeps_its_partial_output(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(PollingTool)
    task = asyncio.create_task(dispatcher.dispatch(use("poll"), session, turn_id="t"))
    await publisher.wait_for("tool.called")
    await dispatcher.cancel_session_tools(session.session_id)
    result = await task
    assert result.is_error and "stopped at a poll" in result.text()
    assert publisher.events[-1].data["partial_output"] == "partial"


async def test_tool_ignoring_cancellation_is_abandoned_after_grace(
    publisher: RecordingPublisher, session: DispatchSession, caplog: pytest.LogCaptureFixture
) -> None:
    dispatcher = ToolDispatcher(publisher, cancel_grace=0.1)
    dispatcher.register(StubbornTool)
    task = asyncio.create_task(dispatcher.dispatch(use("stubborn"), session, turn_id="t"))
    await publisher.wait_for("tool.called")
    with caplog.at_level(logging.WARNING, logger="toolrelay.dispatcher"):
        await dispatcher.cancel_session_tools(session.session_id)
        result = await asyncio.wait_for(task, 60)
    assert result.is_error and "abandoned" in result.text()
    assert publisher.events[-1].data["error_class"] == "cancelled"
    assert any("abandoning" in r.getMessage() for r in caplog.records)


async def test_queued_calls_do_not_start_after_cancel(
    publisher: RecordingPublisher, workspace: WorkspaceFileAPI
) -> None:
    gauge = Gauge()
    dispatcher = ToolDispatcher(publisher)
    dispatcher.register(make_slow_tool(gauge, delay=0.2))
    session = DispatchSession("s", workspace, max_concurrency=1)
    blocks = [ToolUseBlock(id=f"t{i}", name="slow", input={"n": i}) for i in range(3)]
    task = asyncio.create_task(dispatcher.dispatch_all(blocks, session, turn_id="t"))
    await publisher.wait_for("tool.called")
    await dispatcher.cancel_session_tools("s")
    results = await task
    # The running call finishes on its own (it ignores cancel) but counts as
    # cancelled; the two queued calls never start.
    assert all(r.is_error for r in results)
    assert publisher.types().count("tool.called") == 1
    assert len(gauge.instances) == 1


async def test_cancel_with_nothing_in_flight_is_a_no_op(dispatcher: ToolDispatcher) -> None:
    await dispatcher.cancel_session_tools("nobody")
    assert dispatcher.in_flight("nobody") == 0
