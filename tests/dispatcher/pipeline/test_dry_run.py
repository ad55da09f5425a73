"""Dry-run summaries and planned actions."""

from __future__ import annotations

from dispatcher.pipeline.dry_run import PlannedAction, is_planned, plan_summary, recorded_message
from protocol.canonical import SideEffects

W, X, N = SideEffects.WRITE, SideEffects.EXECUTE, SideEffects.NETWORK


def test_human_summaries_of_the_built_in_tools() -> None:
    content = "".join(f"{i}\n" for i in range(12))
    assert plan_summary("write_file", {"path": "notes/a.txt", "content": content}, W) == (
        "write_file notes/a.txt (+12 lines)"
    )
    assert plan_summary("write_file", {"path": "a", "content": "x", "mode": "append"}, W) == (
        "write_file a (append, +1 lines)"
    )
    assert plan_summary("shell", {"command": "npm test"}, X) == "shell: npm test"
    assert plan_summary("run_command", {"command": "make\nmake install", "cwd": "sub"}, X) == (
        "shell: make … (in sub)"
    )
    patch = "".join(f"--- a/f{i}\n+++ b/f{i}\n@@ -1 +1 @@\n-a\n+b\n" for i in range(3))
    assert plan_summary("apply_patch", {"patch": patch}, W) == "apply_patch: 3 files (f0, f1, f2)"
    assert plan_summary("apply_patch", {"patch": "nonsense"}, W) == (
        "apply_patch: (unreadable patch)"
    )
    assert plan_summary("delete_file", {"path": "x"}, W) == "delete_file x"
    assert plan_summary("git_commit", {"message": "Fix it\n\nbody"}, W) == 'git_commit "Fix it …"'
    assert plan_summary("patch_file", {"path": "p.py", "old_str": "a", "new_str": "b\nc"}, W) == (
        "patch_file p.py (+2 -1 lines)"
    )


def test_other_tools_are_shown_as_a_call_and_long_summaries_are_cut() -> None:
    text = plan_summary("mcp_github_create_issue", {"title": "Bug", "labels": ["a"]}, N)
    assert text == 'mcp_github_create_issue(title="Bug", labels=["a"])'
    long = plan_summary("plugin_x", {"blob": "y" * 500, **{f"k{i}": i for i in range(40)}}, W)
    assert len(long) == 200 and long.endswith("…")


def test_planned_actions() -> None:
    assert is_planned(W) and is_planned(X) and is_planned(N)
    assert not is_planned(SideEffects.READ) and not is_planned(SideEffects.NONE)
    action = PlannedAction("tu_1", "shell", "shell: ls", {"command": "ls"})
    assert action.as_dict() == {
        "tool_use_id": "tu_1", "tool_name": "shell", "summary": "shell: ls",
        "input": {"command": "ls"}, "needs_confirmation": False,
    }  # fmt: skip
    assert "shell: ls" in recorded_message(action)
