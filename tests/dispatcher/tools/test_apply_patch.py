"""apply_patch: multi-hunk, multi-file, fallback to GNU patch, all-or-nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dispatcher import (
    ToolExecutionError,
    ToolPermissionDenied,
    WorkspaceEscape,
    WorkspaceFileAPI,
)
from dispatcher.tools import ApplyPatchTool
from dispatcher.tools.patch.apply_patch import _commit, _Plan
from tests.dispatcher.tools.support import run_tool, text_of

NUMBERS = "".join(f"{i}\n" for i in range(1, 21))


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


async def test_multi_hunk_single_file(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "n.txt").write_text(NUMBERS)
    patch = (
        "--- a/n.txt\n+++ b/n.txt\n"
        "@@ -2,3 +2,3 @@\n 2\n-3\n+three\n 4\n"
        "@@ -15,3 +15,4 @@\n 15\n-16\n+sixteen\n+16.5\n 17\n"
    )
    out = await run_tool(ApplyPatchTool, {"patch": patch}, ws)
    expected = NUMBERS.replace("3\n", "three\n", 1).replace("16\n", "sixteen\n16.5\n")
    assert (root / "n.txt").read_text() == expected
    assert out.metadata["applier"] == "builtin"
    assert out.metadata["files"] == [
        {"path": "n.txt", "status": "modified", "hunks": 2, "added": 3, "removed": 2}
    ]
    assert out.files_modified == ["n.txt"]


async def test_multi_file_create_modify_delete(root: Path, ws_delete: WorkspaceFileAPI) -> None:
    (root / "src").mkdir()
    (root / "src/a.py").write_text("a = 1\n")
    (root / "old.txt").write_text("bye\n")
    patch = (
        "diff --git a/src/a.py b/src/a.py\n--- a/src/a.py\n+++ b/src/a.py\n"
        "@@ -1 +1 @@\n-a = 1\n+a = 2\n"
        "diff --git a/docs/new.md b/docs/new.md\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/docs/new.md\n@@ -0,0 +1,2 @@\n+# New\n+text\n"
        "diff --git a/old.txt b/old.txt\ndeleted file mode 100644\n"
        "--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
    )
    out = await run_tool(ApplyPatchTool, {"patch": patch}, ws_delete)
    assert (root / "src/a.py").read_text() == "a = 2\n"
    assert (root / "docs/new.md").read_text() == "# New\ntext\n"
    assert not (root / "old.txt").exists()
    statuses = {f["path"]: f["status"] for f in out.metadata["files"]}
    assert statuses == {"src/a.py": "modified", "docs/new.md": "created", "old.txt": "deleted"}
    assert text_of(out).startswith("Applied the patch with the built-in applier:")


async def test_headerless_hunk_needs_path(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "f.txt").write_text("a\nb\n")
    with pytest.raises(ToolExecutionError, match="give the path argument"):
        await run_tool(ApplyPatchTool, {"patch": "@@ -1,2 +1,2 @@\n a\n-b\n+c\n"}, ws)
    await run_tool(ApplyPatchTool, {"patch": "@@ -1,2 +1,2 @@\n a\n-b\n+c\n", "path": "f.txt"}, ws)
    assert (root / "f.txt").read_text() == "a\nc\n"


async def test_path_argument_limits_the_patch(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "f.txt").write_text("a\n")
    (root / "g.txt").write_text("a\n")
    patch = "--- a/g.txt\n+++ b/g.txt\n@@ -1 +1 @@\n-a\n+b\n"
    with pytest.raises(ToolExecutionError, match=r"touches 'g.txt'.*limits it to 'f.txt'"):
        await run_tool(ApplyPatchTool, {"patch": patch, "path": "f.txt"}, ws)
    assert (root / "g.txt").read_text() == "a\n"


async def test_falls_back_to_system_patch_for_fuzzy_context(
    root: Path, ws: WorkspaceFileAPI
) -> None:
    (root / "n.txt").write_text(NUMBERS.replace("7\n", "seven (edited)\n"))
    # The first context line no longer matches exactly; GNU patch accepts it with fuzz.
    patch = "--- a/n.txt\n+++ b/n.txt\n@@ -7,5 +7,5 @@\n 7\n 8\n-9\n+nine\n 10\n 11\n"
    out = await run_tool(ApplyPatchTool, {"patch": patch}, ws)
    assert out.metadata["applier"] == "system_patch"
    assert "hunk #1" in out.metadata["builtin_failure"]
    assert "fuzz" in out.metadata["patch_messages"]
    assert (root / "n.txt").read_text() == NUMBERS.replace("7\n", "seven (edited)\n").replace(
        "9\n", "nine\n", 1
    )


async def test_failing_hunk_leaves_every_file_untouched(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "a.txt").write_text(NUMBERS)
    (root / "b.txt").write_text(NUMBERS)
    before = _snapshot(root)
    patch = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n"
        "--- a/b.txt\n+++ b/b.txt\n@@ -1,3 +1,3 @@\n one\n-TWO\n+2\n three\n"
        "--- /dev/null\n+++ b/c.txt\n@@ -0,0 +1 @@\n+new\n"
    )
    with pytest.raises(ToolExecutionError) as info:
        await run_tool(ApplyPatchTool, {"patch": patch}, ws)
    assert "b.txt: hunk #1" in info.value.message
    assert "No file was changed" in info.value.message
    assert _snapshot(root) == before
    assert not (root / "c.txt").exists()


async def test_without_system_patch_the_error_says_so(
    root: Path, ws: WorkspaceFileAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    (root / "a.txt").write_text("x\n")
    with pytest.raises(ToolExecutionError, match="'patch' program is not installed"):
        await run_tool(
            ApplyPatchTool, {"patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-y\n+z\n"}, ws
        )


async def test_non_utf8_file_goes_through_system_patch(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "l.txt").write_bytes(b"caf\xe9\nline 2\n")
    patch = "--- a/l.txt\n+++ b/l.txt\n@@ -2 +2 @@\n-line 2\n+line two\n"
    out = await run_tool(ApplyPatchTool, {"patch": patch}, ws)
    assert out.metadata["applier"] == "system_patch"
    assert (root / "l.txt").read_bytes() == b"caf\xe9\nline two\n"


async def test_large_file_patch(root: Path, ws: WorkspaceFileAPI) -> None:
    body = "".join(f"row {i}\n" for i in range(300_000))
    (root / "big.txt").write_text(body)
    patch = (
        "--- a/big.txt\n+++ b/big.txt\n@@ -250000,3 +250000,3 @@\n"
        " row 249999\n-row 250000\n+ROW\n row 250001\n"
    )
    await run_tool(ApplyPatchTool, {"patch": patch}, ws)
    assert (root / "big.txt").read_text() == body.replace("row 250000\n", "ROW\n")


@pytest.mark.parametrize(
    "name", ["../outside/secret.txt", "/etc/hostname", "link/secret.txt", "a/../../x.txt"]
)
async def test_diff_paths_are_confined(
    root: Path, ws: WorkspaceFileAPI, outside: Path, name: str
) -> None:
    (root / "link").symlink_to(outside)
    (root / "ok.txt").write_text("top secret\n")
    patch = (
        "--- a/ok.txt\n+++ b/ok.txt\n@@ -1 +1 @@\n-top secret\n+changed\n"
        f"--- {name}\n+++ {name}\n@@ -1 +1 @@\n-top secret\n+pwned\n"
    )
    with pytest.raises(WorkspaceEscape):
        await run_tool(ApplyPatchTool, {"patch": patch}, ws)
    assert (outside / "secret.txt").read_text() == "top secret\n"
    assert (root / "ok.txt").read_text() == "top secret\n"


async def test_refuses_git_internals(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / ".git").mkdir()
    (root / ".git/config").write_text("[core]\n")
    patch = "--- a/.git/config\n+++ b/.git/config\n@@ -1 +1,2 @@\n [core]\n+fsmonitor=x\n"
    with pytest.raises(ToolPermissionDenied, match=r"\.git"):
        await run_tool(ApplyPatchTool, {"patch": patch}, ws)


async def test_delete_needs_permission(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "a.txt").write_text("a\n")
    (root / "b.txt").write_text("b\n")
    before = _snapshot(root)
    patch = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+A\n"
        "--- a/b.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-b\n"
    )
    with pytest.raises(ToolPermissionDenied, match=r"deletes b.txt.*no file was changed"):
        await run_tool(ApplyPatchTool, {"patch": patch}, ws)
    assert _snapshot(root) == before


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+x\n",
            "creates 'a.txt', but it already exists",
        ),
        ("--- a/zz.txt\n+++ b/zz.txt\n@@ -1 +1 @@\n-x\n+y\n", "does not exist"),
        ("--- a/d\n+++ b/d\n@@ -1 +1 @@\n-x\n+y\n", "is a directory"),
    ],
)
async def test_target_state_errors(
    root: Path, ws: WorkspaceFileAPI, patch: str, message: str
) -> None:
    (root / "a.txt").write_text("a\n")
    (root / "d").mkdir()
    with pytest.raises(ToolExecutionError, match=message):
        await run_tool(ApplyPatchTool, {"patch": patch}, ws)


async def test_preview_shows_resulting_diff_and_paths(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "n.txt").write_text(NUMBERS)
    patch = "--- a/n.txt\n+++ b/n.txt\n@@ -2,3 +2,3 @@\n 2\n-3\n+three\n 4\n"
    preview = await ApplyPatchTool().preview({"patch": patch}, ws)
    assert preview.kind == "diff"
    assert preview.projected_modifications == ("n.txt",)
    assert "-3\n+three\n" in preview.text
    assert (root / "n.txt").read_text() == NUMBERS


def test_commit_restores_written_files_when_a_later_write_fails(
    root: Path, ws: WorkspaceFileAPI
) -> None:
    (root / "a.txt").write_text("old a\n")
    (root / "blocker").write_text("a file where a folder is needed\n")
    plan = _Plan(
        before={"a.txt": b"old a\n", "b.txt": None, "blocker/c.txt": None},
        after={"a.txt": b"new a\n", "b.txt": b"new b\n", "blocker/c.txt": b"c\n"},
        applier="builtin",
    )
    with pytest.raises(ToolExecutionError, match="every file was restored"):
        _commit(ws, plan)
    assert (root / "a.txt").read_text() == "old a\n"
    assert not (root / "b.txt").exists()
    assert sorted(os.listdir(root)) == ["a.txt", "blocker"]


def test_commit_removes_folders_it_made_when_a_later_write_fails(
    root: Path, ws: WorkspaceFileAPI
) -> None:
    (root / "zblocker").write_text("a file where a folder is needed\n")
    plan = _Plan(
        before={"new/deep/x.txt": None, "zblocker/c.txt": None},
        after={"new/deep/x.txt": b"x\n", "zblocker/c.txt": b"c\n"},
        applier="builtin",
    )
    with pytest.raises(ToolExecutionError, match="every file was restored"):
        _commit(ws, plan)
    assert sorted(os.listdir(root)) == ["zblocker"]


async def test_patch_on_a_fifo_is_refused_without_blocking(
    root: Path, ws: WorkspaceFileAPI
) -> None:
    os.mkfifo(root / "pipe")
    patch = "--- a/pipe\n+++ b/pipe\n@@ -1 +1 @@\n-x\n+y\n"
    with pytest.raises(ToolExecutionError, match="not a regular file"):
        await run_tool(ApplyPatchTool, {"patch": patch}, ws)
