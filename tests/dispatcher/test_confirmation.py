"""Confirmation through the broker: allow, deny, timeout, scope, first answer wins."""

from __future__ import annotations

import asyncio

import pytest

from dispatcher import (
    ConfirmationBroker,
    DispatchSession,
    PolicyConfig,
    RulePolicy,
    ToolDispatcher,
    UnknownConfirmation,
    WorkspaceFileAPI,
)
from dispatcher.confirmation_stage import PREVIEW_CHARS
from dispatcher.sandbox import Sandbox, SandboxConfig
from protocol.canonical import ToolUseBlock
from tests.dispatcher.support import RatedShell, RecordingPublisher, WriteTool
from tests.dispatcher.tools.test_shell_rating_corpus import DryShell


def write(tool_use_id: str = "tu_w", path: str = "a.txt") -> ToolUseBlock:
    return ToolUseBlock(id=tool_use_id, name="write", input={"path": path, "content": "hi"})


async def _answer_when_asked(
    dispatcher: ToolDispatcher,
    publisher: RecordingPublisher,
    decision: str,
    *,
    count: int = 1,
    scope: str = "once",
    message: str | None = None,
) -> str:
    requested = await publisher.wait_for("tool.confirmation_requested", count)
    request_id = requested.data["request_id"]
    dispatcher.broker.resolve(
        request_id,
        decision,  # type: ignore[arg-type]
        scope=scope,  # type: ignore[arg-type]
        resolved_by="alice",
        message=message,
    )
    return str(request_id)


