"""WorkspaceFileAPI: every method refuses paths that leave the root; writes are atomic."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dispatcher import (
    ToolExecutionError,
    ToolPermissionDenied,
    WorkspaceEscape,
    WorkspaceFileAPI,
)


@pytest.fixture
def layout(tmp_path: Path) -> tuple[WorkspaceFileAPI, Path]:
    root = tmp_path / "ws"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (root / "inside.txt").write_text("inside")
    (root / "sub").mkdir()
    os.symlink(outside, root / "link_out")  # a directory symlink leaving the root
    os.symlink(outside / "secret.txt", root / "file_link_out")
    os.symlink(root / "link_out", root / "chain")  # a chain: chain -> link_out -> outside
    os.symlink("inside.txt", root / "file_link_in")  # stays inside: allowed
    return WorkspaceFileAPI(root, allow_delete=True), outside


ESCAPES = [
    "../outside/secret.txt",
    "sub/../../outside/secret.txt",
    "{outside}/secret.txt",
    "link_out/secret.txt",
    "file_link_out",
    "chain/secret.txt",
    "chain/../outside/secret.txt",
    "~/x",
    "bad\x00name",
]

METHODS: dict[str, Callable[[WorkspaceFileAPI, str], Any]] = {
    "read": lambda ws, p: ws.read(p),
    "read_bytes": lambda ws, p: ws.read_bytes(p),
    "write": lambda ws, p: ws.write(p, "x"),
    "write_bytes": lambda ws, p: ws.write_bytes(p, b"x"),
    "append": lambda ws, p: ws.append(p, "x"),
    "exists": lambda ws, p: ws.exists(p),
    "list": lambda ws, p: ws.list(p),
    "delete": lambda ws, p: ws.delete(p),
    "open_file": lambda ws, p: os.close(ws.open_file(p)),
    "open_file_write": lambda ws, p: os.close(ws.open_file(p, os.O_WRONLY | os.O_CREAT)),
    "open_dir": lambda ws, p: os.close(ws.open_dir(p)),
    "stat": lambda ws, p: ws.stat(p),
    "lstat": lambda ws, p: ws.lstat(p + "/x"),
    "resolve": lambda ws, p: ws.resolve(p),
}


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("raw", ESCAPES)
def test_every_method_refuses_every_escape(
    layout: tuple[WorkspaceFileAPI, Path], method: str, raw: str
) -> None:
    ws, outside = layout
    path = raw.format(outside=outside)
    if raw == "~/x" and os.path.realpath(os.path.expanduser("~")).startswith(ws.workspace_root):
        pytest.skip("home lies inside the workspace")
    with pytest.raises(WorkspaceEscape):
        METHODS[method](ws, path)
    assert (outside / "secret.txt").read_text() == "secret"
    assert sorted(os.listdir(outside)) == ["secret.txt"]


def test_symlink_inside_and_absolute_inside_are_fine(layout: tuple[WorkspaceFileAPI, Path]) -> None:
    ws, _ = layout
    assert ws.read("file_link_in") == "inside"
    assert ws.read(os.path.join(ws.workspace_root, "inside.txt")) == "inside"
    assert ws.read("sub/../inside.txt") == "inside"


def test_write_creates_parents_and_lists_relative(layout: tuple[WorkspaceFileAPI, Path]) -> None:
    ws, _ = layout
    ws.write("a/b/c.txt", "hello")
    assert ws.read("a/b/c.txt") == "hello"
    assert ws.list("a") == ["a/b/"]
    assert "inside.txt" in ws.list(".")
    ws.append("a/b/c.txt", " world")
    assert ws.read("a/b/c.txt") == "hello world"


def test_non_utf8_and_directories_give_clear_errors(layout: tuple[WorkspaceFileAPI, Path]) -> None:
    ws, _ = layout
    ws.write_bytes("bin.dat", b"\xff\xfe\x00")
    with pytest.raises(ToolExecutionError, match="not UTF-8"):
        ws.read("bin.dat")
    with pytest.raises(ToolExecutionError, match="directory"):
        ws.read("sub")
    with pytest.raises(ToolExecutionError, match="No such file"):
        ws.read("missing.txt")


def test_read_limit(layout: tuple[WorkspaceFileAPI, Path]) -> None:
    ws, _ = layout
    small = WorkspaceFileAPI(ws.workspace_root, max_read_bytes=4)
    with pytest.raises(ToolExecutionError, match="read limit"):
        small.read("inside.txt")


def test_delete_needs_permission(layout: tuple[WorkspaceFileAPI, Path]) -> None:
    ws, _ = layout
    locked = WorkspaceFileAPI(ws.workspace_root)
    with pytest.raises(ToolPermissionDenied, match="disabled"):
        locked.delete("inside.txt")
    with pytest.raises(ToolPermissionDenied, match="root"):
        ws.delete(".")
    ws.delete("inside.txt")
    assert not ws.exists("inside.txt")


def test_failed_write_leaves_old_content_and_no_temp_file(
    layout: tuple[WorkspaceFileAPI, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, _ = layout

    def crash(src: str, dst: str, **dir_fds: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(ToolExecutionError, match="No space left"):
        ws.write("inside.txt", "new content")
    monkeypatch.undo()
    assert ws.read("inside.txt") == "inside"
    assert not [n for n in os.listdir(ws.workspace_root) if n.endswith(".tmp")]


def test_write_keeps_file_mode(layout: tuple[WorkspaceFileAPI, Path]) -> None:
    ws, _ = layout
    target = Path(ws.workspace_root, "script.sh")
    target.write_text("#!/bin/sh\n")
    target.chmod(0o755)
    ws.write("script.sh", "#!/bin/sh\necho hi\n")
    assert target.stat().st_mode & 0o777 == 0o755


def test_symlink_loop_is_refused_cleanly(layout: tuple[WorkspaceFileAPI, Path]) -> None:
    ws, _ = layout
    os.symlink("loop_b", os.path.join(ws.workspace_root, "loop_a"))
    os.symlink("loop_a", os.path.join(ws.workspace_root, "loop_b"))
    with pytest.raises((ToolPermissionDenied, ToolExecutionError)):
        ws.read("loop_a")


def test_open_file_and_open_dir_give_descriptors(layout: tuple[WorkspaceFileAPI, Path]) -> None:
    ws, _ = layout
    fd = ws.open_file("sub/../file_link_in")
    try:
        assert os.read(fd, 100) == b"inside"
        assert os.get_blocking(fd)  # O_NONBLOCK was cleared after the checks
    finally:
        os.close(fd)
    dfd = ws.open_dir("sub")
    try:
        with os.scandir(dfd) as it:
            assert [e.name for e in it] == []
    finally:
        os.close(dfd)
    fd = ws.open_file("sub/new.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    assert Path(ws.workspace_root, "sub/new.txt").exists()
    with pytest.raises(ToolExecutionError, match="not a directory"):
        ws.open_dir("inside.txt")
    with pytest.raises(ToolExecutionError, match="is a directory"):
        ws.open_file("sub")


def test_fifo_is_refused_without_blocking(layout: tuple[WorkspaceFileAPI, Path]) -> None:
    ws, _ = layout
    os.mkfifo(os.path.join(ws.workspace_root, "pipe"))
    # Without O_NONBLOCK this open would wait forever for a writer.
    with pytest.raises(ToolExecutionError, match="not a regular file"):
        ws.read("pipe")
    with pytest.raises(ToolExecutionError, match="not a regular file"):
        ws.write("pipe", "x")


def test_links_inside_are_followed_under_the_same_rules(
    layout: tuple[WorkspaceFileAPI, Path],
) -> None:
    ws, outside = layout
    root = Path(ws.workspace_root)
    os.symlink(root / "sub", root / "abs_in")  # absolute, inside: followed from the root
    os.symlink("../inside.txt", root / "sub" / "up")
    os.symlink("../../outside/secret.txt", root / "sub" / "up_out")
    assert ws.read("abs_in/up") == "inside"
    assert ws.resolve("abs_in/up") == root / "inside.txt"
    assert ws.lstat("abs_in/up").st_mode & 0o170000 == 0o120000  # the link itself
    assert ws.stat("abs_in/up").st_size == len("inside")
    # '..' after a link climbs from where the link led (physically), not lexically.
    assert ws.resolve("abs_in/../inside.txt") == root / "inside.txt"
    with pytest.raises(WorkspaceEscape, match="up_out"):
        ws.read("sub/up_out")
    # A write through an in-workspace link replaces the target and keeps the link.
    ws.write("sub/up", "changed")
    assert (root / "inside.txt").read_text() == "changed"
    assert (root / "sub" / "up").is_symlink()
    assert (outside / "secret.txt").read_text() == "secret"


def test_write_through_dangling_link_creates_inside_only(
    layout: tuple[WorkspaceFileAPI, Path],
) -> None:
    ws, outside = layout
    root = Path(ws.workspace_root)
    os.symlink("made/here.txt", root / "dangling_in")
    os.symlink(outside / "new.txt", root / "dangling_out")
    result = ws.write("dangling_in", "x")
    assert (result.rel, result.created, result.made_dirs) == ("made/here.txt", True, ["made"])
    with pytest.raises(WorkspaceEscape):
        ws.write("dangling_out", "x")
    assert sorted(os.listdir(outside)) == ["secret.txt"]


def test_missing_paths_resolve_lexically_and_read_as_not_found(
    layout: tuple[WorkspaceFileAPI, Path],
) -> None:
    ws, _ = layout
    root = Path(ws.workspace_root)
    assert ws.resolve("no/such/../file") == root / "no" / "file"
    assert ws.resolve(".") == root
    assert not ws.exists("no/such/file")
    with pytest.raises(ToolExecutionError, match="No such file"):
        ws.stat("no/such/file")
    with pytest.raises(ToolExecutionError, match="create_parents is false"):
        ws.write_bytes("no/such/file", b"x", create_parents=False)


def test_unlink_and_rmdir_by_descriptor(layout: tuple[WorkspaceFileAPI, Path]) -> None:
    ws, outside = layout
    ws.write("d/e/f.txt", "x")
    ws.unlink("d/e/f.txt")
    ws.rmdir("d/e")
    ws.rmdir("d")
    assert not ws.exists("d")
    with pytest.raises(WorkspaceEscape):
        ws.unlink("file_link_out")
    assert (outside / "secret.txt").exists()
