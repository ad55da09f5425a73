"""Dry-run summaries (declared by each tool with its effects) and planned actions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dispatcher.pipeline.dry_run import PlannedAction, is_planned, plan_summary, recorded_message
from dispatcher.tool import BaseTool, ToolEffects
from dispatcher.tools import (
    ApplyPatchTool,
    DeleteFileTool,
    GitCommitTool,
    PatchFileTool,
    RunCommandTool,
    ShellTool,
    WriteFileTool,
)
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects, ToolDefinition

W, X, N = SideEffects.WRITE, SideEffects.EXECUTE, SideEffects.NETWORK


@pytest.fixture
def ws(tmp_path: Path) -> WorkspaceFileAPI:
    return WorkspaceFileAPI(tmp_path)


async def summary(tool: BaseTool, input: dict[str, Any], ws: WorkspaceFileAPI) -> str:
    return plan_summary(await tool.effects(input, ws))


async def test_human_summaries_of_the_built_in_tools(ws: WorkspaceFileAPI) -> None:
    content = "".join(f"{i}\n" for i in range(12))
    assert await summary(WriteFileTool(), {"path": "notes/a.txt", "content": content}, ws) == (
        "write_file notes/a.txt (+12 lines)"
    )
    appended = {"path": "a", "content": "x", "mode": "append"}
    assert await summary(WriteFileTool(), appended, ws) == "write_file a (append, +1 lines)"
    assert await summary(ShellTool(), {"command": "npm test"}, ws) == "shell: npm test"
    two_lines = {"command": "make\nmake install", "cwd": "sub"}
    assert await summary(RunCommandTool(), two_lines, ws) == "run_command: make … (in sub)"
    patch = "".join(f"--- a/f{i}\n+++ b/f{i}\n@@ -1 +1 @@\n-a\n+b\n" for i in range(3))
    assert await summary(ApplyPatchTool(), {"patch": patch}, ws) == (
        "apply_patch: 3 files (f0, f1, f2)"
    )
    assert await summary(ApplyPatchTool(), {"patch": "nonsense"}, ws) == (
        "apply_patch: (unreadable patch)"
    )
    assert await summary(DeleteFileTool(), {"path": "x"}, ws) == "delete_file x"
    commit = {"message": "Fix it\n\nbody"}
    assert await summary(GitCommitTool(), commit, ws) == 'git_commit "Fix it …"'
    edit = {"path": "p.py", "old_str": "a", "new_str": "b\nc"}
    assert await summary(PatchFileTool(), edit, ws) == "patch_file p.py (+2 -1 lines)"


class _Plugin(BaseTool):
    definition = ToolDefinition(
        name="mcp_github_create_issue",
        description="x",
        input_schema={"type": "object", "properties": {}},
        side_effects=N,
    )


async def test_other_tools_are_shown_as_a_call_and_long_summaries_are_cut(
    ws: WorkspaceFileAPI,
) -> None:
    effects = await _Plugin().effects({"title": "Bug", "labels": ["a"]}, ws)
    assert effects.unknown
    assert plan_summary(effects) == 'mcp_github_create_issue(title="Bug", labels=["a"])'
    long = plan_summary(
        await _Plugin().effects({"blob": "y" * 500, **{f"k{i}": i for i in range(40)}}, ws)
    )
    assert len(long) == 200 and long.endswith("…")
    assert plan_summary(ToolEffects(summary="x" * 300)) == "x" * 199 + "…"


def test_planned_actions() -> None:
    assert is_planned(W) and is_planned(X) and is_planned(N)
    assert not is_planned(SideEffects.READ) and not is_planned(SideEffects.NONE)
    action = PlannedAction("tu_1", "shell", "shell: ls", {"command": "ls"})
    assert action.as_dict() == {
        "tool_use_id": "tu_1", "tool_name": "shell", "summary": "shell: ls",
        "input": {"command": "ls"}, "needs_confirmation": False,
    }  # fmt: skip
    assert "shell: ls" in recorded_message(action)
