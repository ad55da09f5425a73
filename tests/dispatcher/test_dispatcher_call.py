"""The tool call as a state machine (dispatcher/call.py), BaseTool's stages and
the registry's adapter, the calls the agent loop answers without running, and
the metadata tools declare."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest

from dispatcher import (
    AutoAllowPolicy,
    BaseTool,
    CallRating,
    DispatchSession,
    RulePolicy,
    ToolContext,
    ToolDispatcher,
    ToolOutput,
    WorkspaceFileAPI,
)
from dispatcher.call import ALLOWED, TERMINAL, CallState, InvalidTransition, ToolCall
from dispatcher.errors import ToolExecutionError
from dispatcher.policy import PolicyConfig
from dispatcher.registry import BACKSTOP_MARGIN, ProtocolToolAdapter
from dispatcher.tools import PatchFileTool, ShellTool
from dispatcher.tools.shell import tool as shell_module
from protocol.canonical import SideEffects, ToolDefinition, ToolUseBlock
from tests.dispatcher.support import EchoTool, RecordingPublisher, schema


def _use(name: str, input: dict[str, Any], id: str = "tu_1") -> ToolUseBlock:
    return ToolUseBlock(id=id, name=name, input=input)


# -- the state machine ------------------------------------------------------------


def test_every_state_is_in_the_table_and_only_ends_are_terminal() -> None:
    assert set(ALLOWED) == set(CallState)
    # A dry-run's planned call ends without running, and without failing.
    ends = {CallState.COMPLETED, CallState.PLANNED, CallState.FAILED, CallState.CANCELLED}
    assert ends == TERMINAL
    for state, moves in ALLOWED.items():
        if state not in TERMINAL:
            # Any live call can still fail or be cancelled.
            assert {CallState.FAILED, CallState.CANCELLED} <= moves


def test_a_move_outside_the_table_is_refused_and_publishes_nothing() -> None:
    publisher = RecordingPublisher()
    call = ToolCall(_use("echo", {}), "s", "t", publisher, 1024)
    with pytest.raises(InvalidTransition):
        call.state = CallState.RUNNING  # received -> running skips validation
    assert call.state is CallState.RECEIVED and publisher.events == []


async def test_an_ended_call_cannot_publish_again(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(EchoTool)
    call = ToolCall(_use("echo", {"text": "hi"}), session.session_id, "t", publisher, 1024)
    call.fail(ToolExecutionError("boom"))
    assert call.state is CallState.FAILED and publisher.types() == ["tool.failed"]
    with pytest.raises(InvalidTransition):
        call.state = CallState.CANCELLED
    assert publisher.types() == ["tool.failed"]


async def test_a_confirmed_call_publishes_each_event_once_in_order(
    dispatcher: ToolDispatcher, workspace: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    dispatcher.register(EchoTool)
    ask = DispatchSession("s_ask", workspace, policy=RulePolicy(PolicyConfig(preset="confirm-all")))
    job = asyncio.ensure_future(dispatcher.dispatch(_use("echo", {"text": "x"}), ask, turn_id="t"))
    requested = await publisher.wait_for("tool.confirmation_requested")
    dispatcher.broker.resolve(requested.data["request_id"], "allow", resolved_by="a")
    result = await asyncio.wait_for(job, 60)
    assert not result.is_error
    assert publisher.types("tu_1") == [
        "tool.confirmation_requested",
        "tool.confirmation_resolved",
        "tool.called",
        "tool.completed",
    ]


# -- calls answered without running ----------------------------------------------------


async def test_refuse_publishes_input_invalid_and_keeps_the_text(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    result = dispatcher.refuse(
        _use("echo", {}), session, turn_id="t", reason="arguments are not a JSON object"
    )
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.startswith("Invalid input for tool 'echo': arguments are not a JSON object\n")
    assert "Call it again with its arguments as one JSON object" in text
    event = publisher.first("tool.input_invalid")
    assert event.data == {
        "tool_use_id": "tu_1",
        "tool_name": "echo",
        "errors": [{"path": "", "message": "arguments are not a JSON object"}],
    }
    assert event.turn_id == "t" and publisher.types() == ["tool.input_invalid"]


async def test_cancelled_before_start_and_interrupted(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    cancelled = dispatcher.cancelled_before_start(_use("echo", {}, "a"), session, turn_id="t")
    assert cancelled.content[0].text == (  # type: ignore[union-attr]
        "Cancelled: the turn was cancelled before the call started."
    )
    interrupted = dispatcher.interrupted(
        _use("echo", {}, "b"), "sess_gone", turn_id="t", reason="the server stopped"
    )
    assert interrupted.content[0].text == "Interrupted: the server stopped."  # type: ignore[union-attr]
    first, second = publisher.events
    assert first.data == {
        "tool_use_id": "a",
        "tool_name": "echo",
        "error_class": "cancelled",
        "message": "the turn was cancelled before the call started",
        "duration_ms": 0.0,
        "partial_output": None,
    }
    assert second.session_id == "sess_gone" and second.data["error_class"] == "cancelled"
    assert second.data["duration_ms"] == 0.0


# -- BaseTool, prepare once, the adapter -----------------------------------------------


class Counting(BaseTool):
    """Counts its stages; rates every call dangerous so a prompt is asked."""

    definition = ToolDefinition(
        name="counting",
        description="x",
        input_schema=schema({"n": {"type": "integer"}}),
        side_effects=SideEffects.WRITE,
    )
    prepared: ClassVar[list[Any]] = []
    seen: ClassVar[list[Any]] = []

    def prepare(self, input: dict[str, Any], workspace: WorkspaceFileAPI) -> object:
        token = object()
        Counting.prepared.append(token)
        return token

    def rate(
        self, input: dict[str, Any], workspace: WorkspaceFileAPI, *, prepared: Any = None
    ) -> CallRating | None:
        Counting.seen.append(("rate", prepared))
        return None

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        Counting.seen.append(("execute", context.prepared))
        return ToolOutput.text("ok")


async def test_prepare_runs_once_and_reaches_every_stage(
    dispatcher: ToolDispatcher, workspace: WorkspaceFileAPI
) -> None:
    Counting.prepared.clear()
    Counting.seen.clear()
    dispatcher.register(Counting)
    auto = DispatchSession("s", workspace, policy=AutoAllowPolicy())
    result = await dispatcher.dispatch(_use("counting", {"n": 1}), auto, turn_id="t")
    assert not result.is_error
    (token,) = Counting.prepared
    assert Counting.seen == [("rate", token), ("execute", token)]
    assert await Counting().cancel() is True  # BaseTool's default


async def test_shell_analyses_its_command_once_per_call(
    dispatcher: ToolDispatcher, workspace: WorkspaceFileAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = shell_module.rate_command  # type: ignore[attr-defined]

    def counted(command: str, **kwargs: Any) -> Any:
        calls.append(command)
        return real(command, **kwargs)

    monkeypatch.setattr(shell_module, "rate_command", counted)
    monkeypatch.setattr(shell_module, "analyze", lambda *a, **k: pytest.fail("analysed twice"))
    dispatcher.register(ShellTool)
    auto = DispatchSession(
        "s", workspace, policy=RulePolicy(PolicyConfig(preset="yolo")), max_concurrency=1
    )
    result = await dispatcher.dispatch(_use("shell", {"command": "echo hi"}), auto, turn_id="t")
    assert not result.is_error, result
    assert calls == ["echo hi"]


async def test_patch_file_reuses_its_preview_while_the_file_is_unchanged(
    workspace: WorkspaceFileAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dispatcher.tools.files import edit

    workspace.write("m.py", "a = 1\n")
    tool = PatchFileTool()
    args = {"path": "m.py", "old_str": "1", "new_str": "2"}
    prepared = tool.prepare(args, workspace)
    preview = await tool.preview(args, workspace, prepared=prepared)
    assert preview is not None and "+a = 2" in preview.text
    # Unchanged file: execute neither searches nor diffs again.
    monkeypatch.setattr(edit, "match_lines", lambda *a: pytest.fail("searched again"))
    monkeypatch.setattr(edit, "file_diff", lambda *a, **k: pytest.fail("diffed again"))
    ctx = ToolContext("s", "t", "tu", workspace.workspace_root, workspace, prepared=prepared)
    out = await tool.execute(args, ctx)
    assert out.success and workspace.read("m.py") == "a = 2\n"
    assert out.metadata["diff"] == preview.text


async def test_patch_file_recomputes_when_the_file_changed_after_the_preview(
    workspace: WorkspaceFileAPI,
) -> None:
    workspace.write("m.py", "a = 1\n")
    tool = PatchFileTool()
    args = {"path": "m.py", "old_str": "1", "new_str": "2"}
    prepared = tool.prepare(args, workspace)
    await tool.preview(args, workspace, prepared=prepared)
    workspace.write("m.py", "b = 0\na = 1\n")
    ctx = ToolContext("s", "t", "tu", workspace.workspace_root, workspace, prepared=prepared)
    out = await tool.execute(args, ctx)
    assert workspace.read("m.py") == "b = 0\na = 2\n"
    assert out.metadata["line"] == 2


def test_a_protocol_only_plugin_is_adapted_once(dispatcher: ToolDispatcher) -> None:
    dispatcher.register(EchoTool)
    entry = dispatcher._registry.get("echo")
    assert entry is not None and isinstance(entry.stateless, ProtocolToolAdapter)
    assert entry.stateless.scope({}, None).text == "allow echo for this session"  # type: ignore[arg-type]


# -- operational metadata ------------------------------------------------------------


class Configured(BaseTool):
    definition = ToolDefinition(
        name="configured", description="x", input_schema=schema(), side_effects=SideEffects.NONE
    )
    timeout: ClassVar[float | None] = 7.0
    options_section: ClassVar[str | None] = "shared"

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput.text(repr(dict(context.options)))


async def test_declared_timeout_options_section_and_backstop(
    dispatcher: ToolDispatcher, workspace: WorkspaceFileAPI
) -> None:
    dispatcher.register(Configured)
    # No override: the backstop (a configured override is used exactly; see
    # tests/server/test_tool_wiring.py).
    dispatcher.register(ShellTool)
    auto = DispatchSession(
        "s", workspace, policy=AutoAllowPolicy(), tool_options={"shared": {"k": 1}}
    )
    entries = {e.name: e for e in dispatcher.entries_for(auto)}
    assert entries["configured"].timeout == 7.0
    assert entries["configured"].options_section == "shared"
    # The shell times its own calls up to its maximum: the dispatcher backs it up.
    assert entries["shell"].timeout == shell_module.MAX_TIMEOUT + BACKSTOP_MARGIN
    assert entries["shell"].options_section == "shell"
    result = await dispatcher.dispatch(_use("configured", {}), auto, turn_id="t")
    assert result.content[0].text == "{'k': 1}"  # type: ignore[union-attr]
