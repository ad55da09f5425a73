"""The shared code index on a generated 10,000-file repository: built in the
background on the first call (with progress), answering later calls, and
updated after edits made through our file tools. No timing is asserted;
every wait is bounded by the tools' own loops and pytest's timeout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dispatcher import WorkspaceFileAPI
from dispatcher.tools.code import FindReferencesTool, FindSymbolTool
from dispatcher.tools.code.index import forget, index_for
from dispatcher.tools.files import PatchFileTool, WriteFileTool
from tests.dispatcher.tools.support import OutputLog, run_tool

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


@pytest.mark.slow
async def test_first_call_indexes_in_the_background_then_answers_and_follows_edits(
    big_repo: Path,
) -> None:
    ws = WorkspaceFileAPI(big_repo)
    log = OutputLog()
    out = await run_tool(FindSymbolTool, {"name": "func_5005"}, ws, emit=log)
    # Only the workspace's own definition: vendor/ is ignored by .gitignore.
    assert [(d["file"], d["line"]) for d in out.metadata["definitions"]] == [
        ("pkg050/mod05005.py", 9)
    ]
    progress = log.text("progress")
    assert "indexing the workspace" in progress
    assert f"indexed {FILES} source files" in progress
    index = index_for(ws.workspace_root)
    assert index.progress.state == "ready" and index.file_count == FILES

    # Later calls answer from the index: no progress, same answers.
    again = OutputLog()
    refs = await run_tool(FindReferencesTool, {"name": "func_5005"}, ws, emit=again)
    assert again.chunks == []
    assert [(r["file"], r["line"]) for r in refs.metadata["references"]] == [
        ("pkg050/mod05006.py", 1),
        ("pkg050/mod05006.py", 6),
    ]
    go = await run_tool(FindSymbolTool, {"name": "GoFunc4001"}, ws)
    assert go.metadata["definitions"][0]["file"] == "pkg040/unit04001.go"

    # An edit through write_file: a new definition and a new use appear ...
    await run_tool(
        WriteFileTool,
        {"path": "pkg099/added.py", "content": "def brand_new():\n    return func_5005(1)\n"},
        ws,
    )
    assert [d["file"] for d in (await run_tool(FindSymbolTool, {"name": "brand_new"}, ws))
            .metadata["definitions"]] == ["pkg099/added.py"]  # fmt: skip
    refs = await run_tool(FindReferencesTool, {"name": "func_5005"}, ws)
    assert ("pkg099/added.py", 2) in [(r["file"], r["line"]) for r in refs.metadata["references"]]

    # ... and a patch_file that renames a definition moves it.
    await run_tool(
        PatchFileTool,
        {"path": "pkg050/mod05005.py", "old_str": "def func_5005(x):", "new_str": "def renamed(x):"},
        ws,
    )
    assert (await run_tool(FindSymbolTool, {"name": "func_5005"}, ws)).metadata[
        "definitions"
    ] == []
    renamed = await run_tool(FindSymbolTool, {"name": "renamed"}, ws)
    assert [(d["file"], d["line"]) for d in renamed.metadata["definitions"]] == [
        ("pkg050/mod05005.py", 9)
    ]
    assert index.file_count == FILES + 1

    # Another session on the same workspace shares the index: no second build.
    other = WorkspaceFileAPI(big_repo)
    shared = OutputLog()
    out = await run_tool(FindSymbolTool, {"name": "Thing9999"}, other, emit=shared)
    assert shared.chunks == [] and out.metadata["definitions"][0]["file"] == "pkg099/mod09999.py"
    other.close()
    ws.close()


async def test_a_deleted_file_leaves_the_index(tmp_path: Path) -> None:
    root = tmp_path / "small"
    root.mkdir()
    (root / "a.py").write_text("def alpha():\n    pass\n")
    (root / "b.py").write_text("from a import alpha\nalpha()\n")
    ws = WorkspaceFileAPI(root)
    try:
        assert len((await run_tool(FindSymbolTool, {"name": "alpha"}, ws)).metadata[
            "definitions"
        ]) == 1  # fmt: skip
        (root / "a.py").unlink()  # by anything (a shell command): the next query notices
        assert (await run_tool(FindSymbolTool, {"name": "alpha"}, ws)).metadata[
            "definitions"
        ] == []
        refs = await run_tool(FindReferencesTool, {"name": "alpha"}, ws)
        assert [(r["file"], r["line"]) for r in refs.metadata["references"]] == [
            ("b.py", 1),
            ("b.py", 2),
        ]
    finally:
        forget(ws.workspace_root)
        ws.close()
