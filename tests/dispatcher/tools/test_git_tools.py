"""git_status, git_diff, git_log, git_commit, git_branch against real repositories."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatcher import (
    ToolExecutionError,
    ToolPermissionDenied,
    ToolValidationFailed,
    WorkspaceEscape,
    WorkspaceFileAPI,
)
from dispatcher.tools import GitBranchTool, GitCommitTool, GitDiffTool, GitLogTool, GitStatusTool
from tests.dispatcher.tools.support import git, run_tool, text_of


def _exists(path: Path) -> bool:
    return path.exists()


@pytest.fixture
def repo(root: Path) -> Path:
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("# Project\n")
    (root / "app.py").write_text("x = 1\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial commit")
    return root


async def test_outside_a_repository(ws: WorkspaceFileAPI) -> None:
    for tool, args in (
        (GitStatusTool, {}),
        (GitDiffTool, {}),
        (GitLogTool, {}),
        (GitCommitTool, {"message": "x", "all": True}),
        (GitBranchTool, {}),
    ):
        with pytest.raises(ToolExecutionError, match="not a git repository"):
            await run_tool(tool, args, ws)


async def test_repository_above_the_workspace_is_not_used(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    (outer / "inner").mkdir(parents=True)
    git(outer, "init", "-q")
    (outer / "outside-file.txt").write_text("x")
    ws = WorkspaceFileAPI(outer / "inner")
    with pytest.raises(ToolExecutionError, match="not a git repository"):
        await run_tool(GitStatusTool, {}, ws)


async def test_status_structured(repo: Path, ws: WorkspaceFileAPI) -> None:
    clean = await run_tool(GitStatusTool, {}, ws)
    assert clean.data["clean"] is True
    assert clean.data["branch"]["head"] == "main"
    assert text_of(clean) == "branch: main\nworking tree clean"
    (repo / "app.py").write_text("x = 2\n")
    (repo / "new.txt").write_text("n\n")
    (repo / "staged.txt").write_text("s\n")
    git(repo, "add", "staged.txt")
    git(repo, "mv", "README.md", "README.rst")
    out = await run_tool(GitStatusTool, {}, ws)
    entries = {e["path"]: e for e in out.data["entries"]}
    assert (
        entries["app.py"]["worktree"] == "modified" and entries["app.py"]["index"] == "unmodified"
    )
    assert entries["staged.txt"]["index"] == "added"
    assert entries["new.txt"]["kind"] == "untracked"
    assert entries["README.rst"]["kind"] == "renamed"
    assert entries["README.rst"]["orig_path"] == "README.md"
    text = text_of(out)
    assert "unstaged modified: app.py" in text and "untracked: new.txt" in text
    assert "staged renamed: README.md -> README.rst" in text


async def test_status_of_a_fresh_repository(root: Path, ws: WorkspaceFileAPI) -> None:
    git(root, "init", "-q", "-b", "trunk")
    (root / "a.txt").write_text("a")
    out = await run_tool(GitStatusTool, {}, ws)
    assert out.data["branch"] == {
        "head": "trunk",
        "oid": None,
        "upstream": None,
        "ahead": None,
        "behind": None,
    }
    assert "(no commits yet)" in text_of(out)


async def test_status_does_not_run_configured_programs(repo: Path, ws: WorkspaceFileAPI) -> None:
    # A planted fsmonitor hook would run on every `git status`; ours overrides it.
    marker = repo.parent / "fsmonitor-ran"
    hook = repo.parent / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    git(repo, "config", "core.fsmonitor", str(hook))
    out = await run_tool(GitStatusTool, {}, ws)
    assert out.data["clean"] is True
    assert not marker.exists()


async def test_diff_unstaged_staged_and_ref(repo: Path, ws: WorkspaceFileAPI) -> None:
    (repo / "app.py").write_text("x = 2\ny = 3\n")
    out = await run_tool(GitDiffTool, {}, ws)
    assert "-x = 1\n+x = 2\n+y = 3\n" in text_of(out)
    assert out.data["files"] == [
        {"path": "app.py", "old_path": None, "added": 2, "removed": 1, "binary": False}
    ]
    staged = await run_tool(GitDiffTool, {"staged": True}, ws)
    assert text_of(staged) == "(no changes)" and staged.data["files"] == []
    git(repo, "add", "app.py")
    staged = await run_tool(GitDiffTool, {"staged": True}, ws)
    assert "+y = 3" in text_of(staged)
    git(repo, "commit", "-q", "-m", "second")
    against = await run_tool(GitDiffTool, {"ref": "HEAD~1", "path": "app.py"}, ws)
    assert "+y = 3" in text_of(against)
    ranged = await run_tool(GitDiffTool, {"ref": "HEAD~1..HEAD", "context_lines": 0}, ws)
    assert "@@ -1 +1,2 @@" in text_of(ranged)


async def test_diff_binary_and_rename(repo: Path, ws: WorkspaceFileAPI) -> None:
    (repo / "img.bin").write_bytes(b"\x00\x01\x02")
    git(repo, "add", "img.bin")
    git(repo, "mv", "app.py", "main.py")
    out = await run_tool(GitDiffTool, {"staged": True}, ws)
    files = {f["path"]: f for f in out.data["files"]}
    assert files["img.bin"]["binary"] is True
    assert files["main.py"]["old_path"] == "app.py"


async def test_diff_output_is_capped(repo: Path, ws: WorkspaceFileAPI) -> None:
    (repo / "app.py").write_text("".join(f"line {i}\n" for i in range(20_000)))
    out = await run_tool(GitDiffTool, {}, ws, options={"max_output_bytes": 4096})
    assert out.metadata["truncated"] is True
    assert "bytes omitted" in text_of(out)
    assert out.data["files"][0]["added"] == 20_000


@pytest.mark.parametrize("ref", ["--output=/tmp/pwned", "-p", "HEAD\nmain", "a b"])
async def test_refs_cannot_be_options(repo: Path, ws: WorkspaceFileAPI, ref: str) -> None:
    with pytest.raises(ToolValidationFailed):
        await run_tool(GitDiffTool, {"ref": ref}, ws)
    with pytest.raises(ToolValidationFailed):
        await run_tool(GitLogTool, {"ref": ref}, ws)
    assert not _exists(Path("/tmp/pwned"))


async def test_unknown_ref_is_a_clear_error(repo: Path, ws: WorkspaceFileAPI) -> None:
    with pytest.raises(ToolExecutionError, match="git diff failed"):
        await run_tool(GitDiffTool, {"ref": "no-such-branch"}, ws)


@pytest.mark.parametrize("path", ["..", "/etc", "link"])
async def test_paths_are_confined(
    repo: Path, ws: WorkspaceFileAPI, outside: Path, path: str
) -> None:
    (repo / "link").symlink_to(outside)
    with pytest.raises(WorkspaceEscape):
        await run_tool(GitDiffTool, {"path": path}, ws)
    with pytest.raises(WorkspaceEscape):
        await run_tool(GitLogTool, {"path": path}, ws)
    with pytest.raises(WorkspaceEscape):
        await run_tool(GitCommitTool, {"message": "m", "paths": [path]}, ws)


async def test_log(repo: Path, ws: WorkspaceFileAPI) -> None:
    (repo / "app.py").write_text("x = 2\n")
    git(repo, "commit", "-q", "-am", "change x\n\nWith a body line.")
    (repo / "README.md").write_text("# Changed\n")
    git(repo, "commit", "-q", "-am", "docs")
    out = await run_tool(GitLogTool, {}, ws)
    commits = out.data["commits"]
    assert [c["subject"] for c in commits] == ["docs", "change x", "initial commit"]
    assert commits[1]["body"] == "With a body line."
    assert len(commits[0]["sha"]) == 40 and commits[0]["parents"] == [commits[1]["sha"]]
    only = await run_tool(GitLogTool, {"path": "app.py", "max_count": 5}, ws)
    assert [c["subject"] for c in only.data["commits"]] == ["change x", "initial commit"]
    one = await run_tool(GitLogTool, {"max_count": 1, "ref": "HEAD~1"}, ws)
    assert [c["subject"] for c in one.data["commits"]] == ["change x"]


async def test_log_of_empty_repository(root: Path, ws: WorkspaceFileAPI) -> None:
    git(root, "init", "-q")
    out = await run_tool(GitLogTool, {}, ws)
    assert out.data["commits"] == [] and text_of(out) == "(no commits yet)"


async def test_commit_paths_all_and_nothing(repo: Path, ws: WorkspaceFileAPI) -> None:
    with pytest.raises(ToolExecutionError, match="nothing to commit"):
        await run_tool(GitCommitTool, {"message": "empty"}, ws)
    (repo / "app.py").write_text("x = 3\n")
    (repo / "other.txt").write_text("o\n")
    out = await run_tool(GitCommitTool, {"message": "only app", "paths": ["app.py"]}, ws)
    assert out.data["files"] == [{"status": "M", "path": "app.py"}]
    assert out.data["branch"] == "main" and len(out.data["sha"]) == 40
    assert git(repo, "log", "-1", "--format=%s").strip() == "only app"
    everything = await run_tool(GitCommitTool, {"message": "rest", "all": True}, ws)
    assert everything.data["files"] == [{"status": "A", "path": "other.txt"}]
    assert git(repo, "status", "--porcelain") == ""


async def test_commit_without_identity_uses_fallback(
    repo: Path, ws: WorkspaceFileAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tool runs git without the test's GIT_AUTHOR_* variables; with no
    # user.email configured it falls back to the configured/default identity.
    home = tmp_path / "empty-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # no ~/.gitconfig identity
    (repo / "app.py").write_text("x = 4\n")
    await run_tool(
        GitCommitTool,
        {"message": "by agent", "all": True},
        ws,
        options={"author_name": "Agent", "author_email": "agent@example.invalid"},
    )
    assert git(repo, "log", "-1", "--format=%an <%ae>").strip() == "Agent <agent@example.invalid>"
    git(repo, "config", "user.email", "me@example.invalid")
    git(repo, "config", "user.name", "Me")
    (repo / "app.py").write_text("x = 5\n")
    await run_tool(GitCommitTool, {"message": "by me", "all": True}, ws)
    assert git(repo, "log", "-1", "--format=%an <%ae>").strip() == "Me <me@example.invalid>"


async def test_commit_runs_no_hooks(repo: Path, ws: WorkspaceFileAPI) -> None:
    marker = repo.parent / "hook-ran"
    hook = repo / ".git/hooks/pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    hook.chmod(0o755)
    (repo / "app.py").write_text("x = 9\n")
    await run_tool(GitCommitTool, {"message": "no hooks", "all": True}, ws)
    assert not marker.exists()


async def test_commit_refuses_git_internals(repo: Path, ws: WorkspaceFileAPI) -> None:
    with pytest.raises(ToolPermissionDenied):
        await run_tool(GitCommitTool, {"message": "m", "paths": [".git/config"]}, ws)


async def test_branches(repo: Path, ws: WorkspaceFileAPI) -> None:
    listed = await run_tool(GitBranchTool, {}, ws)
    assert [b["name"] for b in listed.data["branches"]] == ["main"]
    assert listed.data["branches"][0]["current"] is True
    await run_tool(GitBranchTool, {"action": "create", "name": "feature/x"}, ws)
    switched = await run_tool(GitBranchTool, {"action": "switch", "name": "feature/x"}, ws)
    assert switched.data["files_changed"] == []
    (repo / "app.py").write_text("x = 100\n")
    git(repo, "commit", "-q", "-am", "on feature")
    back = await run_tool(GitBranchTool, {"action": "switch", "name": "main"}, ws)
    assert back.data["files_changed"] == ["app.py"]
    assert back.files_modified == ["app.py"]
    assert (repo / "app.py").read_text() == "x = 1\n"
    with pytest.raises(ToolExecutionError, match=r"git branch failed: error: .*not fully merged"):
        await run_tool(GitBranchTool, {"action": "delete", "name": "feature/x"}, ws)
    await run_tool(GitBranchTool, {"action": "create", "name": "old", "start_point": "HEAD"}, ws)
    await run_tool(GitBranchTool, {"action": "delete", "name": "old"}, ws)
    names = [b["name"] for b in (await run_tool(GitBranchTool, {}, ws)).data["branches"]]
    assert names == ["feature/x", "main"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"action": "create"}, "needs a branch name"),
        ({"action": "create", "name": "-D"}, "must not start with '-'"),
        ({"action": "create", "name": "bad..name"}, "not a valid branch name"),
        ({"action": "create", "name": "ok", "start_point": "--all"}, "not an option"),
    ],
)
async def test_branch_bad_input(
    repo: Path, ws: WorkspaceFileAPI, args: dict[str, str], message: str
) -> None:
    with pytest.raises(ToolValidationFailed, match=message):
        await run_tool(GitBranchTool, args, ws)


async def test_write_tool_previews(repo: Path, ws: WorkspaceFileAPI) -> None:
    preview = await GitCommitTool().preview({"message": "m", "paths": ["app.py"]}, ws)
    assert "git commit -m 'm'" in preview.text and "app.py" in preview.text
    branch = await GitBranchTool().preview({"action": "switch", "name": "dev"}, ws)
    assert branch.text == "git branch: switch 'dev'"