async def test_allow_runs_the_call_after_the_events(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(WriteTool)
    task = asyncio.create_task(dispatcher.dispatch(write(), session, turn_id="turn_1"))
    await _answer_when_asked(dispatcher, publisher, "allow")
    result = await task
    assert not result.is_error
    assert session.workspace.read("a.txt") == "hi"
    assert publisher.types() == [
        "tool.confirmation_requested",
        "tool.confirmation_resolved",
        "tool.called",
        "tool.completed",
    ]
    requested = publisher.first("tool.confirmation_requested").data
    assert requested["tool_name"] == "write"
    assert requested["side_effects"] == "write"
    assert requested["projected_modifications"] == ["a.txt"]
    assert requested["preview"] == {"kind": "diff", "text": "+hi"}
    assert requested["input_summary"].startswith("write(")
    assert requested["expires_at"].endswith("Z")
    assert requested["scope_text"] == "allow write for this session"
    resolved = publisher.first("tool.confirmation_resolved").data
    assert resolved["decision"] == "allow" and resolved["resolved_by"] == "alice"


async def test_deny_is_user_denied_with_the_message(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(WriteTool)
    task = asyncio.create_task(dispatcher.dispatch(write(), session, turn_id="t"))
    await _answer_when_asked(dispatcher, publisher, "deny", message="use patch_file instead")
    result = await task
    assert result.is_error
    assert "User denied this operation." in result.text()
    assert "use patch_file instead" in result.text()
    assert not session.workspace.exists("a.txt")
    assert publisher.types()[-1] == "tool.failed"
    assert publisher.events[-1].data["error_class"] == "user_denied"
    assert "tool.called" not in publisher.types()


async def test_no_answer_is_confirmation_timeout(
    dispatcher: ToolDispatcher, workspace: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    dispatcher.register(WriteTool)
    session = DispatchSession("s", workspace, confirmation_timeout=0.05)
    result = await dispatcher.dispatch(write(), session, turn_id="t")
    assert result.is_error and "within 0.05 s" in result.text()
    assert publisher.first("tool.confirmation_resolved").data["decision"] == "timeout"
    assert publisher.events[-1].data["error_class"] == "confirmation_timeout"
    assert dispatcher.broker.pending() == []


async def test_first_answer_wins_and_later_answers_learn_the_winner(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(WriteTool)
    task = asyncio.create_task(dispatcher.dispatch(write(), session, turn_id="t"))
    requested = await publisher.wait_for("tool.confirmation_requested")
    rid = requested.data["request_id"]
    first = dispatcher.broker.resolve(rid, "deny", resolved_by="bob")
    second = dispatcher.broker.resolve(rid, "allow", resolved_by="carol")
    third = dispatcher.broker.resolve(rid, "allow", scope="session", resolved_by="dave")
    assert first.won and first.decision == "deny"
    for later in (second, third):
        assert not later.won
        assert (later.decision, later.resolved_by, later.scope) == ("deny", "bob", "once")
    result = await task
    assert result.is_error
    resolved = [e for e in publisher.events if e.type == "tool.confirmation_resolved"]
    assert len(resolved) == 1 and resolved[0].data["resolved_by"] == "bob"


async def test_unknown_request_id_raises(dispatcher: ToolDispatcher) -> None:
    with pytest.raises(UnknownConfirmation):
        dispatcher.broker.resolve("conf_nope", "allow", resolved_by="x")


async def test_scope_session_skips_later_prompts_for_that_tool(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(WriteTool)
    task = asyncio.create_task(dispatcher.dispatch(write("tu_1"), session, turn_id="t"))
    await _answer_when_asked(dispatcher, publisher, "allow", scope="session")
    assert not (await task).is_error
    result = await dispatcher.dispatch(write("tu_2", "b.txt"), session, turn_id="t2")
    assert not result.is_error
    assert publisher.types("tu_2") == ["tool.called", "tool.completed"]


async def test_prompt_once_remembers_a_deny(
    dispatcher: ToolDispatcher, workspace: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    dispatcher.register(WriteTool)
    policy = RulePolicy(PolicyConfig(per_tool={"write": "prompt_once"}))  # type: ignore[dict-item]
    session = DispatchSession("s", workspace, policy=policy)
    task = asyncio.create_task(dispatcher.dispatch(write("tu_1"), session, turn_id="t"))
    await _answer_when_asked(dispatcher, publisher, "deny")
    assert (await task).is_error
    again = await dispatcher.dispatch(write("tu_2"), session, turn_id="t")
    assert again.is_error and "rest of this session" in again.text()
    assert "tool.confirmation_requested" not in publisher.types("tu_2")


async def test_policy_deny_never_runs(
    dispatcher: ToolDispatcher, workspace: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    dispatcher.register(WriteTool)
    policy = RulePolicy(PolicyConfig(default={"write": "deny"}))  # type: ignore[dict-item]
    session = DispatchSession("s", workspace, policy=policy)
    result = await dispatcher.dispatch(write(), session, turn_id="t")
    assert result.is_error
    assert publisher.types() == ["tool.failed"]
    assert publisher.first("tool.failed").data["error_class"] == "permission_denied"


def _sandboxed(workspace: WorkspaceFileAPI, policy: RulePolicy | None = None) -> DispatchSession:
    """A session with a sandbox (the object only: these tools start no process)."""
    sandbox = Sandbox(SandboxConfig("/usr/bin/bwrap"), workspace.workspace_root)
    return DispatchSession("s_box", workspace, policy=policy or RulePolicy(), sandbox=sandbox)


async def test_rating_lowers_prompt_for_safe_calls_only(
    dispatcher: ToolDispatcher, workspace: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    # Only in a sandbox: a safe rating lowers the bar (see the test below).
    session = _sandboxed(workspace)
    dispatcher.register(RatedShell)
    safe = ToolUseBlock(id="tu_ls", name="rated", input={"command": "ls"})
    assert not (await dispatcher.dispatch(safe, session, turn_id="t")).is_error
    assert publisher.types("tu_ls") == ["tool.called", "tool.completed"]
    called = publisher.first("tool.called").data
    assert called["side_effects"] == "execute" and called["rating"] == "safe"

    risky = ToolUseBlock(id="tu_rm", name="rated", input={"command": "rm x"})
    task = asyncio.create_task(dispatcher.dispatch(risky, session, turn_id="t"))
    requested = await publisher.wait_for("tool.confirmation_requested")
    assert requested.data["rating"] == "dangerous"
    dispatcher.broker.resolve(requested.data["request_id"], "allow", resolved_by="a")
    assert not (await task).is_error


async def test_without_a_sandbox_even_a_safe_execute_call_asks(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    assert session.sandbox is None
    dispatcher.register(RatedShell)
    safe = ToolUseBlock(id="tu_ls", name="rated", input={"command": "ls"})
    task = asyncio.create_task(dispatcher.dispatch(safe, session, turn_id="t"))
    requested = await publisher.wait_for("tool.confirmation_requested")
    assert requested.data["rating"] == "safe"
    assert requested.data["scope_text"] == "allow rated for this session"
    dispatcher.broker.resolve(requested.data["request_id"], "allow", resolved_by="a")
    assert not (await task).is_error


@pytest.mark.parametrize(
    "config",
    [
        {"trusted_workspaces": ["/"], "trusted_workspace_overrides": {"execute": "auto"}},
        {"per_tool": {"rated": "auto"}},
        {"default": {"execute": "auto"}},
        {"preset": "confirm-all", "ratings": {"safe": "auto"}},
    ],
)
async def test_no_policy_but_yolo_auto_runs_execute_outside_a_sandbox(
    dispatcher: ToolDispatcher,
    workspace: WorkspaceFileAPI,
    publisher: RecordingPublisher,
    config: dict[str, object],
) -> None:
    dispatcher.register(RatedShell)
    policy = RulePolicy(PolicyConfig.model_validate(config))
    session = DispatchSession("s_nobox", workspace, policy=policy)
    call = ToolUseBlock(id="tu_ls", name="rated", input={"command": "ls"})
    task = asyncio.create_task(dispatcher.dispatch(call, session, turn_id="t"))
    requested = await publisher.wait_for("tool.confirmation_requested")
    dispatcher.broker.resolve(requested.data["request_id"], "deny", resolved_by="a")
    assert (await task).is_error
    # The same policy in a sandbox runs it unasked: the floor is the sandbox's doing.
    boxed = _sandboxed(workspace, policy)
    again = ToolUseBlock(id="tu_ls2", name="rated", input={"command": "ls"})
    assert not (await dispatcher.dispatch(again, boxed, turn_id="t")).is_error
    assert publisher.types("tu_ls2") == ["tool.called", "tool.completed"]


async def test_yolo_is_the_explicit_choice_to_run_everything(
    dispatcher: ToolDispatcher, workspace: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    dispatcher.register(RatedShell)
    session = DispatchSession("s", workspace, policy=RulePolicy(PolicyConfig(preset="yolo")))
    risky = ToolUseBlock(id="tu_rm", name="rated", input={"command": "rm x"})
    assert not (await dispatcher.dispatch(risky, session, turn_id="t")).is_error
    assert publisher.types("tu_rm") == ["tool.called", "tool.completed"]


async def test_cancel_settles_pending_confirmations(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(WriteTool)
    task = asyncio.create_task(dispatcher.dispatch(write(), session, turn_id="t"))
    requested = await publisher.wait_for("tool.confirmation_requested")
    await dispatcher.cancel_session_tools(session.session_id)
    result = await task
    assert result.is_error
    assert publisher.first("tool.confirmation_resolved").data["decision"] == "cancelled"
    assert publisher.events[-1].data["error_class"] == "cancelled"
    late = dispatcher.broker.resolve(requested.data["request_id"], "allow", resolved_by="x")
    assert not late.won and late.decision == "cancelled"


async def test_broker_lists_pending_by_session() -> None:
    broker = ConfirmationBroker()
    assert broker.pending() == []
    assert broker.get("nope") is None


async def test_duration_measures_the_run_not_the_wait_for_a_person(
    dispatcher: ToolDispatcher,
    session: DispatchSession,
    publisher: RecordingPublisher,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dispatcher.call as module  # where a call keeps its time

    clock = [1000.0]  # a clock that moves only when the test says so
    monkeypatch.setattr(module.time, "perf_counter", lambda: clock[0])
    dispatcher.register(WriteTool)
    task = asyncio.create_task(dispatcher.dispatch(write(), session, turn_id="t"))
    requested = await publisher.wait_for("tool.confirmation_requested")
    clock[0] += 120.0  # the person takes two minutes to answer
    dispatcher.broker.resolve(requested.data["request_id"], "allow", resolved_by="slowpoke")
    await task
    assert publisher.first("tool.completed").data["duration_ms"] == 0


# -- "allow for session" on the shell: scoped to program + subcommand + rating --


def shell(tool_use_id: str, command: str, **extra: object) -> ToolUseBlock:
    return ToolUseBlock(id=tool_use_id, name="shell", input={"command": command, **extra})


async def _grant(
    dispatcher: ToolDispatcher,
    publisher: RecordingPublisher,
    session: DispatchSession,
    call: ToolUseBlock,
    count: int,
) -> dict[str, object]:
    """Dispatch ``call``, answer its request with allow-for-session; its event data."""
    task = asyncio.create_task(dispatcher.dispatch(call, session, turn_id="t"))
    requested = await publisher.wait_for("tool.confirmation_requested", count)
    dispatcher.broker.resolve(
        requested.data["request_id"], "allow", scope="session", resolved_by="alice"
    )
    assert not (await task).is_error
    return requested.data


async def _asks(
    dispatcher: ToolDispatcher,
    publisher: RecordingPublisher,
    session: DispatchSession,
    call: ToolUseBlock,
) -> bool:
    """Whether ``call`` asks; a request is denied so the test moves on."""
    task = asyncio.create_task(dispatcher.dispatch(call, session, turn_id="t"))
    while not task.done():
        pending = dispatcher.broker.pending(session.session_id)
        if pending:
            dispatcher.broker.resolve(pending[0].request_id, "deny", resolved_by="alice")
            await task
            return True
        await asyncio.sleep(0.005)
    await task
    return False


async def test_a_session_grant_covers_that_program_and_subcommand_only(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(DryShell)
    data = await _grant(dispatcher, publisher, session, shell("tu_1", "npm test"), 1)
    assert data["scope_text"] == "allow 'npm test' for this session (commands rated dev or lower)"
    assert not await _asks(dispatcher, publisher, session, shell("tu_2", "npm test -- --ci"))
    assert await _asks(dispatcher, publisher, session, shell("tu_3", "npm publish"))
    assert await _asks(dispatcher, publisher, session, shell("tu_4", "npm test && rm -rf x"))
    # The same program and subcommand with env set is another grant.
    env_call = shell("tu_5", "npm test", env={"NODE_ENV": "ci"})
    assert await _asks(dispatcher, publisher, session, env_call)
    assert "tool.called" in publisher.types("tu_2")
    assert "tool.called" not in publisher.types("tu_3")


async def test_a_grant_holds_at_its_rating_or_lower(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(DryShell)
    # No sandbox here, so even `ls` (safe) asks the first time.
    data = await _grant(dispatcher, publisher, session, shell("tu_1", "ls"), 1)
    assert data["scope_text"] == "allow 'ls' for this session (commands rated safe or lower)"
    assert not await _asks(dispatcher, publisher, session, shell("tu_2", "ls -la src"))
    # Still `ls`, but reading outside the workspace: dangerous > safe.
    assert await _asks(dispatcher, publisher, session, shell("tu_3", "ls /etc"))
    # Each simple command must be covered: `ls && rm x` is not covered by `ls`.
    assert await _asks(dispatcher, publisher, session, shell("tu_4", "ls && rm x"))
    assert await _asks(dispatcher, publisher, session, shell("tu_5", "ls | xargs cat"))


async def test_a_grant_of_a_list_covers_each_of_its_parts(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(DryShell)
    data = await _grant(dispatcher, publisher, session, shell("tu_1", "ls && pytest -q"), 1)
    assert data["scope_text"] == (
        "allow 'ls' (rated safe or lower), 'pytest' (rated dev or lower) for this session"
    )
    assert not await _asks(dispatcher, publisher, session, shell("tu_2", "pytest tests"))
    assert not await _asks(dispatcher, publisher, session, shell("tu_3", "ls; pytest"))
    assert await _asks(dispatcher, publisher, session, shell("tu_4", "git status"))


async def test_other_tools_keep_the_per_tool_grant(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(WriteTool)
    dispatcher.register(DryShell)
    await _grant(dispatcher, publisher, session, write("tu_1"), 1)
    assert not await _asks(dispatcher, publisher, session, write("tu_2", "other.txt"))
    # A write grant is not a shell grant.
    assert await _asks(dispatcher, publisher, session, shell("tu_3", "ls"))


async def test_the_preview_shows_the_whole_command_and_env_first(
    dispatcher: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    dispatcher.register(DryShell)
    # Longer than the preview limit: the command must still be seen whole, and
    # so must the env that follows it (a harmless echo hiding its tail).
    command = "echo " + "a" * (PREVIEW_CHARS + 500) + " ; rm -rf build"
    call = shell("tu_1", command, env={"HOME": "/tmp/crafted"})
    task = asyncio.create_task(dispatcher.dispatch(call, session, turn_id="t"))
    requested = await publisher.wait_for("tool.confirmation_requested")
    text = requested.data["preview"]["text"]
    assert requested.data["preview"]["kind"] == "command"
    assert text.startswith(f"$ {command}\nenv:\n  HOME=/tmp/crafted")
    assert requested.data["rating"] == "dangerous"
    dispatcher.broker.resolve(requested.data["request_id"], "deny", resolved_by="a")
    assert (await task).is_error
