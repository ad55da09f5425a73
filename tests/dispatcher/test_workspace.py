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
    WorkspaceEscapeError,
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
    "patch": lambda ws, p: ws.patch(p, "secret", "pwned"),
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
    with pytest.raises(WorkspaceEscapeError):
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


def test_patch_requires_exactly_one_match(layout: tuple[WorkspaceFileAPI, Path]) -> None:
    ws, _ = layout
    ws.write("p.txt", "one\ntwo\none\n")
    with pytest.raises(ToolExecutionError, match=r"not unique.*2 matches, at lines 1, 3"):
        ws.patch("p.txt", "one", "1")
    with pytest.raises(ToolExecutionError, match="not found"):
        ws.patch("p.txt", "three", "3")
    diff = ws.patch("p.txt", "two", "2")
    assert "-two" in diff and "+2" in diff and "a/p.txt" in diff
    assert ws.read("p.txt") == "one\n2\none\n"


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

    def crash(src: str, dst: str) -> None:
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
