"""search_code: a Python regular expression over the workspace's text files,
with context lines, a file glob and a result cap.

The matching (regex_scan) runs in a worker thread with the ``regex``
module's per-search timeout: a file that exceeds its time budget is
reported and skipped, and after a few such files the search stops, so a
catastrophic pattern costs seconds, not the server; ``regex`` releases the
GIL while it matches, so the event loop keeps running meanwhile. Files
above a size budget are skipped before any matching. Every file is read by
descriptor from the workspace root (candidates.open_candidates), so a
symbolic link swapped in after the walk cannot make the search read outside
the workspace.

The model reads grep-like blocks with context; clients get the matches as
``ToolOutput.data`` (``SEARCH_CODE_OUTPUT``), and ``metadata`` keeps how the
search ran (files searched and skipped, slow files, count, truncated).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import regex

from dispatcher.errors import ToolValidationFailed
from dispatcher.tool import BaseTool, ToolContext, ToolOutput
from dispatcher.tools.capped import Capped, cap, wanted
from dispatcher.tools.common import (
    Options,
    check_cancelled,
    clip_line,
    object_schema,
    path_property,
)
from dispatcher.tools.search.candidates import (
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_FILES,
    CandidateSet,
    gather_candidates,
    open_candidates,
)
from dispatcher.tools.search.regex_scan import LinePattern, ScanResult, compile_pattern, scan
from dispatcher.tools.shapes import COUNT, LINE, PATH, STRING, array, record
from protocol.canonical import SideEffects, ToolDefinition

DEFAULT_FILE_TIMEOUT = 2.0
DEFAULT_MAX_SLOW_FILES = 3

# The match dicts of regex_scan._scan_text, with the file's path.
SEARCH_CODE_OUTPUT = record(
    {
        "matches": array(
            record(
                {
                    "path": PATH,
                    "line": LINE,
                    "column": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "1-based column (characters) where the match starts.",
                    },
                    "text": STRING,
                    "before": array(STRING, "Context lines before the match."),
                    "after": array(STRING, "Context lines after the match."),
                }
            )
        ),
        "count": COUNT,
        "truncated": {"type": "boolean", "description": "More lines matched than were returned."},
    }
)


class SearchCodeTool(BaseTool):
    """Regex search with context lines over the workspace."""

    definition: ToolDefinition = ToolDefinition(
        name="search_code",
        description=(
            "Search text files with a REGULAR EXPRESSION (Python re syntax, matched line "
            "by line; escape . ( [ etc. to match them literally, or use grep for plain "
            "text). Returns each match with its line number and surrounding lines. "
            "Filter files with a glob such as '*.py' or '*.{ts,tsx}'; .gitignore is "
            "honoured by default."
        ),
        input_schema=object_schema(
            {
                "pattern": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Python regular expression.",
                },
                "path": path_property("Folder or file to search (default: workspace root)."),
                "file_pattern": {
                    "type": "string",
                    "description": "Glob for file names, e.g. '*.py' or '*.{ts,tsx}' "
                    "(default '*': all).",
                },
                "context_lines": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 20,
                    "description": "Lines before and after each match (default 2).",
                },
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 1000,
                    "description": "Most matches to return (default 50).",
                },
                "case_sensitive": {"type": "boolean", "description": "Default true."},
                "respect_gitignore": {"type": "boolean", "description": "Default true."},
            },
            ["pattern"],
        ),
        side_effects=SideEffects.READ,
        output_schema=SEARCH_CODE_OUTPUT,
    )
    path_fields: tuple[str, ...] = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "search_code")
        options = Options("search_code", context.options)
        file_timeout = options.number(
            "file_timeout", DEFAULT_FILE_TIMEOUT, minimum=0.01, maximum=60.0
        )
        max_slow = options.integer("max_slow_files", DEFAULT_MAX_SLOW_FILES, minimum=1, maximum=100)
        max_bytes = options.integer(
            "max_file_bytes", DEFAULT_MAX_FILE_BYTES, minimum=1, maximum=256 * 1024 * 1024
        )
        max_files = options.integer("max_files", DEFAULT_MAX_FILES, minimum=1, maximum=1_000_000)
        rx = _compile(input["pattern"], ignore_case=not input.get("case_sensitive", True))
        limit: int = input.get("max_results", 50)
        ctx_lines: int = input.get("context_lines", 2)
        ws = context.workspace_files
        cands = await asyncio.to_thread(
            gather_candidates,
            ws,
            input.get("path", "."),
            input.get("file_pattern", "*"),
            respect_gitignore=input.get("respect_gitignore", True),
            max_file_bytes=max_bytes,
            max_files=max_files,
            cancelled=context.cancel_event.is_set,
        )
        check_cancelled(context, "search_code")
        # Set when this coroutine ends for any reason (cancelled, timed out):
        # the thread stops at the next file instead of scanning on unseen.
        abandoned = threading.Event()
        opened = open_candidates(ws, enumerate(cands.files), max_bytes)
        try:
            progress = await asyncio.to_thread(
                scan,
                opened,
                rx,
                context=ctx_lines,
                limit=wanted(limit),
                file_timeout=file_timeout,
                max_slow=max_slow,
                max_bytes=max_bytes,
                cancelled=lambda: abandoned.is_set() or context.cancel_event.is_set(),
            )
        finally:
            abandoned.set()
        check_cancelled(context, "search_code")
        return _search_output(cap(progress.matches, limit), progress, cands, limit)


def _search_output(
    shown: Capped[dict[str, Any]], progress: ScanResult, cands: CandidateSet, limit: int
) -> ToolOutput:
    """The matches shown with their context, and the counts clients read."""
    return ToolOutput.text(
        _render(shown, progress, limit, len(cands.files)),
        metadata={
            "count": shown.count,
            "truncated": shown.truncated,
            "files_searched": len(cands.files),
            "skipped_files": cands.skipped,
            "file_list_truncated": cands.truncated,
            "slow_files": progress.slow_files,
            "stopped_early": progress.stopped_early,
        },
        data={"matches": shown.items, "count": shown.count, "truncated": shown.truncated},
    )


def _compile(pattern: str, *, ignore_case: bool) -> LinePattern:
    """The search pattern compiled, or a validation error naming what is wrong."""
    try:
        return compile_pattern(pattern, ignore_case=ignore_case)
    except regex.error as exc:
        raise ToolValidationFailed(f"pattern is not a valid Python regex: {exc}") from exc


def _render(shown: Capped[dict[str, Any]], progress: ScanResult, limit: int, searched: int) -> str:
    out: list[str] = []
    if progress.slow_files:
        out.append(
            "warning: the pattern exceeded the per-file time budget on "
            + ", ".join(progress.slow_files)
            + ("; the search stopped early" if progress.stopped_early else "")
            + ". Simplify the pattern (avoid nested quantifiers like (a+)+)."
        )
    blocks: list[str] = []
    for m in shown.items:
        lines: list[str] = []
        first = m["line"] - len(m["before"])
        for k, text in enumerate(m["before"]):
            lines.append(f"{m['path']}-{first + k}-{clip_line(text)}")
        lines.append(f"{m['path']}:{m['line']}:{clip_line(m['text'])}")
        for k, text in enumerate(m["after"]):
            lines.append(f"{m['path']}-{m['line'] + 1 + k}-{clip_line(text)}")
        blocks.append("\n".join(lines))
    if blocks:
        out.append("\n--\n".join(blocks))
    else:
        out.append(f"(no matches in {searched} files)")
    if shown.truncated:
        out.append(shown.notice(limit))
    return "\n".join(out)
