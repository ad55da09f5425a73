"""grep: literal text search with three interchangeable backends.

ripgrep when installed, else GNU grep, else pure Python, and the same answer
from each. To make that true rather than hoped for, the backends share
everything except the scan itself:

- the file set comes from our own walk (confinement, .gitignore, glob, size
  cap), and is handed to rg/grep as explicit paths;
- binary files are judged by one rule (a NUL in the first 8 KiB), applied by
  us; rg/grep scan with ``-a`` so their own heuristics never kick in;
- lines split on '\\n' with one trailing '\\r' dropped, and decode as UTF-8
  with invalid bytes replaced;
- case-insensitive matching is Unicode simple case folding (rg's default,
  grep under a UTF-8 locale, Python's ``re.IGNORECASE``);
- results are ordered by file (walk order) then line, and cut at the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio.to_thread

from adapters.canonical import SideEffects, ToolDefinition
from dispatcher.errors import ToolExecutionError, ToolValidationError
from dispatcher.tool import ToolContext, ToolOutput
from dispatcher.tools.common import (
    Options,
    check_cancelled,
    clip_line,
    object_schema,
    path_property,
)
from dispatcher.tools.search_files import (
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_FILES,
    Candidate,
    looks_binary,
    sniff_binary,
)
from dispatcher.tools.search_files import gather_candidates as _gather
from dispatcher.workspace import WorkspaceFileAPI

BACKENDS = ("auto", "rg", "grep", "python")
# Bound on the bytes of file names handed to one rg/grep run.
ARGS_CHUNK_BYTES = 64 * 1024
BACKEND_TIMEOUT = 120.0
log = logging.getLogger("toolrelay.tools.grep")


@dataclass(frozen=True, slots=True)
class GrepMatch:
    """One matching line; ``file_index`` orders results by walk order."""

    file_index: int
    path: str
    line: int
    text: str


def choose_backend(requested: str) -> str:
    """The backend to use: the requested one, or the best installed for 'auto'."""
    if requested == "auto":
        if shutil.which("rg"):
            return "rg"
        if shutil.which("grep"):
            return "grep"
        return "python"
    if requested != "python" and shutil.which(requested) is None:
        raise ToolExecutionError(f"grep backend {requested!r} is not installed")
    return requested


class GrepTool:
    """Literal search; see the module docstring for the backend contract."""

    definition: ToolDefinition = ToolDefinition(
        name="grep",
        description=(
            "Search text files for a literal string (not a regex). Returns path:line:text for "
            "each matching line. Honours .gitignore by default."
        ),
        input_schema=object_schema(
            {
                "pattern": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Literal text to find (one line).",
                },
                "path": path_property("Folder or file to search (default: workspace root)."),
                "file_pattern": {
                    "type": "string",
                    "description": "Glob for file names (default '*').",
                },
                "recursive": {"type": "boolean", "description": "Default true."},
                "case_sensitive": {"type": "boolean", "description": "Default true."},
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 5000,
                    "description": "Most matching lines to return (default 100).",
                },
                "respect_gitignore": {"type": "boolean", "description": "Default true."},
            },
            ["pattern"],
        ),
        side_effects=SideEffects.READ,
    )
    path_fields: tuple[str, ...] = ("path",)

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "grep")
        options = Options("grep", context.options)
        backend = choose_backend(options.choice("backend", "auto", BACKENDS))
        max_bytes = options.integer(
            "max_file_bytes", DEFAULT_MAX_FILE_BYTES, minimum=1, maximum=256 * 1024 * 1024
        )
        max_files = options.integer("max_files", DEFAULT_MAX_FILES, minimum=1, maximum=1_000_000)
        pattern: str = input["pattern"]
        if "\n" in pattern or "\r" in pattern:
            raise ToolValidationError("pattern must be a single line of text")
        limit: int = input.get("max_results", 100)
        ignore_case = not input.get("case_sensitive", True)
        ws = context.workspace_files
        cands = await anyio.to_thread.run_sync(
            lambda: _gather(
                ws,
                input.get("path", "."),
                input.get("file_pattern", "*"),
                recursive=input.get("recursive", True),
                respect_gitignore=input.get("respect_gitignore", True),
                max_file_bytes=max_bytes,
                max_files=max_files,
                cancelled=context.cancel_event.is_set,
            )
        )
        check_cancelled(context, "grep")
        if backend == "python":
            found = await anyio.to_thread.run_sync(
                lambda: python_search(
                    ws, cands.files, pattern, ignore_case, limit + 1, context.cancel_event.is_set
                )
            )
        else:
            found = await self._external(backend, ws, cands.files, pattern, ignore_case, limit + 1)
        check_cancelled(context, "grep")
        truncated = len(found) > limit
        found = found[:limit]
        lines = [f"{m.path}:{m.line}:{clip_line(m.text)}" for m in found]
        text = "\n".join(lines) if lines else f"(no matches in {len(cands.files)} files)"
        if truncated:
            text += f"\n[truncated: only the first {limit} matches are shown]"
        return ToolOutput.text(
            text,
            metadata={
                "matches": [{"path": m.path, "line": m.line, "text": m.text} for m in found],
                "count": len(found),
                "truncated": truncated,
                "backend": backend,
                "files_searched": len(cands.files),
                "skipped_files": cands.skipped,
                "file_list_truncated": cands.truncated,
            },
        )

    async def cancel(self) -> bool:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return False
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        return True

    async def _external(
        self,
        backend: str,
        ws: WorkspaceFileAPI,
        files: list[Candidate],
        pattern: str,
        ignore_case: bool,
        limit: int,
    ) -> list[GrepMatch]:
        index = {c.rel: i for i, c in enumerate(files)}
        found: list[GrepMatch] = []
        for chunk in _chunks(files):
            argv = _argv(backend, pattern, ignore_case, limit, [c.rel for c in chunk])
            output = await self._run(argv, ws.workspace_root)
            matches = sorted(_parse_output(output, index), key=lambda m: (m.file_index, m.line))
            binary: dict[int, bool] = {}
            for m in matches:
                if m.file_index not in binary:
                    binary[m.file_index] = sniff_binary(files[m.file_index].real)
                if not binary[m.file_index]:
                    found.append(m)
            if len(found) >= limit:
                break
        return found[:limit]

    async def _run(self, argv: list[str], cwd: str) -> bytes:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C.UTF-8"},
            start_new_session=True,
        )
        self._proc = proc
        try:
            async with asyncio.timeout(BACKEND_TIMEOUT):
                out, err = await proc.communicate()
        except TimeoutError:
            raise ToolExecutionError(
                f"{argv[0]} did not finish within {BACKEND_TIMEOUT:g} s"
            ) from None
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
            self._proc = None
        if proc.returncode not in (0, 1):
            # Status 2 with output: some file vanished or was unreadable; the
            # rest of the answer still holds (Python skips such files too).
            log.warning("%s exited %s: %s", argv[0], proc.returncode, err[-300:])
            if not out and err:
                raise ToolExecutionError(
                    f"{argv[0]} failed: {err.decode('utf-8', 'replace').strip()[-300:]}"
                )
        return out


def _argv(backend: str, pattern: str, ignore_case: bool, limit: int, paths: list[str]) -> list[str]:
    case = ["-i"] if ignore_case else ["-s"] if backend == "rg" else []
    if backend == "rg":
        return [
            "rg", "--no-config", "--no-ignore", "--hidden", "-a", "-F", "-n", "--no-heading",
            "--with-filename", "--null", "--color", "never", *case, "-m", str(limit),
            "-e", pattern, "--", *paths,
        ]  # fmt: skip
    return [
        "grep", "-a", "-F", "-n", "-H", "-Z", "--color=never", *case, "-m", str(limit),
        "-e", pattern, "--", *paths,
    ]  # fmt: skip


def _chunks(files: list[Candidate]) -> list[list[Candidate]]:
    chunks: list[list[Candidate]] = []
    current: list[Candidate] = []
    size = 0
    for c in files:
        if current and size + len(c.rel) + 1 > ARGS_CHUNK_BYTES:
            chunks.append(current)
            current, size = [], 0
        current.append(c)
        size += len(c.rel) + 1
    if current:
        chunks.append(current)
    return chunks


def _parse_output(output: bytes, index: dict[str, int]) -> list[GrepMatch]:
    """Records are ``path NUL line ':' text '\\n'``; a path never holds NUL and
    a line never holds '\\n', so this split is exact."""
    matches: list[GrepMatch] = []
    pos = 0
    end = len(output)
    while pos < end:
        nul = output.find(b"\x00", pos)
        if nul == -1:
            break
        newline = output.find(b"\n", nul)
        if newline == -1:
            newline = end
        path = output[pos:nul].decode("utf-8", "surrogateescape")
        record = output[nul + 1 : newline]
        pos = newline + 1
        number, _, text = record.partition(b":")
        file_index = index.get(path)
        if file_index is None or not number.isdigit():
            continue
        matches.append(GrepMatch(file_index, path, int(number), _decode_line(text)))
    return matches


def _decode_line(raw: bytes) -> str:
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return raw.decode("utf-8", errors="replace")


def python_search(
    ws: WorkspaceFileAPI,
    files: list[Candidate],
    pattern: str,
    ignore_case: bool,
    limit: int,
    cancelled: Callable[[], bool],
) -> list[GrepMatch]:
    """The pure-Python backend; reads every file through the workspace API."""
    needle = pattern.encode("utf-8")
    folded = re.compile(re.escape(pattern), re.IGNORECASE) if ignore_case else None
    found: list[GrepMatch] = []
    for i, cand in enumerate(files):
        if cancelled():
            break
        try:
            data = ws.read_bytes(cand.rel)
        except Exception:
            continue  # vanished or unreadable, as rg/grep would skip it
        if looks_binary(data):
            continue
        if folded is None and needle not in data:
            continue
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        for number, raw in enumerate(lines, start=1):
            if folded is None:
                if needle not in raw:
                    continue
                text = _decode_line(raw)
            else:
                text = _decode_line(raw)
                if folded.search(text) is None:
                    continue
            found.append(GrepMatch(i, cand.rel, number, text))
            if len(found) >= limit:
                return found
    return found
