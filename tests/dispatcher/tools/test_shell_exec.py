"""Layers 3 and 4 of the shell with real subprocesses: limits, streaming,
cwd confinement, environment, cancellation of whole process groups."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psutil
import pytest

from dispatcher import (
    ToolCancelled,
    ToolExecutionError,
    ToolPermissionDenied,
    ToolTimeout,
    ToolValidationFailed,
    WorkspaceEscape,
    WorkspaceFileAPI,
)
from dispatcher.tools import RunCommandTool, ShellTool
from tests.dispatcher.tools.support import OutputLog, make_context, run_tool, text_of


def _gone(pid: int) -> bool:
    """Dead, or a zombie nobody has reaped yet (it runs nothing)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


async def _wait_for(predicate: object, what: str, within: float = 60.0) -> None:
    assert callable(predicate)
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 - polls process state; no event exists
            await asyncio.sleep(0.01)


async def test_runs_and_reports_exit_code(ws: WorkspaceFileAPI) -> None:
    out = await run_tool(ShellTool, {"command": "echo hello; echo oops >&2"}, ws)
    assert out.success
    assert text_of(out) == "exit code: 0\nstdout:\nhello\nstderr:\noops"
    assert out.metadata["exit_code"] == 0 and out.metadata["rating"] == "safe"
    assert out.command_executed == "echo hello; echo oops >&2"
    failed = await run_tool(ShellTool, {"command": "echo partial; exit 3"}, ws)
    assert not failed.success and failed.metadata["exit_code"] == 3
    assert "partial" in text_of(failed)


async def test_run_command_is_the_same_tool(ws: WorkspaceFileAPI) -> None:
    assert RunCommandTool.definition.name == "run_command"
    assert RunCommandTool.definition.input_schema == ShellTool.definition.input_schema
    out = await run_tool(RunCommandTool, {"command": "echo alias"}, ws)
    assert "alias" in text_of(out)


async def test_stdin_is_devnull(ws: WorkspaceFileAPI) -> None:
    out = await run_tool(ShellTool, {"command": 'cat; read x; echo "got:[$x]"'}, ws)
    assert out.success and "got:[]" in text_of(out)


async def test_cwd_is_confined(root: Path, ws: WorkspaceFileAPI, outside: Path) -> None:
    (root / "sub").mkdir()
    out = await run_tool(ShellTool, {"command": "pwd", "cwd": "sub"}, ws)
    assert text_of(out).splitlines()[2] == str(root / "sub")
    (root / "link").symlink_to(outside)
    for cwd in ("..", "/tmp", "link"):
        with pytest.raises(WorkspaceEscape):
            await run_tool(ShellTool, {"command": "pwd", "cwd": cwd}, ws)
    (root / "file").write_text("x")
    with pytest.raises(ToolExecutionError, match="is not a folder"):
        await run_tool(ShellTool, {"command": "pwd", "cwd": "file"}, ws)


async def test_streams_in_order(ws: WorkspaceFileAPI) -> None:
    log = OutputLog()
    command = "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three; sleep 0.2; echo four >&2"
    out = await run_tool(ShellTool, {"command": command}, ws, emit=log)
    merged: list[tuple[str, str]] = []
    for stream, text in log.chunks:
        if merged and merged[-1][0] == stream:
            merged[-1] = (stream, merged[-1][1] + text)
        else:
            merged.append((stream, text))
    assert merged == [
        ("stdout", "one\n"),
        ("stderr", "two\n"),
        ("stdout", "three\n"),
        ("stderr", "four\n"),
    ]
    assert log.text("stdout") == "one\nthree\n"
    assert text_of(out).endswith("stdout:\none\nthree\nstderr:\ntwo\nfour")


async def test_output_keeps_head_and_tail(ws: WorkspaceFileAPI) -> None:
    log = OutputLog()
    out = await run_tool(
        ShellTool,
        {"command": "seq 1 100000"},
        ws,
        emit=log,
        options={"max_output_bytes": 1000, "max_stream_bytes": 2000},
    )
    total = sum(len(f"{i}\n") for i in range(1, 100_001))
    body = text_of(out)
    assert body.startswith("exit code: 0\nstdout:\n1\n2\n3\n")
    assert f"[... {total - 1000} bytes omitted ...]" in body
    assert body.endswith("99999\n100000")
    assert out.metadata["stdout_bytes"] == total
    assert out.metadata["truncated"] is True
    streamed = log.text("stdout")
    assert streamed.startswith("1\n2\n") and "[live output stopped after 2000 bytes" in streamed
    assert len(streamed) < 70_000  # stopped early, not the whole 589 kB


