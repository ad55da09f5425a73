"""The walk and the search backends work on descriptors: a folder or file
swapped for a link to the outside in the window between the walk seeing it
and the search reading it is refused, never read.

Each test opens that window deterministically (the walk is paused on a
yielded folder; the candidates are gathered, then the tree is swapped, then
the backend runs on the gathered list), which is exactly where the
name-based versions read the outside. The racing version, with a real
swapping process, is tests/reliability/test_search_race.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from dispatcher import ToolContext, WorkspaceFileAPI
from dispatcher.sandbox import Sandbox, SandboxConfig
from dispatcher.tools import FindFilesTool, GrepTool, ListDirTool, SearchCodeTool
from dispatcher.tools.search.candidates import gather_candidates, open_candidates
from dispatcher.tools.search.grep import python_search
from dispatcher.tools.search.regex_scan import compile_pattern, scan
from dispatcher.tools.search.search_code import DEFAULT_FILE_TIMEOUT
from dispatcher.tools.search.walk import Walk, walk
from tests.dispatcher.tools.support import make_context, run_tool, text_of

CANARY = "CANARY-7f3e"


@pytest.fixture
def tree(root: Path, tmp_path: Path) -> Path:
    """ws/sub/inner.txt and ws/f.txt, each holding 'needle'; outside, a folder
    and a file holding the canary, ready to be swapped in."""
    (root / "sub").mkdir()
    (root / "sub" / "inner.txt").write_text("needle inside\n")
    (root / "f.txt").write_text("needle file\n")
    out = tmp_path / "outside_canary"
    out.mkdir()
    (out / "inner.txt").write_text(f"needle {CANARY} folder\n")
    (out / f"{CANARY}.txt").write_text(f"needle {CANARY} name\n")
    (tmp_path / "secret.txt").write_text(f"needle {CANARY} file\n")
    return root


def _swap_out(root: Path) -> None:
    """Replace ws/sub and ws/f.txt by links to the outside canaries."""
    outside = root.parent / "outside_canary"
    shutil.rmtree(root / "sub")
    (root / "sub").symlink_to(outside)
    (root / "f.txt").unlink()
    (root / "f.txt").symlink_to(root.parent / "secret.txt")


def _leaks(*values: object) -> bool:
    return any(CANARY in json.dumps(v, default=str) for v in values)


def test_walk_never_enters_a_folder_swapped_after_listing(tree: Path, ws: WorkspaceFileAPI) -> None:
    seen: list[str] = []
    for entry in walk(ws, ".", recursive=True, respect_gitignore=True):
        seen.append(entry.rel)
        if entry.rel == "sub":
            assert entry.is_dir
            _swap_out(tree)  # the walk has listed 'sub' as a folder, not entered it
    assert "sub" in seen and not any(CANARY in rel for rel in seen)
    assert not any(rel.startswith("sub/") for rel in seen)


def test_walk_start_folder_is_held_by_descriptor(tree: Path, ws: WorkspaceFileAPI) -> None:
    with Walk(ws, "sub", recursive=True, respect_gitignore=True) as w:
        _swap_out(tree)  # after the start folder was opened
        rels = [e.rel for e in w]
    assert rels == ["sub/inner.txt"]  # the folder that was opened, not the link's target


def test_walk_closes_its_descriptors(tree: Path, ws: WorkspaceFileAPI) -> None:
    for i in range(30):
        (tree / "sub" / f"d{i}").mkdir()
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        it = walk(ws, ".", recursive=True, respect_gitignore=True)
        next(it)
        next(it)
        del it  # abandoned half-way
        list(walk(ws, ".", recursive=True, respect_gitignore=True))
    assert len(os.listdir("/proc/self/fd")) == before


def test_gitignore_is_read_from_the_folder_descriptor(
    tree: Path, ws: WorkspaceFileAPI, tmp_path: Path
) -> None:
    # A .gitignore that is a link is not followed (it could name any file).
    (tmp_path / "ignore_all").write_text("*\n")
    (tree / ".gitignore").symlink_to(tmp_path / "ignore_all")
    rels = [e.rel for e in walk(ws, ".", recursive=True, respect_gitignore=True)]
    assert "f.txt" in rels and "sub/inner.txt" in rels


async def test_python_backend_reads_by_descriptor(tree: Path, ws: WorkspaceFileAPI) -> None:
    cands = gather_candidates(ws, ".", "*")
    assert {c.rel for c in cands.files} == {"f.txt", "sub/inner.txt"}
    _swap_out(tree)
    found = python_search(ws, cands.files, "needle", False, 100, lambda: False)
    assert found == []  # both names now lead outside: refused, not read


@pytest.mark.parametrize("backend", ["rg", "grep"])
@pytest.mark.parametrize("sandboxed", [False, True])
async def test_external_backends_get_descriptors_not_names(
    tree: Path, ws: WorkspaceFileAPI, backend: str, sandboxed: bool
) -> None:
    if shutil.which(backend) is None:
        pytest.skip(f"{backend} is not installed")
    sandbox = _sandbox(ws) if sandboxed else None
    cands = gather_candidates(ws, ".", "*")
    _swap_out(tree)
    found = await GrepTool()._external(
        backend, ws, cands.files, "needle", False, 100, 1 << 20, sandbox
    )
    assert not _leaks([m.text for m in found])
    assert found == []


async def test_external_backends_name_files_by_workspace_path(
    tree: Path, ws: WorkspaceFileAPI
) -> None:
    """rg/grep see /proc/self/fd/N; the answer still names workspace paths."""
    for backend in ("rg", "grep"):
        if shutil.which(backend) is None:
            continue
        out = await run_tool(GrepTool, {"pattern": "needle"}, ws, options={"backend": backend})
        assert [m["path"] for m in out.data["matches"]] == ["f.txt", "sub/inner.txt"]
        assert "/proc/" not in text_of(out)


def test_search_code_scan_gets_content_not_names(tree: Path, ws: WorkspaceFileAPI) -> None:
    cands = gather_candidates(ws, ".", "*")
    _swap_out(tree)
    progress = scan(
        open_candidates(ws, enumerate(cands.files), 1 << 20),
        compile_pattern("needle", ignore_case=False),
        context=2,
        limit=100,
        file_timeout=DEFAULT_FILE_TIMEOUT,
        max_slow=3,
        max_bytes=1 << 20,
        cancelled=lambda: False,
    )
    assert progress.matches == []


@pytest.mark.parametrize("sandboxed", [False, True])
async def test_search_code_finds_with_and_without_a_sandbox(
    tree: Path, ws: WorkspaceFileAPI, sandboxed: bool
) -> None:
    sandbox = _sandbox(ws) if sandboxed else None
    out = await SearchCodeTool().execute({"pattern": r"need\w+"}, _context(ws, sandbox))
    assert [(m["path"], m["line"]) for m in out.data["matches"]] == [
        ("f.txt", 1),
        ("sub/inner.txt", 1),
    ]


@pytest.mark.parametrize("backend", ["rg", "grep", "python"])
async def test_grep_in_the_sandbox_matches_grep_outside(
    tree: Path, ws: WorkspaceFileAPI, backend: str
) -> None:
    if backend != "python" and shutil.which(backend) is None:
        pytest.skip(f"{backend} is not installed")
    sandbox = _sandbox(ws)
    inside = await GrepTool().execute(
        {"pattern": "needle"}, _context(ws, sandbox, {"backend": backend})
    )
    outside = await run_tool(GrepTool, {"pattern": "needle"}, ws, options={"backend": backend})
    assert inside.data["matches"] == outside.data["matches"]
    assert len(inside.data["matches"]) == 2


async def test_links_inside_the_workspace_are_still_followed(
    tree: Path, ws: WorkspaceFileAPI
) -> None:
    (tree / "alias.txt").symlink_to("sub/inner.txt")
    (tree / "loop").symlink_to(".")
    for backend in ("python", "rg"):
        if backend == "rg" and shutil.which("rg") is None:
            continue
        out = await run_tool(GrepTool, {"pattern": "needle"}, ws, options={"backend": backend})
        assert [m["path"] for m in out.data["matches"]] == [
            "alias.txt",
            "f.txt",
            "sub/inner.txt",
        ]
    listed = await run_tool(ListDirTool, {"recursive": True}, ws)
    assert text_of(listed).splitlines() == ["alias.txt", "f.txt", "loop", "sub/", "sub/inner.txt"]
    found = await run_tool(FindFilesTool, {"pattern": "*"}, ws)
    assert found.data["files"] == ["alias.txt", "f.txt", "sub/inner.txt"]


async def test_searches_close_every_descriptor(tree: Path, ws: WorkspaceFileAPI) -> None:
    for i in range(40):
        (tree / "sub" / f"m{i}.txt").write_text("needle\n" if i % 3 else "hay\n")
    before = len(os.listdir("/proc/self/fd"))
    for backend in ("python", "rg", "grep"):
        if backend != "python" and shutil.which(backend) is None:
            continue
        out = await run_tool(GrepTool, {"pattern": "needle"}, ws, options={"backend": backend})
        assert out.metadata["count"] == 28
        # Stopped at the result limit, with files still open in the chunk.
        out = await run_tool(
            GrepTool, {"pattern": "needle", "max_results": 2}, ws, options={"backend": backend}
        )
        assert out.metadata["truncated"] is True
    out = await run_tool(SearchCodeTool, {"pattern": "needle", "max_results": 3}, ws)
    assert out.metadata["truncated"] is True
    await run_tool(FindFilesTool, {"pattern": "*.txt"}, ws)
    await run_tool(ListDirTool, {"recursive": True, "max_entries": 3}, ws)
    assert len(os.listdir("/proc/self/fd")) == before


def _sandbox(ws: WorkspaceFileAPI) -> Sandbox:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    return Sandbox(SandboxConfig(bwrap=bwrap), ws.workspace_root)


def _context(
    ws: WorkspaceFileAPI, sandbox: Sandbox | None, options: dict[str, object] | None = None
) -> ToolContext:
    context = make_context(ws, options=options, cancel_event=asyncio.Event())
    context.sandbox = sandbox
    return context
