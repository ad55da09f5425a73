"""read_file, write_file and delete_file against a real temporary workspace."""

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
from dispatcher.tools import DeleteFileTool, ReadFileTool, WriteFileTool
from dispatcher.tools.common import git_guard
from tests.dispatcher.tools.support import run_tool, text_of


def _exists(path: Path) -> bool:
    return path.exists()


# -- read_file ------------------------------------------------------------------


async def test_read_whole_file(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "a.txt").write_text("one\ntwo\nthree\n")
    out = await run_tool(ReadFileTool, {"path": "a.txt"}, ws)
    assert text_of(out) == "one\ntwo\nthree\n"
    assert out.metadata["total_lines"] == 3
    assert out.metadata["truncated"] is False
    assert out.metadata["next_offset"] is None


async def test_read_line_range(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = await run_tool(ReadFileTool, {"path": "a.txt", "offset": 4, "limit": 3}, ws)
    assert text_of(out) == "line 4\nline 5\nline 6\n"
    assert (out.metadata["start_line"], out.metadata["end_line"]) == (4, 6)
    assert out.metadata["next_offset"] == 7


async def test_read_offset_past_end_is_a_clear_error(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "a.txt").write_text("only\n")
    with pytest.raises(ToolExecutionError, match=r"offset 5 is past the end.*1 lines"):
        await run_tool(ReadFileTool, {"path": "a.txt", "offset": 5}, ws)


async def test_read_truncates_at_max_chars_on_a_line_boundary(
    root: Path, ws: WorkspaceFileAPI
) -> None:
    (root / "big.txt").write_text("".join(f"{i:05d}\n" for i in range(1000)))
    out = await run_tool(ReadFileTool, {"path": "big.txt"}, ws, options={"max_chars": 60})
    body = text_of(out)
    assert body.startswith("00000\n00001\n")
    assert out.metadata["truncated"] is True
    assert out.metadata["end_line"] == 10
    assert out.metadata["next_offset"] == 11
    assert "continue with offset=11" in body


async def test_read_large_file(root: Path, ws: WorkspaceFileAPI) -> None:
    content = "".join(f"{i:08d} {'x' * 70}\n" for i in range(40_000))  # ~3.2 MB
    (root / "large.txt").write_text(content)
    # Above the 2 MiB default cap: read it in pages by following next_offset.
    pages: list[str] = []
    offset: int | None = 1
    for _ in range(10):
        if offset is None:
            break
        out = await run_tool(ReadFileTool, {"path": "large.txt", "offset": offset}, ws)
        assert out.metadata["total_lines"] == 40_000
        body = text_of(out)
        if out.metadata["truncated"]:
            body = body[: body.rindex("\n[truncated at")]
        pages.append(body)
        offset = out.metadata["next_offset"]
    assert len(pages) == 2
    assert "".join(pages) == content


async def test_read_empty_file(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "empty").write_text("")
    out = await run_tool(ReadFileTool, {"path": "empty"}, ws)
    assert text_of(out) == ""
    assert out.metadata["total_lines"] == 0


async def test_read_missing_file(ws: WorkspaceFileAPI) -> None:
    with pytest.raises(ToolExecutionError, match=r"'nope.txt' does not exist"):
        await run_tool(ReadFileTool, {"path": "nope.txt"}, ws)


async def test_read_directory(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "d").mkdir()
    with pytest.raises(ToolExecutionError, match="is a directory"):
        await run_tool(ReadFileTool, {"path": "d"}, ws)


async def test_read_binary_file(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "img.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(ToolExecutionError, match=r"looks binary.*NUL byte at offset 8"):
        await run_tool(ReadFileTool, {"path": "img.bin"}, ws)


async def test_read_non_utf8_file(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    with pytest.raises(ToolExecutionError, match=r"not UTF-8 text \(invalid byte 0xe9 at offset 3"):
        await run_tool(ReadFileTool, {"path": "latin1.txt"}, ws)


@pytest.mark.parametrize("path", ["../outside/secret.txt", "/etc/hostname", "link/secret.txt"])
async def test_read_escapes(root: Path, ws: WorkspaceFileAPI, outside: Path, path: str) -> None:
    (root / "link").symlink_to(outside)
    with pytest.raises(WorkspaceEscape):
        await run_tool(ReadFileTool, {"path": path}, ws)


# -- write_file -----------------------------------------------------------------


async def test_write_creates_with_parents(root: Path, ws: WorkspaceFileAPI) -> None:
    out = await run_tool(WriteFileTool, {"path": "a/b/c.txt", "content": "hi\n"}, ws)
    assert (root / "a/b/c.txt").read_text() == "hi\n"
    assert out.metadata["created"] is True
    assert out.files_modified == ["a/b/c.txt"]


async def test_write_overwrites_and_appends(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "f.txt").write_text("old\n")
    out = await run_tool(WriteFileTool, {"path": "f.txt", "content": "new\n"}, ws)
    assert out.metadata["created"] is False
    assert (root / "f.txt").read_text() == "new\n"
    await run_tool(WriteFileTool, {"path": "f.txt", "content": "more\n", "mode": "append"}, ws)
    assert (root / "f.txt").read_text() == "new\nmore\n"


async def test_write_keeps_file_mode(root: Path, ws: WorkspaceFileAPI) -> None:
    target = root / "run.sh"
    target.write_text("#!/bin/sh\n")
    target.chmod(0o755)
    await run_tool(WriteFileTool, {"path": "run.sh", "content": "#!/bin/sh\necho\n"}, ws)
    assert os.stat(target).st_mode & 0o777 == 0o755


async def test_write_without_parents_refuses(ws: WorkspaceFileAPI) -> None:
    with pytest.raises(ToolExecutionError, match="create_parents is false"):
        await run_tool(
            WriteFileTool, {"path": "x/y.txt", "content": "", "create_parents": False}, ws
        )


async def test_write_to_directory_refuses(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "d").mkdir()
    with pytest.raises(ToolExecutionError, match="is a directory"):
        await run_tool(WriteFileTool, {"path": "d", "content": "x"}, ws)


async def test_write_large_content(root: Path, ws: WorkspaceFileAPI) -> None:
    content = "y" * (5 * 1024 * 1024)
    out = await run_tool(WriteFileTool, {"path": "big.txt", "content": content}, ws)
    assert out.metadata["bytes_written"] == len(content)
    assert (root / "big.txt").stat().st_size == len(content)


async def test_write_append_to_non_utf8_keeps_bytes(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "l.txt").write_bytes(b"caf\xe9\n")
    await run_tool(WriteFileTool, {"path": "l.txt", "content": "ok\n", "mode": "append"}, ws)
    assert (root / "l.txt").read_bytes() == b"caf\xe9\nok\n"


async def test_write_refuses_git_internals(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / ".git").mkdir()
    with pytest.raises(ToolPermissionDenied, match=r"inside a .git directory"):
        await run_tool(WriteFileTool, {"path": ".git/config", "content": "[core]\n"}, ws)
    assert not (root / ".git/config").exists()


@pytest.mark.parametrize("path", ["../evil.txt", "/tmp/evil-toolrelay.txt", "link/evil.txt"])
async def test_write_escapes(root: Path, ws: WorkspaceFileAPI, outside: Path, path: str) -> None:
    (root / "link").symlink_to(outside)
    with pytest.raises(WorkspaceEscape):
        await run_tool(WriteFileTool, {"path": path, "content": "x"}, ws)
    assert not _exists(outside / "evil.txt")
    assert not _exists(Path("/tmp/evil-toolrelay.txt"))


async def test_write_preview_is_the_diff(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "f.txt").write_text("a\nb\n")
    preview = await WriteFileTool().preview({"path": "f.txt", "content": "a\nc\n"}, ws)
    assert preview.kind == "diff"
    assert preview.projected_modifications == ("f.txt",)
    assert "-b\n" in preview.text and "+c\n" in preview.text
    new = await WriteFileTool().preview({"path": "n.txt", "content": "x\n"}, ws)
    assert new.text.startswith("--- /dev/null\n+++ b/n.txt")
    assert not (root / "n.txt").exists()


# -- delete_file ----------------------------------------------------------------


async def test_delete_disabled_by_default(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "f.txt").write_text("x")
    with pytest.raises(ToolPermissionDenied, match="deleting files is disabled"):
        await run_tool(DeleteFileTool, {"path": "f.txt"}, ws)
    assert (root / "f.txt").exists()


async def test_delete_when_allowed(root: Path, ws_delete: WorkspaceFileAPI) -> None:
    (root / "f.txt").write_text("bye\n")
    preview = await DeleteFileTool().preview({"path": "f.txt"}, ws_delete)
    assert "-bye" in preview.text and preview.projected_modifications == ("f.txt",)
    out = await run_tool(DeleteFileTool, {"path": "f.txt"}, ws_delete)
    assert not (root / "f.txt").exists()
    assert out.files_modified == ["f.txt"]


async def test_delete_missing_and_directory(root: Path, ws_delete: WorkspaceFileAPI) -> None:
    with pytest.raises(ToolExecutionError, match="does not exist"):
        await run_tool(DeleteFileTool, {"path": "nope"}, ws_delete)
    (root / "d").mkdir()
    with pytest.raises(ToolExecutionError, match="is a directory"):
        await run_tool(DeleteFileTool, {"path": "d"}, ws_delete)


@pytest.mark.parametrize("path", ["../outside/secret.txt", "/etc/hostname", "link/secret.txt"])
async def test_delete_escapes(
    root: Path, ws_delete: WorkspaceFileAPI, outside: Path, path: str
) -> None:
    (root / "link").symlink_to(outside)
    with pytest.raises(WorkspaceEscape):
        await run_tool(DeleteFileTool, {"path": path}, ws_delete)
    assert (outside / "secret.txt").exists()


# -- descriptor-based access ----------------------------------------------------------


async def test_read_fifo_is_refused_without_blocking(root: Path, ws: WorkspaceFileAPI) -> None:
    # A FIFO opened for reading waits for a writer: the tool must not.
    os.mkfifo(root / "pipe")
    with pytest.raises(ToolExecutionError, match="not a regular file"):
        await run_tool(ReadFileTool, {"path": "pipe"}, ws)


async def test_read_and_write_follow_links_that_stay_inside(
    root: Path, ws: WorkspaceFileAPI
) -> None:
    (root / "real").mkdir()
    (root / "real" / "a.txt").write_text("inside\n")
    os.symlink("real", root / "alias")
    out = await run_tool(ReadFileTool, {"path": "alias/a.txt"}, ws)
    assert text_of(out) == "inside\n"
    out = await run_tool(WriteFileTool, {"path": "alias/b.txt", "content": "new\n"}, ws)
    assert out.metadata["created"] is True
    assert (root / "real" / "b.txt").read_text() == "new\n"


async def test_write_through_a_link_into_git_is_refused_at_the_write(
    root: Path, ws: WorkspaceFileAPI
) -> None:
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    os.symlink(".git", root / "cfg")
    # The tool refuses by name first ...
    with pytest.raises(ToolPermissionDenied, match=r"\.git"):
        await run_tool(WriteFileTool, {"path": "cfg/config", "content": "x"}, ws)
    # ... and the write itself refuses what its walk reached, which is what
    # holds when a link is swapped in after that first check.
    with pytest.raises(ToolPermissionDenied, match=r"\.git"):
        ws.write("cfg/config", "x", guard=git_guard("cfg/config"))
    with pytest.raises(ToolPermissionDenied, match=r"\.git"):
        ws.append("cfg/config", "x", guard=git_guard("cfg/config"))
    assert (root / ".git" / "config").read_text() == "[core]\n"
    ws.write("cfg_ok.txt", "x", guard=git_guard("cfg_ok.txt"))


async def test_write_refuses_a_fifo_without_blocking(root: Path, ws: WorkspaceFileAPI) -> None:
    os.mkfifo(root / "pipe")
    with pytest.raises(ToolExecutionError, match="not a regular file"):
        await run_tool(WriteFileTool, {"path": "pipe", "content": "x", "mode": "append"}, ws)
