"""Property: what a file tool declares it would modify is what it modifies.

For random inputs of write_file, patch_file, apply_patch and delete_file on
a scratch workspace (folders, a symbolic link to a file, files the input may
or may not name correctly), the real tool runs after its effects were
declared, and the files that changed (content, kind or inode: an atomic
rewrite counts) are compared with the declared ones, each resolved to the
file it physically names:

- a call that succeeded modified exactly what it declared;
- a call that failed modified nothing (so nothing outside what it declared).

The guardrails rely on the first half: a file a tool writes without
declaring it would pass ``protected_files`` and the edit limits unseen.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher import ToolContext, ToolError, WorkspaceFileAPI
from dispatcher.tool import BaseTool
from dispatcher.tools import ApplyPatchTool, DeleteFileTool, PatchFileTool, WriteFileTool

FILES = {
    "a.txt": "alpha\nbeta\ngamma\n",
    "b.txt": "one\ntwo\n",
    "sub/c.txt": "c1\nc2\nc3\nc4\n",
    "sub/d.py": "x = 1\n",
}
LINK = "link"  # -> a.txt
PATHS = [
    *FILES,
    LINK,
    "new.txt",
    "sub/new.txt",
    "deep/er/new.txt",
    "./sub/../b.txt",
    "sub//c.txt",
]
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
LINE = st.text(alphabet="abcxyz =1()", min_size=1, max_size=12)


def make_workspace(root: Path) -> WorkspaceFileAPI:
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    os.symlink("a.txt", root / LINK)
    return WorkspaceFileAPI(str(root), allow_delete=True)


def snapshot(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under root (links not followed): kind, inode, content."""
    found: dict[str, tuple[str, int, bytes]] = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder, name)
            rel = path.relative_to(root).as_posix()
            st_ = path.lstat()
            if path.is_symlink():
                found[rel] = ("link", st_.st_ino, os.readlink(path).encode())
            elif path.is_dir():
                found[rel] = ("dir", 0, b"")
            else:
                found[rel] = ("file", st_.st_ino, path.read_bytes())
    return found


def changed_files(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    """Files (not folders) created, deleted or rewritten."""
    names = set(before) | set(after)
    return {
        n
        for n in names
        if before.get(n) != after.get(n)
        and "dir" not in (before.get(n, ("",))[0], after.get(n, ("",))[0])
    }


def physical(root: Path, declared: tuple[str, ...]) -> set[str]:
    """Each declared path as the workspace file it names (links followed)."""
    real_root = os.path.realpath(root)
    return {
        os.path.relpath(os.path.realpath(os.path.join(real_root, p)), real_root) for p in declared
    }


def run_case(tool: BaseTool, input: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch).resolve()
        ws = make_workspace(root)
        try:
            effects = asyncio.run(tool.effects(dict(input), ws))
        except ToolError:
            return  # refused before anything could run (an escape, .git)
        assert not effects.unknown
        before = snapshot(root)
        context = ToolContext("sess", "turn", "tu", str(root), ws)
        try:
            output = asyncio.run(tool.execute(dict(input), context))
            succeeded = output.success
        except ToolError:
            succeeded = False
        changed = changed_files(before, snapshot(root))
        declared = physical(root, effects.modified)
        if succeeded:
            assert changed == declared, (input, effects)
        else:
            assert changed == set(), (input, changed)


@SETTINGS
@given(
    path=st.sampled_from(PATHS),
    content=st.text(alphabet="ab\n", min_size=1, max_size=30),
    mode=st.sampled_from(["overwrite", "append"]),
)
def test_write_file_modifies_what_it_declares(path: str, content: str, mode: str) -> None:
    run_case(WriteFileTool(), {"path": path, "content": content, "mode": mode})


@SETTINGS
@given(
    path=st.sampled_from(PATHS),
    old=st.sampled_from(["alpha", "beta\n", "two", "c3\nc4", "x = 1", "missing", "\n"]),
    new=LINE,
)
def test_patch_file_modifies_what_it_declares(path: str, old: str, new: str) -> None:
    run_case(PatchFileTool(), {"path": path, "old_str": old, "new_str": new})


@SETTINGS
@given(path=st.sampled_from(PATHS))
def test_delete_file_modifies_what_it_declares(path: str) -> None:
    run_case(DeleteFileTool(), {"path": path})


def _section(draw: st.DrawFn, name: str) -> str:
    """One section of a unified diff on ``name``: change a line of it, create
    it, or delete it (when it exists)."""
    text = FILES.get(name)
    if text is None:
        lines = draw(st.lists(LINE, min_size=1, max_size=3))
        body = "".join(f"+{ln}\n" for ln in lines)
        return f"--- /dev/null\n+++ b/{name}\n@@ -0,0 +1,{len(lines)} @@\n{body}"
    old = text.splitlines()
    if draw(st.booleans()) and draw(st.booleans()):
        body = "".join(f"-{ln}\n" for ln in old)
        return f"--- a/{name}\n+++ /dev/null\n@@ -1,{len(old)} +0,0 @@\n{body}"
    at = draw(st.integers(0, len(old) - 1))
    new = draw(LINE)
    body = "".join((f"-{ln}\n+{new}\n" if i == at else f" {ln}\n") for i, ln in enumerate(old))
    return f"--- a/{name}\n+++ b/{name}\n@@ -1,{len(old)} +1,{len(old)} @@\n{body}"


@st.composite
def patches(draw: st.DrawFn) -> str:
    names = draw(
        st.lists(
            st.sampled_from([*FILES, "new.txt", "sub/new.txt", "deep/new.txt"]),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    return "".join(_section(draw, name) for name in names)


@SETTINGS
@given(patch=patches())
def test_apply_patch_modifies_what_it_declares(patch: str) -> None:
    run_case(ApplyPatchTool(), {"patch": patch})


def test_the_property_sees_an_undeclared_write(tmp_path: Path) -> None:
    """The comparison itself: a write the declaration misses is caught."""
    ws = make_workspace(tmp_path)
    before = snapshot(tmp_path)
    ws.write("b.txt", "changed\n")
    ws.write("sub/c.txt", "changed\n")
    changed = changed_files(before, snapshot(tmp_path))
    assert changed == {"b.txt", "sub/c.txt"}
    assert changed != physical(tmp_path, ("./sub/../b.txt",))
    assert physical(tmp_path, (LINK,)) == {"a.txt"}
