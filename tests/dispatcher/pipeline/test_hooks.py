"""Hooks run as real processes: the protocol (stdin JSON, TOOLRELAY_*
variables, exit codes, JSON stdout), timeouts, quoting of {file}, and the
sandbox."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from dispatcher.pipeline.hooks import (
    HookConfig,
    HookContext,
    HookEvent,
    HookRunner,
    HooksConfig,
    block_reason,
    final_input,
    format_post_hook_output,
)
from dispatcher.sandbox import Sandbox, SandboxConfig, probe

PRE, POST = HookEvent.PRE_TOOL_USE, HookEvent.POST_TOOL_USE


def runner(
    event: HookEvent, *hooks: dict[str, object], env: dict[str, str] | None = None
) -> HookRunner:
    config = HooksConfig.model_validate({event.value: list(hooks)})
    return HookRunner(config, base_env=env or {"PATH": os.defpath, "HOME": "/nonexistent"})


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return Path(os.path.realpath(root))


def ctx(ws: Path, **kw: object) -> HookContext:
    base: dict[str, object] = {
        "session_id": "sess_1",
        "workspace": str(ws),
        "tool_name": "write_file",
        "tool_input": {"path": "src/a.py", "content": "x"},
        "file": "src/a.py",
        "tool_use_id": "tu_1",
    }
    base.update(kw)
    return HookContext(**base)  # type: ignore[arg-type]


async def test_context_arrives_on_stdin_and_in_the_environment(ws: Path) -> None:
    hooks = runner(
        PRE,
        {"name": "dump", "command": "cat > stdin.json; env > env.txt"},
        env={"PATH": os.defpath, "HOME": "/nonexistent", "ANTHROPIC_API_KEY": "sk-secret"},
    )
    [result] = await hooks.run(PRE, ctx(ws), sandbox=None)
    assert (result.decision, result.exit_code) == ("allow", 0)
    got = json.loads((ws / "stdin.json").read_text())
    assert got["event"] == "pre_tool_use"
    assert got["tool_input"] == {"path": "src/a.py", "content": "x"}
    assert (got["session_id"], got["file"], got["tool_use_id"]) == ("sess_1", "src/a.py", "tu_1")
    env = dict(
        line.split("=", 1) for line in (ws / "env.txt").read_text().splitlines() if "=" in line
    )
    assert env["TOOLRELAY_EVENT"] == "pre_tool_use"
    assert env["TOOLRELAY_SESSION_ID"] == "sess_1"
    assert env["TOOLRELAY_TOOL_NAME"] == "write_file"
    assert json.loads(env["TOOLRELAY_TOOL_INPUT"]) == {"path": "src/a.py", "content": "x"}
    assert env["TOOLRELAY_FILE"] == "src/a.py"
    assert env["TOOLRELAY_WORKSPACE"] == str(ws)
    assert env["PWD"] == str(ws)
    assert "ANTHROPIC_API_KEY" not in env  # only a minimal environment is passed on
    assert result.event_data() == {
        "hook": "dump", "event": "pre_tool_use", "decision": "allow", "exit_code": 0,
        "duration_ms": result.duration_ms, "tool_use_id": "tu_1",
    }  # fmt: skip


async def test_json_stdout_gives_context_and_a_rewritten_input(ws: Path) -> None:
    reply = json.dumps({"additionalContext": "checked", "updatedInput": {"path": "b.py"}})
    hooks = runner(
        PRE,
        {"name": "rewrite", "command": f"echo '{reply}'"},
        # The second hook sees the rewritten input.
        {"name": "see", "command": "printf '%s' \"$TOOLRELAY_TOOL_INPUT\" > seen.json"},
    )
    results = await hooks.run(PRE, ctx(ws), sandbox=None)
    assert [r.decision for r in results] == ["allow", "allow"]
    assert results[0].additional_context == "checked"
    assert final_input(results, {"path": "a.py"}) == {"path": "b.py"}
    assert json.loads((ws / "seen.json").read_text()) == {"path": "b.py"}
    # Plain text on stdout is just output; a post hook cannot rewrite the input.
    plain = runner(POST, {"name": "p", "command": "echo hello"})
    [result] = await plain.run(POST, ctx(ws), sandbox=None)
    assert (result.additional_context, result.updated_input, result.output) == (None, None, "hello")
    post = runner(POST, {"name": "r", "command": f"echo '{reply}'"})
    [result] = await post.run(POST, ctx(ws), sandbox=None)
    assert result.updated_input is None
    assert format_post_hook_output([result]) == "[Hook r]: checked"


async def test_exit_2_blocks_a_pre_hook_and_stops_the_rest(ws: Path) -> None:
    hooks = runner(
        PRE,
        {"name": "guard", "command": "echo 'no secrets here' >&2; exit 2"},
        {"name": "later", "command": "touch later-ran"},
    )
    results = await hooks.run(PRE, ctx(ws), sandbox=None)
    blocked = block_reason(results)
    assert blocked is not None and blocked.name == "guard"
    assert blocked.reason == "no secrets here"
    assert blocked.blocked_by_data() == {"kind": "hook", "name": "guard"}
    assert len(results) == 1 and not (ws / "later-ran").exists()
    # The same exit in a post hook is only a warning.
    [post] = await runner(POST, {"name": "guard", "command": "exit 2"}).run(
        POST, ctx(ws), sandbox=None
    )
    assert post.decision == "error" and post.blocked_by_data() is None


async def test_a_failing_post_hook_is_reported_to_the_model(ws: Path) -> None:
    hooks = runner(
        POST,
        {"name": "python-lint", "command": "echo 'src/a.py:1:1: F401 unused' ; exit 1"},
        {"name": "ok", "command": "true"},
    )
    results = await hooks.run(POST, ctx(ws), sandbox=None)
    assert [(r.decision, r.exit_code) for r in results] == [("error", 1), ("allow", 0)]
    assert format_post_hook_output(results) == (
        "[Hook python-lint: FAILED (exit 1)]\nsrc/a.py:1:1: F401 unused"
    )


async def test_a_hook_past_its_timeout_is_killed_with_its_children(ws: Path) -> None:
    hooks = runner(
        POST, {"name": "slow", "command": "sleep 30 & echo $! > pid; wait", "timeout": 0.5}
    )
    [result] = await hooks.run(POST, ctx(ws), sandbox=None)
    assert (result.decision, result.timed_out, result.exit_code) == ("error", True, None)
    assert "FAILED (timed out)" in format_post_hook_output([result])
    pid = int((ws / "pid").read_text())
    for _ in range(50):  # SIGKILL was sent; give the kernel a moment, boundedly
        if _gone_or_zombie(pid):
            break
        await asyncio.sleep(0.02)
    assert _gone_or_zombie(pid)


def _gone_or_zombie(pid: int) -> bool:
    """Killed: no such process, or a zombie whose parent has not reaped it yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def test_the_file_placeholder_is_shell_quoted(ws: Path) -> None:
    hooks = runner(POST, {"name": "q", "command": "printf '%s' {file} > got.txt"})
    nasty = "a b;touch pwned.txt"
    await hooks.run(POST, ctx(ws, file=nasty), sandbox=None)
    assert (ws / "got.txt").read_text() == nasty
    assert not (ws / "pwned.txt").exists()


