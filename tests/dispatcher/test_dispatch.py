"""The dispatch road: look-up, validation, scoping, execution, outcomes, the cap."""

from __future__ import annotations

import asyncio
import logging

import pytest

from dispatcher import AutoAllowPolicy, DispatchSession, ToolDispatcher, WorkspaceFileAPI
from protocol.canonical import ToolUseBlock
from tests.dispatcher.support import (
    EchoTool,
    Gauge,
    RaisingTool,
    RecordingPublisher,
    SleepyTool,
    WriteTool,
    make_slow_tool,
)


def use(name: str, tool_use_id: str = "tu_1", **input: object) -> ToolUseBlock:
    return ToolUseBlock(id=tool_use_id, name=name, input=dict(input))


async def test_success_emits_called_then_completed(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(EchoTool)
    result = await dispatcher.dispatch(use("echo", text="hello"), session, turn_id="turn_1")
    assert not result.is_error
    assert result.text() == "hello"
    assert publisher.types() == ["tool.called", "tool.completed"]
    called = publisher.first("tool.called")
    assert called.data["side_effects"] == "none"
    assert called.data["input"] == {"text": "hello"}
    assert called.turn_id == "turn_1" and called.session_id == "sess_1"
    done = publisher.first("tool.completed")
    assert done.data["content"] == [{"type": "text", "text": "hello"}]
    assert done.data["duration_ms"] >= 0


async def test_unknown_tool_is_not_found(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    result = await dispatcher.dispatch(use("missing"), session, turn_id="t")
    assert result.is_error and "missing" in result.text()
    assert publisher.types() == ["tool.failed"]
    assert publisher.first("tool.failed").data["error_class"] == "not_found"


async def test_hidden_group_is_not_found_and_not_listed(
    dispatcher: ToolDispatcher, workspace: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    dispatcher.register(EchoTool, group="memory")
    worker = DispatchSession("worker", workspace, hidden_groups=frozenset({"memory"}))
    assert dispatcher.definitions_for(worker) == []
    result = await dispatcher.dispatch(use("echo", text="x"), worker, turn_id="t")
    assert result.is_error
    assert publisher.first("tool.failed").data["error_class"] == "not_found"
    main = DispatchSession("main", workspace)
    assert [d.name for d in dispatcher.definitions_for(main)] == ["echo"]


async def test_invalid_input_reports_every_error_with_path(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(WriteTool)
    result = await dispatcher.dispatch(use("write", path=3), session, turn_id="t")
    assert result.is_error
    assert publisher.types() == ["tool.input_invalid"]
    errors = publisher.first("tool.input_invalid").data["errors"]
    paths = sorted(e["path"] for e in errors)
    assert paths == ["", "/path"]  # missing 'content' at the root, wrong type at /path
    assert "'content' is a required property" in result.text()
    assert "/path" in result.text()


@pytest.mark.parametrize(
    "path", ["../outside.txt", "/etc/passwd", "sub/../../outside.txt", "link_out/x.txt"]
)
async def test_path_escape_is_permission_denied_before_confirmation(
    dispatcher: ToolDispatcher,
    session: DispatchSession,
    publisher: RecordingPublisher,
    path: str,
    tmp_path: object,
) -> None:
    root = session.workspace.workspace_root
    import os

    os.symlink("/tmp", os.path.join(root, "link_out"))
    dispatcher.register(WriteTool)
    result = await dispatcher.dispatch(use("write", path=path, content="x"), session, turn_id="t")
    assert result.is_error and "escapes the workspace" in result.text()
    assert publisher.types() == ["tool.failed"]  # no confirmation was asked for
    assert publisher.first("tool.failed").data["error_class"] == "permission_denied"


async def test_timeout_cleans_up_and_reports(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    SleepyTool.cancels = 0
    dispatcher.register(SleepyTool, timeout=0.05)
    result = await dispatcher.dispatch(use("sleepy"), session, turn_id="t")
    assert result.is_error and "timed out after 0.05 s" in result.text()
    assert publisher.types() == ["tool.called", "tool.failed"]
    assert publisher.first("tool.failed").data["error_class"] == "timeout"
    assert SleepyTool.cancels == 1  # the tool was asked to clean up


async def test_unexpected_exception_is_redacted_and_logged(
    dispatcher: ToolDispatcher,
    session: DispatchSession,
    publisher: RecordingPublisher,
    caplog: pytest.LogCaptureFixture,
) -> None:
    dispatcher.register(RaisingTool)
    with caplog.at_level(logging.ERROR):
        result = await dispatcher.dispatch(use("raises"), session, turn_id="t")
    assert result.is_error
    assert "sk-very-secret" not in result.text()
    assert "SECRET_LEAK" in result.text()  # the class name helps; the message could leak
    failed = publisher.first("tool.failed")
    assert failed.data["error_class"] == "execution_error"
    assert "sk-very-secret" not in failed.data["message"]
    logged = [r for r in caplog.records if r.exc_info]
    assert logged and "sk-very-secret" in str(logged[0].exc_info[1])  # type: ignore[index]


async def test_tool_returning_failure_value_is_an_error_result(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    from tests.dispatcher.support import StreamingTool

    class FailsSoftly(StreamingTool):
        async def execute(self, input, context):  # type: ignore[no-untyped-def]
            from dispatcher import ToolOutput

            return ToolOutput.text("file is binary", success=False)

    dispatcher.register(FailsSoftly)
    result = await dispatcher.dispatch(use("stream"), session, turn_id="t")
    assert result.is_error and result.text() == "file is binary"
    assert publisher.first("tool.failed").data["error_class"] == "execution_error"


async def test_factory_builds_a_fresh_instance_per_call_even_concurrently(
    publisher: RecordingPublisher, workspace: WorkspaceFileAPI
) -> None:
    gauge = Gauge()
    dispatcher = ToolDispatcher(publisher)
    dispatcher.register(make_slow_tool(gauge, delay=0.01))
    session = DispatchSession("s", workspace, max_concurrency=4)
    blocks = [use("slow", f"tu_{i}", n=i) for i in range(12)]
    results = await dispatcher.dispatch_all(blocks, session, turn_id="t")
    serials = {r.text().split("serial=")[1] for r in results}
    assert len(serials) == 12  # twelve calls, twelve distinct instances
    assert len({id(i) for i in gauge.instances}) == 12  # all alive: ids are distinct


async def test_cap_bounds_running_calls_and_keeps_order(
    publisher: RecordingPublisher, workspace: WorkspaceFileAPI
) -> None:
    gauge = Gauge()
    dispatcher = ToolDispatcher(publisher)
    dispatcher.register(make_slow_tool(gauge, delay=0.03))
    session = DispatchSession("s", workspace, policy=AutoAllowPolicy(), max_concurrency=4)
    blocks = [use("slow", f"tu_{i}", n=i) for i in range(10)]
    results = await dispatcher.dispatch_all(blocks, session, turn_id="t")
    assert gauge.peak == 4  # reached the cap, never beyond it
    assert [r.tool_use_id for r in results] == [f"tu_{i}" for i in range(10)]
    assert [r.text().split()[0] for r in results] == [f"n={i}" for i in range(10)]


async def test_cap_is_configurable(
    publisher: RecordingPublisher, workspace: WorkspaceFileAPI
) -> None:
    gauge = Gauge()
    dispatcher = ToolDispatcher(publisher)
    dispatcher.register(make_slow_tool(gauge, delay=0.02))
    session = DispatchSession("s", workspace, max_concurrency=2)
    await dispatcher.dispatch_all(
        [use("slow", f"t{i}", n=i) for i in range(6)], session, turn_id="t"
    )
    assert gauge.peak == 2


async def test_duplicate_ids_in_one_message_are_refused(
    dispatcher: ToolDispatcher, session: DispatchSession
) -> None:
    dispatcher.register(EchoTool)
    results = await dispatcher.dispatch_all(
        [use("echo", "same", text="a"), use("echo", "same", text="b")], session, turn_id="t"
    )
    assert not results[0].is_error
    assert results[1].is_error and "appears twice" in results[1].text()


async def test_each_call_has_its_own_event_bracket(
    publisher: RecordingPublisher, workspace: WorkspaceFileAPI
) -> None:
    gauge = Gauge()
    dispatcher = ToolDispatcher(publisher)
    dispatcher.register(make_slow_tool(gauge, delay=0.01))
    session = DispatchSession("s", workspace)
    await dispatcher.dispatch_all(
        [use("slow", f"t{i}", n=i) for i in range(8)], session, turn_id="t"
    )
    for i in range(8):
        assert publisher.types(f"t{i}") == ["tool.called", "tool.completed"]


async def test_write_through_workspace_is_visible_on_disk(
    publisher: RecordingPublisher, workspace: WorkspaceFileAPI
) -> None:
    dispatcher = ToolDispatcher(publisher)
    dispatcher.register(WriteTool)
    session = DispatchSession("s", workspace, policy=AutoAllowPolicy())
    result = await dispatcher.dispatch(
        use("write", path="deep/dir/a.txt", content="hi"), session, turn_id="t"
    )
    assert not result.is_error
    assert workspace.read("deep/dir/a.txt") == "hi"
    assert publisher.first("tool.completed").data["files_modified"] == ["deep/dir/a.txt"]


async def test_dispatch_survives_its_caller_being_cancelled_with_an_event(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(SleepyTool)
    task = asyncio.create_task(dispatcher.dispatch(use("sleepy"), session, turn_id="t"))
    await publisher.wait_for("tool.called")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert publisher.types() == ["tool.called", "tool.failed"]
    assert publisher.first("tool.failed").data["error_class"] == "cancelled"
    assert dispatcher.in_flight("sess_1") == 0
