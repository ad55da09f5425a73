"""The toolset as the dispatcher sees it: registration, schemas, side effects,
and whole calls through the real ToolDispatcher (paths checked before
confirmation, previews, streamed output, cancellation)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from dispatcher import (
    DispatchSession,
    PolicyConfig,
    RulePolicy,
    ToolDispatcher,
    WorkspaceFileAPI,
    check_subset,
)
from dispatcher.sandbox import Sandbox, SandboxConfig, probe
from dispatcher.tools import ShellTool, builtin_tool_factories
from protocol.canonical import SideEffects, ToolUseBlock
from tests.dispatcher.support import RecordingPublisher

ALL_NAMES = {
    "read_file", "write_file", "patch_file", "apply_patch", "list_dir", "find_files",
    "search_code", "grep", "git_status", "git_diff", "git_log", "git_commit", "git_branch",
}  # fmt: skip
SIDE_EFFECTS = {
    "read_file": "read", "list_dir": "read", "find_files": "read", "search_code": "read",
    "grep": "read", "git_status": "read", "git_diff": "read", "git_log": "read",
    "write_file": "write", "patch_file": "write", "apply_patch": "write",
    "delete_file": "write", "git_commit": "write", "git_branch": "write",
    "shell": "execute", "run_command": "execute",
}  # fmt: skip
# A valid input for each tool whose path field we then point outside.
PATH_CALLS: dict[str, dict[str, Any]] = {
    "read_file": {"path": "X"},
    "write_file": {"path": "X", "content": "pwned"},
    "patch_file": {"path": "X", "old_str": "top", "new_str": "pwned"},
    "apply_patch": {"patch": "@@ -1 +1 @@\n-top secret\n+pwned\n", "path": "X"},
    "delete_file": {"path": "X"},
    "list_dir": {"path": "X"},
    "find_files": {"pattern": "*", "path": "X"},
    "search_code": {"pattern": "secret", "path": "X"},
    "grep": {"pattern": "secret", "path": "X"},
    "git_diff": {"path": "X"},
    "git_log": {"path": "X"},
    "shell": {"command": "cat secret.txt", "cwd": "X"},
    "run_command": {"command": "cat secret.txt", "cwd": "X"},
}


def _names(**kwargs: bool) -> set[str]:
    return {f().definition.name for f in builtin_tool_factories(**kwargs)}


def test_registered_by_default_delete_only_when_allowed_shell_only_when_enabled() -> None:
    assert _names() == ALL_NAMES | {"shell", "run_command"}
    assert _names(delete_enabled=True) == ALL_NAMES | {"shell", "run_command", "delete_file"}
    assert _names(shell_enabled=False) == ALL_NAMES
    assert _names(shell_enabled=False, delete_enabled=True) == ALL_NAMES | {"delete_file"}


def test_every_tool_registers_with_a_subset_schema_and_its_side_effects() -> None:
    dispatcher = ToolDispatcher()
    for factory in builtin_tool_factories(delete_enabled=True):
        definition = dispatcher.register(factory)
        check_subset(definition.input_schema)
        assert definition.input_schema["additionalProperties"] is False
        assert definition.side_effects == SideEffects(SIDE_EFFECTS[definition.name])
        assert definition.description
        assert factory() is not factory()  # a fresh instance per call
    assert set(dispatcher.names()) == set(SIDE_EFFECTS)


def test_path_fields_name_schema_properties() -> None:
    for factory in builtin_tool_factories(delete_enabled=True):
        tool = factory()
        for field in getattr(tool, "path_fields", ()):
            prop = tool.definition.input_schema["properties"][field]
            assert prop["type"] == "string" and prop["format"] == "path"


@pytest.fixture
def setup(
    tmp_path: Path,
) -> tuple[ToolDispatcher, RecordingPublisher, DispatchSession, Path, Path]:
    root = tmp_path / "ws"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret\n")
    (root / "link").symlink_to(outside)
    publisher = RecordingPublisher()
    dispatcher = ToolDispatcher(publisher)
    for factory in builtin_tool_factories(delete_enabled=True):
        dispatcher.register(factory)
    session = DispatchSession(
        session_id="sess_t",
        workspace=WorkspaceFileAPI(root, allow_delete=True),
        policy=RulePolicy(PolicyConfig(preset="yolo")),
    )
    return dispatcher, publisher, session, root, outside


@pytest.mark.parametrize("escape", ["../outside/secret.txt", "/etc/passwd", "link/secret.txt"])
@pytest.mark.parametrize("tool", sorted(PATH_CALLS))
async def test_every_path_taking_tool_refuses_escapes_before_running(
    setup: tuple[ToolDispatcher, RecordingPublisher, DispatchSession, Path, Path],
    tool: str,
    escape: str,
) -> None:
    dispatcher, publisher, session, _, outside = setup
    args = {k: (escape if v == "X" else v) for k, v in PATH_CALLS[tool].items()}
    if tool in ("list_dir", "find_files", "search_code", "grep", "git_diff", "git_log", "shell",
                "run_command") and escape.endswith("secret.txt"):  # fmt: skip
        args = {k: (v.rsplit("/", 1)[0] if v == escape else v) for k, v in args.items()}
    result = await dispatcher.dispatch(
        ToolUseBlock(id="tu_x", name=tool, input=args), session, turn_id="t1"
    )
    assert result.is_error
    failed = publisher.first("tool.failed")
    assert failed.data["error_class"] == "permission_denied"
    assert "escapes the workspace" in failed.data["message"]
    assert "tool.called" not in publisher.types()  # refused before anything ran
    assert (outside / "secret.txt").read_text() == "top secret\n"


async def test_write_confirmation_carries_the_diff(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    publisher = RecordingPublisher()
    dispatcher = ToolDispatcher(publisher)
    for factory in builtin_tool_factories():
        dispatcher.register(factory)
    session = DispatchSession(session_id="s", workspace=WorkspaceFileAPI(root))
    call = ToolUseBlock(
        id="tu_p", name="patch_file", input={"path": "a.py", "old_str": "1", "new_str": "2"}
    )
    task = asyncio.create_task(dispatcher.dispatch(call, session, turn_id="t"))
    requested = await publisher.wait_for("tool.confirmation_requested")
    assert requested.data["projected_modifications"] == ["a.py"]
    assert requested.data["preview"]["kind"] == "diff"
    assert "-x = 1\n+x = 2\n" in requested.data["preview"]["text"]
    assert (root / "a.py").read_text() == "x = 1\n"  # nothing written before the answer
    dispatcher.broker.resolve(requested.data["request_id"], "allow", resolved_by="test")
    result = await task
    assert not result.is_error
    assert (root / "a.py").read_text() == "x = 2\n"
    completed = publisher.first("tool.completed")
    assert completed.data["files_modified"] == ["a.py"]


async def test_safe_shell_runs_without_confirmation_and_streams(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    publisher = RecordingPublisher()
    dispatcher = ToolDispatcher(publisher)
    for factory in builtin_tool_factories():
        dispatcher.register(factory)
    # confirm-sensitive: execute prompts, but a call the shell rates safe does
    # not, provided it runs in the sandbox (unsandboxed, every command asks).
    bwrap, why = probe()
    if bwrap is None:
        pytest.skip(why)
    sandbox = Sandbox(SandboxConfig(bwrap), str(root))
    session = DispatchSession(session_id="s", workspace=WorkspaceFileAPI(root), sandbox=sandbox)
    call = ToolUseBlock(id="tu_s", name="shell", input={"command": "echo a; sleep 0.1; echo b"})
    result = await dispatcher.dispatch(call, session, turn_id="t")
    assert not result.is_error
    types = publisher.types("tu_s")
    assert types == ["tool.called", "tool.output_delta", "tool.output_delta", "tool.completed"]
    assert publisher.first("tool.called").data["rating"] == "safe"
    deltas = [e.data["text"] for e in publisher.events if e.type == "tool.output_delta"]
    assert deltas == ["a\n", "b\n"]
    assert publisher.first("tool.completed").data["metadata"]["exit_code"] == 0


async def test_cancelling_a_turn_stops_the_shell_with_partial_output(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    publisher = RecordingPublisher()
    dispatcher = ToolDispatcher(publisher)
    for factory in builtin_tool_factories():
        dispatcher.register(factory)
    session = DispatchSession(
        session_id="s",
        workspace=WorkspaceFileAPI(root),
        policy=RulePolicy(PolicyConfig(preset="yolo")),
    )
    call = ToolUseBlock(id="tu_c", name="shell", input={"command": "echo begun; sleep 60"})
    task = asyncio.create_task(dispatcher.dispatch(call, session, turn_id="t"))
    await publisher.wait_for("tool.output_delta")
    await dispatcher.cancel_session_tools("s")
    result = await task
    assert result.is_error
    failed = publisher.first("tool.failed")
    assert failed.data["error_class"] == "cancelled"
    assert "begun" in failed.data["partial_output"]
    assert "Output before it stopped" in result.text()


async def test_blocked_shell_is_permission_denied(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    publisher = RecordingPublisher()
    dispatcher = ToolDispatcher(publisher)
    for factory in builtin_tool_factories():
        dispatcher.register(factory)
    session = DispatchSession(
        session_id="s",
        workspace=WorkspaceFileAPI(root),
        policy=RulePolicy(PolicyConfig(preset="yolo")),
    )
    call = ToolUseBlock(id="tu_b", name="run_command", input={"command": "rm -rf ~"})
    result = await dispatcher.dispatch(call, session, turn_id="t")
    assert result.is_error and "blocklist" in result.text()
    assert publisher.first("tool.failed").data["error_class"] == "permission_denied"
    assert "tool.called" not in publisher.types()  # refused before it could start


async def test_blocklisted_command_is_refused_before_any_confirmation(tmp_path: Path) -> None:
    publisher = RecordingPublisher()
    dispatcher = ToolDispatcher(publisher)
    dispatcher.register(ShellTool)
    session = DispatchSession("s", WorkspaceFileAPI(tmp_path))  # default: execute prompts
    block = ToolUseBlock(id="tu", name="shell", input={"command": "sudo rm -rf /"})
    result = await dispatcher.dispatch(block, session, turn_id="t")
    assert result.is_error and "blocklist" in result.text()
    assert publisher.types() == ["tool.failed"]  # no confirmation_requested
    assert publisher.first("tool.failed").data["error_class"] == "permission_denied"