def test_matcher_and_file_patterns_select_hooks(tmp_path: Path) -> None:
    config = HooksConfig.model_validate(
        {
            "post_tool_use": [
                {"name": "lint", "command": "x", "matcher": "write_file|patch_file",
                 "file_patterns": ["*.py"]},
                {"name": "any-edit", "command": "x", "matcher": "write_file|apply_patch"},
                {"name": "all", "command": "x"},
            ]
        }
    )  # fmt: skip
    hooks = HookRunner(config, base_env={})

    def names(**kw: object) -> list[str]:
        return [h.name for h in hooks.matching(POST, ctx(tmp_path, **kw))]

    assert names() == ["lint", "any-edit", "all"]
    assert names(file="README.md") == ["any-edit", "all"]
    assert names(tool_name="patch_file", file="deep/x.py") == ["lint", "all"]
    assert names(tool_name="write_file_extra") == ["all"]  # the matcher matches the whole name
    assert names(tool_name=None, file=None) == ["all"]
    assert hooks.matching(PRE, ctx(tmp_path)) == []


def test_bad_hook_config_names_the_problem() -> None:
    with pytest.raises(ValueError, match=r"matcher '\(' is not a valid regular expression"):
        HookConfig.model_validate({"name": "h", "command": "x", "matcher": "("})
    with pytest.raises(ValueError, match="unknown_event"):
        HooksConfig.model_validate({"unknown_event": []})


BWRAP_OK = shutil.which("bwrap") is not None and probe()[0] is not None


@pytest.mark.skipif(not BWRAP_OK, reason="bubblewrap does not work here")
async def test_hooks_run_in_the_sandbox(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    sandbox = Sandbox(SandboxConfig(bwrap), str(ws))
    hooks = runner(POST, {"name": "escape", "command": f"echo x > {outside}/f; touch inside"})
    [result] = await hooks.run(POST, ctx(ws), sandbox=sandbox)
    assert result.exit_code == 0  # the last command (inside the workspace) worked
    assert (ws / "inside").exists()
    assert not (outside / "f").exists()  # the host outside the workspace is out of reach
    # The control: without the sandbox the same hook writes there.
    await hooks.run(POST, ctx(ws), sandbox=None)
    assert (outside / "f").exists()


async def test_a_large_input_neither_stalls_nor_breaks_the_environment(ws: Path) -> None:
    big = {"path": "big.py", "content": "x" * (1024 * 1024)}
    hooks = runner(
        PRE,
        {"name": "ignores-stdin", "command": "printf '%s' \"$TOOLRELAY_TOOL_INPUT\" > env.json"},
        {"name": "reads-stdin", "command": "wc -c > size.txt", "timeout": 10},
    )
    results = await hooks.run(PRE, ctx(ws, tool_input=big), sandbox=None)
    # The first hook never reads its 1 MiB stdin and still ends at once, allowed.
    assert [(r.decision, r.timed_out) for r in results] == [("allow", False), ("allow", False)]
    shown = json.loads((ws / "env.json").read_text())
    assert shown["path"] == "big.py" and "on stdin" in shown["content"]
    assert int((ws / "size.txt").read_text()) > 1024 * 1024


async def test_post_hooks_run_once_per_modified_file(ws: Path) -> None:
    hooks = runner(
        POST,
        {"name": "lint", "command": "echo {file} >> linted.txt", "file_patterns": ["*.py"]},
    )
    results = await hooks.run_per_file(
        POST, ctx(ws, tool_name="apply_patch"), ["a.py", "README.md", "b c.py"], sandbox=None
    )
    assert [r.name for r in results] == ["lint", "lint"]
    assert (ws / "linted.txt").read_text().splitlines() == ["a.py", "b c.py"]
