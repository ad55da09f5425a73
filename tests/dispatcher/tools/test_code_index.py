"""The shared code index on a generated 10,000-file repository: built in the
background on the first call (with progress), answering later calls, and
updated after edits made through our file tools (a real dispatcher, reporting
modified files to the same note_modified the server passes it). No timing is
asserted; every wait is bounded by the tools' own loops and pytest's timeout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dispatcher import DispatchSession, PolicyConfig, RulePolicy, ToolDispatcher, WorkspaceFileAPI
from dispatcher.tools import builtin_tool_factories
from dispatcher.tools.code import CODE_TOOLS, FindReferencesTool, FindSymbolTool
from dispatcher.tools.code.index import forget, index_for, note_modified
from protocol.canonical import ToolUseBlock
from tests.dispatcher.support import RecordingPublisher
from tests.dispatcher.tools.support import run_tool

FILES = 10_000
PER_FOLDER = 100


def _generate(root: Path) -> None:
    """FILES small sources in folders of PER_FOLDER: a chain of Python modules,
    each importing and calling its predecessor, with a few Go, TS and Rust
    files mixed in, and an ignored folder."""
    for i in range(FILES):
        folder = root / f"pkg{i // PER_FOLDER:03d}"
        if i % PER_FOLDER == 0:
            folder.mkdir()
        prev = max(i - 1, 0)
        if i % 1000 == 1:
            (folder / f"unit{i:05d}.go").write_text(
                f"package pkg\n\nfunc GoFunc{i}() int {{\n\treturn {i}\n}}\n"
            )
            continue
        (folder / f"mod{i:05d}.py").write_text(
            f"from pkg{prev // PER_FOLDER:03d}.mod{prev:05d} import func_{prev}\n\n\n"
            f"class Thing{i}:\n    def method(self, x):\n        return func_{prev}(x)\n\n\n"
            f"def func_{i}(x):\n    return Thing{i}().method(x)\n"
        )
    (root / ".gitignore").write_text("vendor/\n")
    (root / "vendor").mkdir()
    (root / "vendor" / "lib.py").write_text("def func_5005(x):\n    return x\n")


@pytest.fixture(scope="module")
def big_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("big") / "repo"
    root.mkdir()
    _generate(root)
    yield root
    forget(str(root.resolve()))


class Session:
    """A real dispatcher wired to the code index as the server wires it,
    the built-in and code tools registered, and one yolo session."""

    def __init__(self, root: Path, session_id: str) -> None:
        self.events = RecordingPublisher()
        self.dispatcher = ToolDispatcher(self.events, on_files_modified=note_modified)
        for factory in [*builtin_tool_factories(shell_enabled=False), *CODE_TOOLS]:
            self.dispatcher.register(factory)
        self.session = DispatchSession(
            session_id=session_id,
            workspace=WorkspaceFileAPI(root),
            policy=RulePolicy(PolicyConfig(preset="yolo")),
        )
        self.calls = 0

    async def call(self, tool: str, /, **input: Any) -> dict[str, Any]:
        """The call's structured result (tool.completed's ``structured``; {} for a
        tool that gives none, such as write_file)."""
        self.calls += 1
        tool_use_id = f"tu_{self.calls}"
        block = ToolUseBlock(id=tool_use_id, name=tool, input=input)
        result = await self.dispatcher.dispatch(block, self.session, turn_id="turn_1")
        assert not result.is_error, result
        done = [
            e for e in self.events.events
            if e.type == "tool.completed" and e.data["tool_use_id"] == tool_use_id
        ]  # fmt: skip
        structured: dict[str, Any] = done[0].data.get("structured", {})
        return structured

    def progress(self) -> str:
        return "".join(
            e.data["text"]
            for e in self.events.events
            if e.type == "tool.output_delta" and e.data["stream"] == "progress"
        )


@pytest.mark.slow
async def test_first_call_indexes_in_the_background_then_answers_and_follows_edits(
    big_repo: Path,
) -> None:
    s = Session(big_repo, "sess_big")
    found = await s.call("find_symbol", name="func_5005")
    # Only the workspace's own definition: vendor/ is ignored by .gitignore.
    assert [(d["file"], d["line"]) for d in found["definitions"]] == [("pkg050/mod05005.py", 9)]
    progress = s.progress()
    assert "indexing the workspace" in progress
    assert f"indexed {FILES} source files" in progress
    index = index_for(s.session.workspace.workspace_root)
    assert index.progress.state == "ready" and index.file_count == FILES

    # Later calls answer from the index: no more progress, same answers.
    refs = await s.call("find_references", name="func_5005")
    assert s.progress() == progress
    assert [(r["file"], r["line"]) for r in refs["references"]] == [
        ("pkg050/mod05006.py", 1),
        ("pkg050/mod05006.py", 6),
    ]
    go = await s.call("find_symbol", name="GoFunc4001")
    assert go["definitions"][0]["file"] == "pkg040/unit04001.go"

    # An edit through write_file: a new file, so a full check: a new
    # definition and a new use appear in the next answer ...
    await s.call("write_file", path="pkg099/added.py",
                 content="def brand_new():\n    return func_5005(1)\n")  # fmt: skip
    assert [d["file"] for d in (await s.call("find_symbol", name="brand_new"))["definitions"]] == [
        "pkg099/added.py"
    ]
    refs = await s.call("find_references", name="func_5005")
    assert ("pkg099/added.py", 2) in [(r["file"], r["line"]) for r in refs["references"]]

    # ... and a patch_file renaming a definition moves it: only that file is
    # re-read (note_modified marked it), well inside the automatic interval.
    await s.call("patch_file", path="pkg050/mod05005.py", old_str="def func_5005(x):",
                 new_str="def renamed(x):")  # fmt: skip
    assert (await s.call("find_symbol", name="func_5005"))["definitions"] == []
    renamed = await s.call("find_symbol", name="renamed")
    assert [(d["file"], d["line"]) for d in renamed["definitions"]] == [("pkg050/mod05005.py", 9)]
    assert index.file_count == FILES + 1

    # Another session on the same workspace shares the index: no second build.
    other = Session(big_repo, "sess_other")
    out = await other.call("find_symbol", name="Thing9999")
    assert other.progress() == ""
    assert out["definitions"][0]["file"] == "pkg099/mod09999.py"


async def test_a_deleted_file_leaves_the_index(tmp_path: Path) -> None:
    root = tmp_path / "small"
    root.mkdir()
    (root / "a.py").write_text("def alpha():\n    pass\n")
    (root / "b.py").write_text("from a import alpha\nalpha()\n")
    ws = WorkspaceFileAPI(root)
    try:
        assert len((await run_tool(FindSymbolTool, {"name": "alpha"}, ws)).data[
            "definitions"
        ]) == 1  # fmt: skip
        (root / "a.py").unlink()  # by anything (a shell command): the next query notices
        assert (await run_tool(FindSymbolTool, {"name": "alpha"}, ws)).data["definitions"] == []
        refs = await run_tool(FindReferencesTool, {"name": "alpha"}, ws)
        assert [(r["file"], r["line"]) for r in refs.data["references"]] == [
            ("b.py", 1),
            ("b.py", 2),
        ]
    finally:
        forget(ws.workspace_root)
        ws.close()


async def test_the_tap_updates_edited_files_without_a_full_check(tmp_path: Path) -> None:
    root = tmp_path / "tap"
    root.mkdir()
    (root / "a.py").write_text("def alpha():\n    pass\n")
    (root / "b.py").write_text("def beta():\n    pass\n")
    s = Session(root, "sess_tap")
    # No automatic full check for an hour: only note_modified can bring news.
    s.session.tool_options = {"find_symbol": {"rescan_interval": 3600}}
    try:
        assert len((await s.call("find_symbol", name="alpha"))["definitions"]) == 1
        await s.call("patch_file", path="a.py", old_str="def alpha", new_str="def gamma")
        (root / "b.py").write_text("def delta():\n    pass\n")  # behind our tools' back
        assert (await s.call("find_symbol", name="alpha"))["definitions"] == []
        assert len((await s.call("find_symbol", name="gamma"))["definitions"]) == 1
        # The outside edit waits for the next full check.
        assert len((await s.call("find_symbol", name="beta"))["definitions"]) == 1
        s.session.tool_options = {"find_symbol": {"rescan_interval": 0}}
        assert (await s.call("find_symbol", name="beta"))["definitions"] == []
        assert len((await s.call("find_symbol", name="delta"))["definitions"]) == 1
    finally:
        forget(s.session.workspace.workspace_root)
