"""search_code (regex, with a per-file timeout) and grep (three backends, one answer)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from dispatcher import (
    ToolCancelled,
    ToolExecutionError,
    ToolValidationFailed,
    WorkspaceEscape,
    WorkspaceFileAPI,
)
from dispatcher.tools import GrepTool, SearchCodeTool
from dispatcher.tools.search import grep as grep_module
from tests.dispatcher.tools.support import make_context, run_tool, text_of

# -- search_code ------------------------------------------------------------------


async def test_regex_with_context(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "a.py").write_text("import os\n\ndef validate_path(p):\n    return p\n\nx = 1\n")
    (root / "b.txt").write_text("validate_path here too\n")
    out = await run_tool(
        SearchCodeTool,
        {"pattern": r"def \w+_path", "file_pattern": "*.py", "context_lines": 1},
        ws,
    )
    assert out.metadata["count"] == 1
    match = out.data["matches"][0]
    assert (match["path"], match["line"], match["column"]) == ("a.py", 3, 1)
    assert match["before"] == [""] and match["after"] == ["    return p"]
    assert text_of(out) == "a.py-2-\na.py:3:def validate_path(p):\na.py-4-    return p"


async def test_case_limit_and_separators(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "a.txt").write_text("".join(f"Item {i}\n" for i in range(30)))
    out = await run_tool(
        SearchCodeTool,
        {"pattern": "item 1", "case_sensitive": False, "max_results": 5, "context_lines": 0},
        ws,
    )
    assert [m["line"] for m in out.data["matches"]] == [2, 11, 12, 13, 14]
    assert out.metadata["truncated"] is True
    assert "\n--\n" in text_of(out)
    assert "[truncated: only the first 5 matches are shown]" in text_of(out)


async def test_invalid_regex(ws: WorkspaceFileAPI) -> None:
    with pytest.raises(ToolValidationFailed, match="not a valid Python regex"):
        await run_tool(SearchCodeTool, {"pattern": "(unclosed"}, ws)


async def test_catastrophic_pattern_is_stopped_per_file(root: Path, ws: WorkspaceFileAPI) -> None:
    # (a|aa)+$ against a long run of 'a' followed by '!' backtracks exponentially
    # (the regex module defuses the classic (a+)+$, but not this one).
    (root / "0_fine.txt").write_text("needle aaaa\n")
    for k in range(3):
        (root / f"evil{k}.txt").write_text("a" * 40 + "!\n")
    (root / "z_fine.txt").write_text("aaa\n")
    out = await run_tool(
        SearchCodeTool,
        {"pattern": r"(a|aa)+$"},
        ws,
        # 1 s: a busy machine can stall a small file's search for a moment;
        # the evil ones need far longer than any budget here.
        options={"file_timeout": 1.0, "max_slow_files": 2},
    )
    assert out.metadata["slow_files"] == ["evil0.txt", "evil1.txt"]
    assert out.metadata["stopped_early"] is True
    assert [m["path"] for m in out.data["matches"]] == ["0_fine.txt"]
    assert "exceeded the per-file time budget" in text_of(out)


async def test_slow_file_is_skipped_and_search_continues(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "a.txt").write_text("a" * 40 + "!\n")
    (root / "b.txt").write_text("aaa\n")
    out = await run_tool(
        SearchCodeTool, {"pattern": r"(a|aa)+$"}, ws, options={"file_timeout": 1.0}
    )
    assert out.metadata["slow_files"] == ["a.txt"]
    assert out.metadata["stopped_early"] is False
    assert [m["path"] for m in out.data["matches"]] == ["b.txt"]


async def test_size_budget_binary_and_non_utf8(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "big.txt").write_text("needle\n" * 2000)
    (root / "bin.dat").write_bytes(b"needle\x00\x01\x02")
    (root / "latin.txt").write_bytes("caf\xe9 needle\n".encode("latin-1"))
    out = await run_tool(
        SearchCodeTool, {"pattern": "needle"}, ws, options={"max_file_bytes": 1000}
    )
    assert out.metadata["skipped_files"] == {"big.txt": "larger than 1000 bytes"}
    assert [m["path"] for m in out.data["matches"]] == ["latin.txt"]
    assert out.data["matches"][0]["text"] == "caf\ufffd needle"


async def test_large_tree(root: Path, ws: WorkspaceFileAPI) -> None:
    for d in range(10):
        folder = root / f"pkg{d}"
        folder.mkdir()
        for f in range(100):
            (folder / f"m{f}.py").write_text(f"def f():\n    return {d * 1000 + f}\n" * 20)
    out = await run_tool(
        SearchCodeTool, {"pattern": r"return 9009$", "max_results": 1000, "context_lines": 0}, ws
    )
    assert out.metadata["files_searched"] == 1000
    assert {m["path"] for m in out.data["matches"]} == {"pkg9/m9.py"}
    assert out.metadata["count"] == 20


@pytest.mark.parametrize("path", ["..", "/etc", "link"])
async def test_search_escapes(root: Path, ws: WorkspaceFileAPI, outside: Path, path: str) -> None:
    (root / "link").symlink_to(outside)
    with pytest.raises(WorkspaceEscape):
        await run_tool(SearchCodeTool, {"pattern": "secret", "path": path}, ws)


async def test_links_out_are_not_searched(root: Path, ws: WorkspaceFileAPI, outside: Path) -> None:
    (root / "link").symlink_to(outside)
    (root / "file_link").symlink_to(outside / "secret.txt")
    for tool in (SearchCodeTool, GrepTool):
        out = await run_tool(tool, {"pattern": "secret"}, ws)
        assert out.metadata["count"] == 0


async def test_search_cancelled(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "a.txt").write_text("a" * 40 + "!\n")
    event = asyncio.Event()
    task = asyncio.ensure_future(
        SearchCodeTool().execute(
            {"pattern": r"(a|aa)+$"},
            # The budget only has to outlast the cancel below; a running
            # file's scan still ends within it, so a long one slows the suite.
            make_context(ws, options={"file_timeout": 2}, cancel_event=event),
        )
    )
    await asyncio.sleep(0.05)
    event.set()
    with pytest.raises(ToolCancelled):
        await task


async def test_catastrophic_pattern_leaves_the_event_loop_running(
    root: Path, ws: WorkspaceFileAPI
) -> None:
    # The scan runs in a thread and regex releases the GIL while it matches:
    # a loop that needed the GIL for the whole budget would get no tick in.
    (root / "evil.txt").write_text("a" * 40 + "!\n")
    ticks = 0
    search = asyncio.ensure_future(
        run_tool(SearchCodeTool, {"pattern": r"(a|aa)+$"}, ws, options={"file_timeout": 1.0})
    )
    while not search.done() and ticks < 1000:
        await asyncio.sleep(0.005)
        ticks += 1
    out = await search
    assert out.metadata["slow_files"] == ["evil.txt"]
    assert ticks >= 20


async def test_python_re_syntax_and_brace_globs(root: Path, ws: WorkspaceFileAPI) -> None:
    (root / "a.ts").write_text("const x = 1\n")
    (root / "b.tsx").write_text("const y = 2\n")
    (root / "c.py").write_text("const = 3\n")
    out = await run_tool(
        SearchCodeTool,
        {"pattern": r"(?P<kw>const)\s+(?P=kw)?\w+ = \d", "file_pattern": "*.{ts,tsx}"},
        ws,
    )
    assert [m["path"] for m in out.data["matches"]] == ["a.ts", "b.tsx"]


# -- grep: every backend gives the same answer ------------------------------------

BACKENDS = ["python", "grep", "rg"]
_CORPUS: dict[str, str | bytes] = {
    "src/app.py": "import os\nNeedle = 1\nprint(needle)\n# NEEDLE in a comment\n",
    "src/util.py": "def needle():\n    return 'needle needle'\n",
    "docs/readme.md": "The needle is here.\r\nCRLF line needle\r\n",
    "docs/unicode.txt": "École needle\nécole NEEDLE\nstraße needle\n",
    "latin1.txt": b"caf\xe9 needle\n",
    "binary.bin": b"needle\x00\x01",
    "late_nul.txt": b"needle\n" + b"x" * 9000 + b"\x00needle\n",
    "ignored.log": "needle in an ignored file\n",
    "build/out.txt": "needle in an ignored folder\n",
    ".gitignore": "*.log\nbuild/\n",
    "-dash.txt": "needle in a file named with a dash\n",
    "sp ace/f.txt": "needle: colon in text: yes\n",
    "no_newline.txt": "last needle",
}


@pytest.fixture
def corpus(root: Path) -> Path:
    for rel, content in _CORPUS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_bytes(content.encode("utf-8"))
    return root


def _available(backend: str) -> None:
    if backend != "python" and shutil.which(backend) is None:
        pytest.skip(f"{backend} is not installed on this machine")


@pytest.mark.parametrize(
    "query",
    [
        {"pattern": "needle"},
        {"pattern": "needle", "case_sensitive": False},
        {"pattern": "école", "case_sensitive": False},
        {"pattern": "needle", "file_pattern": "*.py"},
        {"pattern": "needle", "path": "docs"},
        {"pattern": "needle", "respect_gitignore": False},
        {"pattern": "needle", "max_results": 3},
        {"pattern": ": colon"},
        {"pattern": "not present anywhere"},
        {"pattern": "needle", "path": "src/util.py"},
        {"pattern": "needle", "recursive": False},
    ],
)
async def test_backends_agree(corpus: Path, ws: WorkspaceFileAPI, query: dict[str, object]) -> None:
    answers = {}
    for backend in BACKENDS:
        _available(backend)
        out = await run_tool(GrepTool, dict(query), ws, options={"backend": backend})
        assert out.metadata["backend"] == backend
        answers[backend] = (text_of(out), out.data["matches"], out.metadata["truncated"])
    assert answers["python"] == answers["grep"] == answers["rg"]


async def test_grep_results(corpus: Path, ws: WorkspaceFileAPI) -> None:
    out = await run_tool(GrepTool, {"pattern": "needle"}, ws, options={"backend": "python"})
    found = [(m["path"], m["line"]) for m in out.data["matches"]]
    assert ("docs/readme.md", 1) in found and ("latin1.txt", 1) in found
    assert ("late_nul.txt", 2) in found  # a NUL after the first 8 KiB is still text
    assert not any(p in ("binary.bin", "ignored.log", "build/out.txt") for p, _ in found)
    crlf = next(m for m in out.data["matches"] if m["path"] == "docs/readme.md")
    assert crlf["text"] == "The needle is here."
    latin = next(m for m in out.data["matches"] if m["path"] == "latin1.txt")
    assert latin["text"] == "caf\ufffd needle"
    insensitive = await run_tool(
        GrepTool, {"pattern": "ÉCOLE", "case_sensitive": False}, ws, options={"backend": "python"}
    )
    assert [m["line"] for m in insensitive.data["matches"]] == [1, 2]


async def test_grep_auto_prefers_ripgrep(corpus: Path, ws: WorkspaceFileAPI) -> None:
    out = await run_tool(GrepTool, {"pattern": "needle"}, ws)
    expected = "rg" if shutil.which("rg") else "grep" if shutil.which("grep") else "python"
    assert out.metadata["backend"] == expected


async def test_grep_forced_backend_missing(
    corpus: Path, ws: WorkspaceFileAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(ToolExecutionError, match="backend 'rg' is not installed"):
        await run_tool(GrepTool, {"pattern": "x"}, ws, options={"backend": "rg"})
    out = await run_tool(GrepTool, {"pattern": "needle"}, ws)  # auto falls back to Python
    assert out.metadata["backend"] == "python" and out.metadata["count"] > 0


async def test_grep_bad_input(corpus: Path, ws: WorkspaceFileAPI) -> None:
    with pytest.raises(ToolValidationFailed, match="single line"):
        await run_tool(GrepTool, {"pattern": "a\nb"}, ws)
    with pytest.raises(ToolExecutionError, match="option 'backend' of grep must be one of"):
        await run_tool(GrepTool, {"pattern": "a"}, ws, options={"backend": "ack"})


@pytest.mark.parametrize("path", ["..", "/etc", "link"])
async def test_grep_escapes(root: Path, ws: WorkspaceFileAPI, outside: Path, path: str) -> None:
    (root / "link").symlink_to(outside)
    with pytest.raises(WorkspaceEscape):
        await run_tool(GrepTool, {"pattern": "secret", "path": path}, ws)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_grep_many_files_and_long_names(
    root: Path, ws: WorkspaceFileAPI, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _available(backend)
    # rg/grep get open descriptors in chunks; small chunks here, so that the
    # answer is shown to be stitched together across many runs, in order.
    monkeypatch.setattr(grep_module, "MAX_FD_CHUNK", 100)
    long_dir = root / ("d" * 120)
    long_dir.mkdir()
    for i in range(1200):
        (long_dir / f"{'f' * 60}{i:05d}.txt").write_text("x\n" if i % 100 else "hit\n")
    out = await run_tool(
        GrepTool, {"pattern": "hit", "max_results": 5000}, ws, options={"backend": backend}
    )
    assert out.metadata["count"] == 12
    assert [m["path"][-9:] for m in out.data["matches"]][:2] == ["00000.txt", "00100.txt"]