async def test_timeout_returns_partial_output(ws: WorkspaceFileAPI) -> None:
    with pytest.raises(ToolTimeout) as info:
        await run_tool(ShellTool, {"command": "echo started; sleep 30", "timeout": 1}, ws)
    assert "timed out after 1 s" in info.value.message
    assert info.value.partial_output is not None and "started" in info.value.partial_output


async def test_timeout_option_sets_the_default(ws: WorkspaceFileAPI) -> None:
    with pytest.raises(ToolExecutionError, match="between 1 and 600"):
        await run_tool(ShellTool, {"command": "true"}, ws, options={"timeout": 900})
    with pytest.raises(ToolTimeout, match=r"timed out after 1\.5 s"):
        await run_tool(ShellTool, {"command": "sleep 30"}, ws, options={"timeout": 1.5})
    # A call's own timeout wins over the option.
    out = await run_tool(
        ShellTool, {"command": "sleep 0.1", "timeout": 5}, ws, options={"timeout": 1}
    )
    assert out.success and out.metadata["timeout"] == 5


async def test_environment_is_scrubbed(
    ws: WorkspaceFileAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLRELAY_TEST_SECRET", "s3cret-value")
    out = await run_tool(ShellTool, {"command": "env", "env": {"EXTRA": "yes"}}, ws)
    assert "s3cret-value" not in text_of(out)
    assert "EXTRA=yes" in text_of(out)
    passed = await run_tool(
        ShellTool,
        {"command": "echo $TOOLRELAY_TEST_SECRET"},
        ws,
        options={"env_passthrough": ["TOOLRELAY_TEST_SECRET"]},
    )
    assert "s3cret-value" in text_of(passed)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PATH": "/tmp"}, "may not set PATH"),
        ({"LD_PRELOAD": "x.so"}, "may not set LD_PRELOAD"),
        ({"BASH_ENV": "x"}, "may not set BASH_ENV"),
        ({"GIT_SSH_COMMAND": "x"}, "may not set GIT_SSH_COMMAND"),
        ({"1BAD": "x"}, "not a valid variable name"),
        ({"OK": 5}, "must be a string"),
    ],
)
async def test_environment_additions_are_checked(
    ws: WorkspaceFileAPI, env: dict[str, object], message: str
) -> None:
    with pytest.raises(ToolValidationFailed, match=message):
        await run_tool(ShellTool, {"command": "true", "env": env}, ws)


async def test_blocked_command_never_runs(root: Path, ws: WorkspaceFileAPI) -> None:
    with pytest.raises(ToolPermissionDenied, match=r"blocklist refuses.*sudo"):
        await run_tool(ShellTool, {"command": "touch ran.txt; sudo ls"}, ws)
    assert not (root / "ran.txt").exists()


async def test_allowed_only_rejects_dangerous(root: Path, ws: WorkspaceFileAPI) -> None:
    options = {"allowed_only": True}
    with pytest.raises(ToolPermissionDenied, match="rated 'dangerous' and allowed_only is on"):
        await run_tool(ShellTool, {"command": "cp /dev/null made.txt"}, ws, options=options)
    assert not (root / "made.txt").exists()
    out = await run_tool(ShellTool, {"command": "ls"}, ws, options=options)
    assert out.success


async def test_preview_names_command_and_rating(ws: WorkspaceFileAPI) -> None:
    preview = await ShellTool().preview({"command": "pytest -q"}, ws)
    assert preview.kind == "command"
    assert preview.text == "$ pytest -q\n(in .; rated dev)"
    blocked = await ShellTool().preview({"command": "sudo ls"}, ws)
    assert "will be refused" in blocked.text


