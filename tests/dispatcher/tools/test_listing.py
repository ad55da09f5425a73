"""list_dir, find_files and the .gitignore matcher (checked against git itself)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher import (
    ToolCancelled,
    ToolExecutionError,
    ToolValidationFailed,
    WorkspaceEscape,
    WorkspaceFileAPI,
)
from dispatcher.tools import FindFilesTool, ListDirTool
from dispatcher.tools.search.gitignore import is_ignored, parse_gitignore
from dispatcher.tools.search.globbing import glob_matches, name_or_path_match
from dispatcher.tools.search.walk import walk
from tests.dispatcher.tools.support import git, run_tool, text_of


def _touch(root: Path, *paths: str) -> None:
    for rel in paths:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(rel + "\n")


async def test_list_top_level(root: Path, ws: WorkspaceFileAPI) -> None:
    _touch(root, "b.txt", "a.txt", "src/main.py")
    out = await run_tool(ListDirTool, {}, ws)
    assert text_of(out).splitlines() == ["a.txt", "b.txt", "src/"]
    assert out.data["entries"][0] == {"path": "a.txt", "name": "a.txt", "type": "file", "size": 6}
    assert out.data["entries"][2] == {"path": "src", "name": "src", "type": "dir"}


async def test_list_recursive_with_pattern(root: Path, ws: WorkspaceFileAPI) -> None:
    _touch(root, "src/a.py", "src/pkg/b.py", "src/pkg/c.txt", "top.py", "docs/x.md")
    out = await run_tool(ListDirTool, {"path": "src", "recursive": True, "pattern": "*.py"}, ws)
    assert text_of(out).splitlines() == ["src/a.py", "src/pkg/b.py"]
    out = await run_tool(ListDirTool, {"pattern": "src/**/*.py"}, ws)  # '/' implies recursion
    assert text_of(out).splitlines() == ["src/a.py", "src/pkg/b.py"]
    out = await run_tool(ListDirTool, {"pattern": "**/*.md"}, ws)
    assert text_of(out).splitlines() == ["docs/x.md"]


async def test_list_skips_git_and_honours_gitignore(root: Path, ws: WorkspaceFileAPI) -> None:
    _touch(root, ".git/HEAD", ".gitignore", "keep.py", "app.log", "build/out.bin")
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    out = await run_tool(ListDirTool, {"recursive": True}, ws)
    assert text_of(out).splitlines() == [".gitignore", "keep.py"]
    out = await run_tool(ListDirTool, {"recursive": True, "respect_gitignore": False}, ws)
    assert text_of(out).splitlines() == [
        ".gitignore",
        "app.log",
        "build/",
        "build/out.bin",
        "keep.py",
    ]


async def test_list_subfolder_inherits_parent_gitignore(root: Path, ws: WorkspaceFileAPI) -> None:
    _touch(root, "src/a.py", "src/a.pyc", "src/deep/b.pyc", "src/deep/c.py")
    (root / ".gitignore").write_text("*.pyc\n")
    out = await run_tool(ListDirTool, {"path": "src/deep"}, ws)
    assert text_of(out).splitlines() == ["src/deep/c.py"]


async def test_list_truncates(root: Path, ws: WorkspaceFileAPI) -> None:
    _touch(root, *(f"f{i:03d}.txt" for i in range(50)))
    out = await run_tool(ListDirTool, {"max_entries": 10}, ws)
    assert out.metadata["count"] == 10 and out.metadata["truncated"] is True
    assert "[truncated: only the first 10 entries" in text_of(out)


async def test_list_many_files(root: Path, ws: WorkspaceFileAPI) -> None:
    for d in range(20):
        _touch(root, *(f"d{d:02d}/f{i:03d}.txt" for i in range(100)))
    out = await run_tool(
        ListDirTool, {"recursive": True, "pattern": "*.txt", "max_entries": 10000}, ws
    )
    assert out.metadata["count"] == 2000 and out.metadata["truncated"] is False


async def test_list_errors(root: Path, ws: WorkspaceFileAPI) -> None:
    _touch(root, "f.txt")
    with pytest.raises(ToolExecutionError, match="'nope' does not exist"):
        await run_tool(ListDirTool, {"path": "nope"}, ws)
    with pytest.raises(ToolExecutionError, match="is a file, not a folder"):
        await run_tool(ListDirTool, {"path": "f.txt"}, ws)


@pytest.mark.parametrize("path", ["..", "../outside", "/etc", "link"])
async def test_list_escapes(root: Path, ws: WorkspaceFileAPI, outside: Path, path: str) -> None:
    (root / "link").symlink_to(outside)
    with pytest.raises(WorkspaceEscape):
        await run_tool(ListDirTool, {"path": path}, ws)


async def test_symlinks_are_listed_but_never_followed_out(
    root: Path, ws: WorkspaceFileAPI, outside: Path
) -> None:
    _touch(root, "real/x.txt")
    (root / "out_link").symlink_to(outside)
    (root / "out_file").symlink_to(outside / "secret.txt")
    (root / "in_link").symlink_to(root / "real")
    (root / "loop").symlink_to(root)
    out = await run_tool(ListDirTool, {"recursive": True}, ws)
    listed = text_of(out).splitlines()
    assert "out_link" not in listed and "out_file" not in listed
    assert listed == ["in_link", "loop", "real/", "real/x.txt"]
    kinds = {e["path"]: e["type"] for e in out.data["entries"]}
    assert kinds["in_link"] == "symlink"


async def test_list_cancelled(root: Path, ws: WorkspaceFileAPI) -> None:
    event = asyncio.Event()
    event.set()
    with pytest.raises(ToolCancelled):
        await run_tool(ListDirTool, {}, ws, cancel_event=event)


async def test_find_files(root: Path, ws: WorkspaceFileAPI) -> None:
    _touch(root, "conftest.py", "tests/conftest.py", "tests/test_a.py", "a.yaml", "cfg/b.yaml")
    out = await run_tool(FindFilesTool, {"pattern": "conftest.py"}, ws)
    assert out.data["files"] == ["conftest.py", "tests/conftest.py"]
    out = await run_tool(FindFilesTool, {"pattern": "*.yaml", "recursive": False}, ws)
    assert out.data["files"] == ["a.yaml"]
    out = await run_tool(FindFilesTool, {"pattern": "test_*.py", "path": "tests"}, ws)
    assert out.data["files"] == ["tests/test_a.py"]
    out = await run_tool(FindFilesTool, {"pattern": "*.yaml", "max_results": 1}, ws)
    assert out.metadata["truncated"] is True
    out = await run_tool(FindFilesTool, {"pattern": "*.none"}, ws)
    assert text_of(out) == "(no files match '*.none')"


@pytest.mark.parametrize("path", ["..", "/", "link"])
async def test_find_escapes(root: Path, ws: WorkspaceFileAPI, outside: Path, path: str) -> None:
    (root / "link").symlink_to(outside)
    with pytest.raises(WorkspaceEscape):
        await run_tool(FindFilesTool, {"pattern": "*", "path": path}, ws)


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.py", "a.py", True),
        ("*.py", "d/a.py", False),
        ("**/a.py", "a.py", True),
        ("**/a.py", "x/y/a.py", True),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**", "a/x/y", True),
        ("a/**", "a", False),
        ("?.txt", "a.txt", True),
        ("?.txt", "/.txt", False),
        ("[a-c]x", "bx", True),
        ("[!a-c]x", "dx", True),
        ("[!a-c]x", "ax", False),
        ("[[:digit:]]*", "7up", True),
        ("\\*lit", "*lit", True),
        ("\\*lit", "xlit", False),
        ("a**b", "axxb", True),
        ("a**b", "a/b", False),
        ("[unclosed", "[unclosed", True),
    ],
)
def test_glob_rules(pattern: str, path: str, expected: bool) -> None:
    assert glob_matches(pattern, path) is expected


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.{ts,tsx}", "src/a.ts", True),
        ("*.{ts,tsx}", "src/a.tsx", True),
        ("*.{ts,tsx}", "src/a.js", False),
        ("{src/*.py,*.md}", "src/a.py", True),
        ("{src/*.py,*.md}", "docs/x/readme.md", True),
        ("{src/*.py,*.md}", "lib/a.py", False),
        ("a\\{b,c}", "a{b,c}", True),
        ("file.{1..3}", "file.2", True),
    ],
)
def test_user_globs_take_braces(pattern: str, path: str, expected: bool) -> None:
    assert name_or_path_match(pattern, path) is expected


def test_brace_explosion_is_refused() -> None:
    with pytest.raises(ToolValidationFailed, match="expands to more than"):
        name_or_path_match("{a,b}" * 9, "x")


async def test_find_files_with_braces(root: Path, ws: WorkspaceFileAPI) -> None:
    _touch(root, "web/app.ts", "web/view.tsx", "web/style.css")
    out = await run_tool(FindFilesTool, {"pattern": "*.{ts,tsx}"}, ws)
    assert out.data["files"] == ["web/app.ts", "web/view.tsx"]


# -- the .gitignore matcher agrees with git ----------------------------------------

_ROOT_IGNORE = """\
# a comment
*.log
!keep.log
build/
/top-only.txt
docs/**/*.tmp
**/cache
*.py[co]
\\#hash.txt
trailing.txt{SPACES}
a?c.txt
[Rr]eadme.bak
node_modules
sub/**
!sub/keep/
""".replace("{SPACES}", "   ")  # trailing spaces are ignored unless escaped
_SRC_IGNORE = "*.gen\n!important.gen\n/local.txt\ndeep/\n"
_FILES = [
    "a.log", "keep.log", "b.txt", "build/out.o", "src/build/x.o", "top-only.txt",
    "src/top-only.txt", "docs/a/b/c.tmp", "docs/x.tmp", "docs/x.txt", "x/cache/f", "cache",
    "m.pyc", "m.pyo", "m.py", "#hash.txt", "trailing.txt", "abc.txt", "a/c.txt",
    "Readme.bak", "readme.bak", "README.bak", "node_modules/pkg/index.js", "src/node_modules",
    "sub/x", "sub/keep/y", "src/a.gen", "src/important.gen", "src/local.txt",
    "src/lib/local.txt", "src/deep/f", "src/x/deep/g", "src/deepfile", ".hidden",
    "dir with space/f.txt", "uni/ünï.txt",
]  # fmt: skip


def _git_untracked(root: Path, under: str = "") -> list[str]:
    out = git(root, "ls-files", "-o", "--exclude-standard", "-z", *([under] if under else []))
    return sorted(p for p in out.split("\0") if p)


def _walked(ws: WorkspaceFileAPI, start: str = ".") -> list[str]:
    return sorted(
        e.rel for e in walk(ws, start, recursive=True, respect_gitignore=True) if not e.is_dir
    )


def test_gitignore_matches_git_on_a_rich_tree(root: Path, ws: WorkspaceFileAPI) -> None:
    _touch(root, *_FILES)
    (root / ".gitignore").write_text(_ROOT_IGNORE)
    (root / "src/.gitignore").write_text(_SRC_IGNORE)
    git(root, "init", "-q")
    expected = _git_untracked(root)
    assert _walked(ws) == expected
    assert _walked(ws, "src") == _git_untracked(root, "src")
    # Sanity: the corpus really exercises ignoring and re-including.
    assert "keep.log" in expected and "a.log" not in expected
    assert "src/important.gen" in expected and "src/a.gen" not in expected


def test_git_info_exclude_is_honoured(root: Path, ws: WorkspaceFileAPI) -> None:
    _touch(root, "a.secret", "b.txt")
    git(root, "init", "-q")
    (root / ".git/info/exclude").write_text("*.secret\n")
    assert _walked(ws) == _git_untracked(root) == ["b.txt"]


_NAMES = ["a", "b", "ab", "ba", "x.a", ".b", "a.x", "c d"]
_PIECES = ["*", "?", "a", "b", "[ab]", "[!a]", "[a-b]", "[b-a]", "**", "/", ".", "x", "\\*"]


@pytest.mark.parametrize("seed", range(12))
def test_gitignore_matches_git_on_random_trees(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    root = tmp_path / f"r{seed}"
    root.mkdir()
    files: set[str] = set()
    for _ in range(40):
        parts = [rng.choice(_NAMES) for _ in range(rng.randint(1, 3))]
        rel = "/".join(parts)
        # A name cannot be both a file and a folder.
        prefixes = {"/".join(parts[:k]) for k in range(1, len(parts))}
        if prefixes & files or any(f.startswith(rel + "/") for f in files):
            continue
        files.add(rel)
    _touch(root, *sorted(files))
    patterns = []
    for _ in range(rng.randint(3, 9)):
        pat = "".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.25:
            pat = "!" + pat
        if rng.random() < 0.2:
            pat += "/"
        patterns.append(pat)
    (root / ".gitignore").write_text("\n".join(patterns) + "\n")
    sub = sorted({f.split("/")[0] for f in files if "/" in f})
    if sub:
        (root / sub[0] / ".gitignore").write_text(
            "\n".join(rng.choice(["*.a", "!x.a", "/b", "a*/", "?"]) for _ in range(3)) + "\n"
        )
    git(root, "init", "-q")
    ws = WorkspaceFileAPI(root)
    assert _walked(ws) == _git_untracked(root), f"patterns: {patterns}"


def test_reversed_range_like_git(root: Path, ws: WorkspaceFileAPI) -> None:
    # git matches a reversed range's first character only: [z-a] is [z].
    _touch(root, "ax", "zx", "bx", "qy", "zy")
    (root / ".gitignore").write_text("[z-a]x\n[!z-a]y\n")
    git(root, "init", "-q")
    assert _walked(ws) == _git_untracked(root) == [".gitignore", "ax", "bx", "zy"]


_GLOB_BITS = [*"*?[]!^/\\ab.-:", "**", "[[:alpha:]]", "[:", "[!", "\\ "]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_GLOB_BITS), max_size=10).map("".join), st.booleans())
def test_any_pattern_compiles(pattern: str, is_dir: bool) -> None:
    # Patterns come from the model (globs) and from files (.gitignore): a
    # malformed one must never raise out of the matcher.
    glob_matches(pattern, "a/b.c")
    rules = parse_gitignore(f"{pattern}\n!{pattern}\n", "a")
    is_ignored(rules, "a/b", is_dir)
