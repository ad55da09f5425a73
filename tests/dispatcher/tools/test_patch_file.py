"""patch_file: exact, unique replacement; its errors; concurrent calls."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dispatcher import (
    ToolError,
    ToolExecutionError,
    ToolPermissionDenied,
    WorkspaceEscape,
    WorkspaceFileAPI,
)
from dispatcher.tools import PatchFileTool
from tests.dispatcher.tools.support import run_tool, text_of


async def test_replaces_and_returns_the_diff(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "m.py").write_text("def f(a, b):\n    return a + b\n")
    out = await run_tool(
        PatchFileTool,
        {"path": "m.py", "old_str": "    return a + b\n", "new_str": "    return a - b\n"},
        ws,
    )
    assert (root / "m.py").read_text() == "def f(a, b):\n    return a - b\n"
    diff = text_of(out)
    assert diff.startswith("--- a/m.py\n+++ b/m.py\n")
    assert "-    return a + b\n+    return a - b\n" in diff
    assert out.metadata["line"] == 2
    assert out.files_modified == ["m.py"]


async def test_not_found(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "m.py").write_text("x = 1\n")
    with pytest.raises(ToolExecutionError, match=r"old_str not found in 'm.py'"):
        await run_tool(PatchFileTool, {"path": "m.py", "old_str": "y", "new_str": "z"}, ws)


async def test_not_unique_lists_lines(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "m.py").write_text("x = 1\ny = 2\nx = 1\n\nx = 1\n")
    with pytest.raises(ToolExecutionError) as info:
        await run_tool(PatchFileTool, {"path": "m.py", "old_str": "x = 1", "new_str": "x"}, ws)
    assert "not unique in 'm.py': 3 matches, at lines 1, 3, 5" in info.value.message
    assert (root / "m.py").read_text() == "x = 1\ny = 2\nx = 1\n\nx = 1\n"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [("", "x", "must not be empty"), ("a", "a", "identical")],
)
async def test_bad_arguments(
    root: Path, ws: WorkspaceFileAPI, old: str, new: str, message: str
) -> None:
    (root / "m.py").write_text("a\n")
    with pytest.raises(ToolExecutionError, match=message):
        await run_tool(PatchFileTool, {"path": "m.py", "old_str": old, "new_str": new}, ws)


async def test_missing_binary_and_non_utf8(root: Path, ws: WorkspaceFileAPI) -> None:
    with pytest.raises(ToolExecutionError, match="does not exist"):
        await run_tool(PatchFileTool, {"path": "no.py", "old_str": "a", "new_str": "b"}, ws)
    (root / "b.bin").write_bytes(b"a\x00b")
    with pytest.raises(ToolExecutionError, match="looks binary"):
        await run_tool(PatchFileTool, {"path": "b.bin", "old_str": "a", "new_str": "b"}, ws)
    (root / "l.txt").write_bytes(b"caf\xe9")
    with pytest.raises(ToolExecutionError, match="not UTF-8"):
        await run_tool(PatchFileTool, {"path": "l.txt", "old_str": "caf", "new_str": "b"}, ws)
    assert (root / "l.txt").read_bytes() == b"caf\xe9"


async def test_unicode_and_large_file(root: Path, ws: WorkspaceFileAPI) -> None:
    body = "".join(f"line {i} \u2013 ünïcode\n" for i in range(200_000))  # ~5 MB
    (root / "big.txt").write_text(body)
    await run_tool(
        PatchFileTool,
        {"path": "big.txt", "old_str": "line 123456 \u2013 ", "new_str": "LINE 123456 \u2014 "},
        ws,
    )
    assert (root / "big.txt").read_text() == body.replace(
        "line 123456 \u2013 ", "LINE 123456 \u2014 "
    )


@pytest.mark.parametrize("path", ["../outside/secret.txt", "/etc/hostname", "link/secret.txt"])
async def test_escapes(root: Path, ws: WorkspaceFileAPI, outside: Path, path: str) -> None:
    (root / "link").symlink_to(outside)
    with pytest.raises(WorkspaceEscape):
        await run_tool(PatchFileTool, {"path": path, "old_str": "top", "new_str": "x"}, ws)
    assert (outside / "secret.txt").read_text() == "top secret\n"


async def test_refuses_git_internals(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    with pytest.raises(ToolPermissionDenied):
        await run_tool(
            PatchFileTool,
            {"path": ".git/config", "old_str": "[core]", "new_str": "[core]\nfsmonitor=x"},
            ws,
        )


async def test_preview_shows_the_diff_without_writing(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "m.py").write_text("a = 1\n")
    preview = await PatchFileTool().preview({"path": "m.py", "old_str": "1", "new_str": "2"}, ws)
    assert preview.kind == "diff" and "-a = 1\n+a = 2\n" in preview.text
    assert (root / "m.py").read_text() == "a = 1\n"


async def test_concurrent_distinct_patches_all_apply(root: Path, ws: WorkspaceFileAPI) -> None:
    n = 40
    (root / "c.txt").write_text("".join(f"slot {i}: empty\n" for i in range(n)))
    calls = [
        run_tool(
            PatchFileTool,
            {"path": "c.txt", "old_str": f"slot {i}: empty", "new_str": f"slot {i}: filled"},
            ws,
        )
        for i in range(n)
    ]
    results = await asyncio.gather(*calls)
    assert all(r.success for r in results)
    assert (root / "c.txt").read_text() == "".join(f"slot {i}: filled\n" for i in range(n))


async def test_concurrent_conflicting_patches_apply_once(root: Path, ws: WorkspaceFileAPI) -> None:
    # Every call wants to change the same text: one wins, the rest are refused cleanly.
    (root / "c.txt").write_text("head\nvalue = 0\ntail\n")
    calls = [
        run_tool(
            PatchFileTool, {"path": "c.txt", "old_str": "value = 0", "new_str": f"value = {i}"}, ws
        )
        for i in range(1, 21)
    ]
    results = await asyncio.gather(*calls, return_exceptions=True)
    applied = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, ToolError)]
    assert len(applied) == 1 and len(refused) == 19
    assert all("not found" in r.message for r in refused)
    text = (root / "c.txt").read_text()
    lines = text.splitlines()
    assert lines[0] == "head" and lines[2] == "tail" and len(lines) == 3
    assert lines[1] in {f"value = {i}" for i in range(1, 21)}


async def test_concurrent_chained_patches_on_large_file(root: Path, ws: WorkspaceFileAPI) -> None:
    # Large enough that the work runs in worker threads: the per-file lock must
    # still serialise the read-modify-write of each call.
    filler = "".join(f"filler {i}\n" for i in range(60_000))
    (root / "big.txt").write_text("start\n" + filler + "end 0\n")
    calls = [
        run_tool(
            PatchFileTool,
            {"path": "big.txt", "old_str": f"filler {i * 1000}\n", "new_str": f"patched {i}\n"},
            ws,
        )
        for i in range(30)
    ]
    await asyncio.gather(*calls)
    text = (root / "big.txt").read_text()
    for i in range(30):
        assert f"patched {i}\n" in text
        assert f"filler {i * 1000}\n" not in text
    assert text.count("\n") == 60_002