async def test_background_leftovers_are_killed(ws: WorkspaceFileAPI) -> None:
    out = await run_tool(ShellTool, {"command": "sleep 100 > /dev/null 2>&1 & echo $!"}, ws)
    pid = int(text_of(out).splitlines()[2])
    assert out.metadata["background_killed"] is False  # it did not hold the pipes
    await _wait_for(lambda: _gone(pid), "background sleep to die")


async def test_background_holding_the_pipe_does_not_hang(ws: WorkspaceFileAPI) -> None:
    out = await run_tool(ShellTool, {"command": "sleep 100 & echo $!"}, ws)
    pid = int(text_of(out).splitlines()[2])
    assert out.metadata["background_killed"] is True
    await _wait_for(lambda: _gone(pid), "background sleep to die")


async def _start(
    ws: WorkspaceFileAPI, command: str, **options: object
) -> tuple[ShellTool, asyncio.Task[object], OutputLog, asyncio.Event]:
    tool = ShellTool()
    log = OutputLog()
    event = asyncio.Event()
    ctx = make_context(ws, emit=log, cancel_event=event, options=options)
    task: asyncio.Task[object] = asyncio.ensure_future(tool.execute({"command": command}, ctx))
    await _wait_for(lambda: "ready" in log.text("stdout"), "the command to start")
    return tool, task, log, event


def _tree(tool: ShellTool) -> list[int]:
    assert tool._runner is not None and tool._runner.proc is not None
    leader = psutil.Process(tool._runner.proc.pid)
    return [leader.pid] + [p.pid for p in leader.children(recursive=True)]


async def test_cancel_kills_grandchildren_and_keeps_partial_output(ws: WorkspaceFileAPI) -> None:
    tool, task, _, event = await _start(ws, "echo ready; sh -c 'sleep 100 & sleep 100'; echo never")
    await _wait_for(lambda: len(_tree(tool)) >= 3, "sh and both sleeps")
    pids = _tree(tool)
    # What the dispatcher does: set the event, then call cancel().
    event.set()
    assert await tool.cancel() is True
    with pytest.raises(ToolCancelled) as info:
        await task
    assert info.value.partial_output is not None and "ready" in info.value.partial_output
    assert "never" not in info.value.partial_output
    await _wait_for(lambda: all(_gone(p) for p in pids), "every process of the group to die")
    assert await tool.cancel() is False  # idempotent: nothing left to stop


async def test_cancel_escalates_to_sigkill(ws: WorkspaceFileAPI) -> None:
    # The command and its children ignore SIGTERM; only SIGKILL stops them.
    tool, task, _, event = await _start(
        ws, "trap '' TERM; echo ready; sleep 100; echo never", kill_grace=0.3
    )
    pids = _tree(tool)
    event.set()
    with pytest.raises(ToolCancelled):
        await task
    await _wait_for(lambda: all(_gone(p) for p in pids), "the stubborn group to die")
    assert tool._runner is not None and tool._runner.proc is not None
    assert tool._runner.proc.returncode == -9


async def test_cancel_before_start(ws: WorkspaceFileAPI) -> None:
    event = asyncio.Event()
    event.set()
    with pytest.raises(ToolCancelled):
        await run_tool(ShellTool, {"command": "echo hi"}, ws, cancel_event=event)
    assert await ShellTool().cancel() is False


async def test_task_cancellation_kills_the_group(ws: WorkspaceFileAPI) -> None:
    # The dispatcher's own timeout cancels the task running execute().
    tool, task, _, _ = await _start(ws, "echo ready; sleep 100")
    pids = _tree(tool)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _wait_for(lambda: all(_gone(p) for p in pids), "the group to die")


async def test_many_concurrent_commands(ws: WorkspaceFileAPI) -> None:
    calls = [run_tool(ShellTool, {"command": f"echo {i}"}, ws) for i in range(20)]
    results = await asyncio.gather(*calls)
    assert [text_of(r).splitlines()[2] for r in results] == [str(i) for i in range(20)]


def test_no_process_leaks_from_this_module() -> None:
    me = psutil.Process(os.getpid())
    sleepers = [p for p in me.children(recursive=True) if "sleep" in " ".join(p.cmdline())]
    assert sleepers == []
