"""retrieve_doc: the best passages of the workspace's own docs for a question.

The workspace's Markdown and text files (README, docs/, specs/, ...: see
``DOC_SUFFIXES``) are found with the descriptor walk (.gitignore honoured),
read through the workspace file API, cut into passages (a Markdown section,
split further at blank lines when long) and ranked with SQLite FTS5's bm25
in an in-memory table built for the call: the same ranking as memory_search,
and nothing kept between calls, so an edited doc is searched as it is now.
The passages reach clients as ``ToolOutput.data`` (``RETRIEVE_DOC_OUTPUT``).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dispatcher.memory import fts_query
from dispatcher.tool import BaseTool, ToolContext, ToolOutput
from dispatcher.tools.common import check_cancelled, object_schema, path_property
from dispatcher.tools.search.candidates import Candidate, open_candidates, read_fd
from dispatcher.tools.search.walk import Walk
from dispatcher.tools.shapes import COUNT, LINE, NUMBER, PATH, STRING, array, record
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects, ToolDefinition

DOC_SUFFIXES = (".md", ".markdown", ".mdx", ".txt", ".rst", ".adoc")
MAX_DOC_BYTES = 1024 * 1024
MAX_DOC_FILES = 5000
PASSAGE_CHARS = 1500

RETRIEVE_DOC_OUTPUT = record(
    {
        "passages": array(
            record(
                {
                    "file": PATH,
                    "start_line": LINE,
                    "end_line": LINE,
                    "heading": {"type": "string", "description": "Section heading; '' if none."},
                    "text": STRING,
                    "score": NUMBER,
                }
            ),
            "Best first (higher score).",
        ),
        "files_searched": COUNT,
        "truncated": {"type": "boolean", "description": f"Only {MAX_DOC_FILES} docs searched."},
    }
)


@dataclass(frozen=True, slots=True)
class Passage:
    """A piece of one doc: lines ``start``..``end`` (1-based) under ``heading``."""

    file: str
    start: int
    end: int
    heading: str
    text: str


def split_passages(rel: str, text: str) -> list[Passage]:
    """Markdown sections (a heading line starts one), each cut at blank lines
    into pieces of at most about ``PASSAGE_CHARS``; plain text by paragraphs."""
    lines = text.splitlines()
    out: list[Passage] = []
    heading = ""
    buf: list[str] = []
    start = 1
    in_fence = False

    def flush(end: int) -> None:
        body = "\n".join(buf).strip()
        if body:
            out.append(Passage(rel, start, end, heading, body))

    for i, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            in_fence = not in_fence
        is_heading = not in_fence and stripped.startswith("#") and stripped.lstrip("#")[:1] == " "
        too_long = not in_fence and not stripped and sum(len(b) + 1 for b in buf) >= PASSAGE_CHARS
        if is_heading or too_long:
            flush(i - 1)
            buf, start = [], i
            if is_heading:
                heading = stripped.lstrip("#").strip()
        buf.append(line)
    flush(len(lines))
    return out


def gather_docs(
    ws: WorkspaceFileAPI, path: str, cancelled: Callable[[], bool]
) -> tuple[list[Passage], int, bool]:
    """Every passage of every doc below ``path``; the count of files read and
    whether the walk stopped at ``MAX_DOC_FILES``."""
    docs: list[tuple[int, Candidate]] = []
    truncated = False
    with Walk(
        ws, path, recursive=True, respect_gitignore=True, sizes=True, cancelled=cancelled
    ) as walk:
        for entry in walk:
            if entry.is_dir or entry.target_is_dir or not entry.rel.lower().endswith(DOC_SUFFIXES):
                continue
            if entry.size > MAX_DOC_BYTES:
                continue
            if len(docs) >= MAX_DOC_FILES:
                truncated = True
                break
            docs.append((len(docs), Candidate(entry.rel, entry.size, entry.is_symlink)))
    passages: list[Passage] = []
    for _, cand, fd in open_candidates(ws, docs, MAX_DOC_BYTES):
        try:
            data = read_fd(fd, MAX_DOC_BYTES)
        finally:
            os.close(fd)
        if data is None or b"\x00" in data[:8192]:
            continue
        passages.extend(split_passages(cand.rel, data.decode("utf-8", "replace")))
    return passages, len(docs), truncated


def rank(passages: list[Passage], query: str, limit: int) -> list[tuple[Passage, float]]:
    """The ``limit`` best passages for ``query`` by FTS5 bm25 (heading weighs double)."""
    match = fts_query(query)
    if match is None or not passages:
        return []
    db = sqlite3.connect(":memory:")
    try:
        db.execute(
            "CREATE VIRTUAL TABLE p USING fts5(heading, body, tokenize = 'porter unicode61')"
        )
        db.executemany(
            "INSERT INTO p (rowid, heading, body) VALUES (?, ?, ?)",
            ((i, p.heading, p.text) for i, p in enumerate(passages)),
        )
        rows = db.execute(
            "SELECT rowid, bm25(p, 2.0, 1.0) AS s FROM p WHERE p MATCH ? ORDER BY s LIMIT ?",
            (match, limit),
        ).fetchall()
    finally:
        db.close()
    return [(passages[r[0]], float(r[1])) for r in rows]


class RetrieveDocTool(BaseTool):
    """Searches the workspace's own Markdown and text docs."""

    definition: ToolDefinition = ToolDefinition(
        name="retrieve_doc",
        description=(
            "Search the workspace's own documentation (Markdown, text, reST files such as "
            "README, docs/ and specs/) and return the best-matching passages with their file, "
            "lines and section heading."
        ),
        input_schema=object_schema(
            {
                "query": {"type": "string", "minLength": 1, "maxLength": 2000},
                "path": path_property("Folder to search (default: the workspace root)."),
                "limit": {"type": "integer", "minimum": 1, "maximum": 20},
            },
            ["query"],
        ),
        side_effects=SideEffects.READ,
        output_schema=RETRIEVE_DOC_OUTPUT,
    )
    path_fields: tuple[str, ...] = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "retrieve_doc")
        ws = context.workspace_files
        query: str = input["query"]
        limit: int = input.get("limit", 5)

        def run() -> tuple[list[tuple[Passage, float]], int, bool]:
            passages, files, truncated = gather_docs(
                ws, input.get("path", "."), context.cancel_event.is_set
            )
            return rank(passages, query, limit), files, truncated

        ranked, files, truncated = await asyncio.to_thread(run)
        check_cancelled(context, "retrieve_doc")
        results = [
            {
                "file": p.file,
                "start_line": p.start,
                "end_line": p.end,
                "heading": p.heading,
                "text": p.text,
                "score": round(-score, 6),
            }
            for p, score in ranked
        ]
        text = (
            "\n\n".join(
                f"{r['file']}:{r['start_line']}-{r['end_line']}"
                + (f" ({r['heading']})" if r["heading"] else "")
                + f"\n{r['text']}"
                for r in results
            )
            or f"(no passage of the {files} docs matches)"
        )
        if truncated:
            text += f"\n[only the first {MAX_DOC_FILES} doc files were searched]"
        return ToolOutput.text(
            text,
            metadata={"files_searched": files, "truncated": truncated},
            data={"passages": results, "files_searched": files, "truncated": truncated},
        )
