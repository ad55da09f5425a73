"""retrieve_doc: the best passages of the workspace's own Markdown and text docs."""

from __future__ import annotations

from pathlib import Path

from dispatcher import WorkspaceFileAPI
from dispatcher.tools.knowledge.retrieve_doc import RetrieveDocTool, split_passages
from tests.dispatcher.tools.support import run_tool, text_of


def _docs(root: Path) -> None:
    (root / "docs").mkdir()
    (root / "README.md").write_text(
        "# Project\n\nA small server.\n\n## Install\n\nRun `pip install -e .` in a venv.\n\n"
        "## Configuration\n\nThe config file sets the port and the data directory.\n"
    )
    (root / "docs" / "deploy.md").write_text(
        "# Deploying\n\nBuild the image, then push it.\n\n"
        "```\n# not a heading inside a fence\ndocker build .\n```\n\n"
        "## Rollback\n\nTo roll back a deployment, redeploy the previous image tag.\n"
    )
    (root / "notes.txt").write_text("Rollback drills happen every quarter.\n")
    (root / "main.py").write_text("# rollback rollback rollback: code is not a doc\n")
    (root / ".gitignore").write_text("private/\n")
    (root / "private").mkdir()
    (root / "private" / "rollback.md").write_text("# Rollback\n\nrollback rollback secret\n")


async def test_best_passages_first_with_file_lines_and_heading(root: Path) -> None:
    _docs(root)
    ws = WorkspaceFileAPI(root)
    out = await run_tool(RetrieveDocTool, {"query": "how to roll back a deployment"}, ws)
    passages = out.data["passages"]
    first = passages[0]
    assert (first["file"], first["heading"]) == ("docs/deploy.md", "Rollback")
    assert (first["start_line"], first["end_line"]) == (10, 12)
    assert "previous image tag" in first["text"]
    files = {p["file"] for p in passages}
    assert "main.py" not in files and "private/rollback.md" not in files  # not docs / ignored
    assert out.metadata["files_searched"] == 3
    assert "docs/deploy.md:10-12 (Rollback)" in text_of(out)
    config = await run_tool(RetrieveDocTool, {"query": "configure the port", "limit": 1}, ws)
    assert [p["heading"] for p in config.data["passages"]] == ["Configuration"]
    none = await run_tool(RetrieveDocTool, {"query": "kubernetes"}, ws)
    assert none.data["passages"] == [] and "no passage" in text_of(none)


def test_sections_split_at_headings_but_not_inside_fences() -> None:
    text = "intro\n# A\none\n```\n# code\n```\n## B\ntwo\n"
    got = [(p.heading, p.start, p.end) for p in split_passages("x.md", text)]
    assert got == [("", 1, 1), ("A", 2, 6), ("B", 7, 8)]
    long = "# Big\n" + "\n\n".join(["word " * 100] * 10)
    parts = split_passages("y.md", long)
    assert len(parts) > 1 and all(p.heading == "Big" for p in parts)
