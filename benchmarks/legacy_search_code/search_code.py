"""search_code: a Python regular expression over the workspace's text files,
with context lines, a file glob and a result cap.

The matching runs in a killable child process (see regex_worker) with a time
budget per file; a file that exceeds it is reported and skipped, and after a
few such files the search stops, so a catastrophic pattern costs seconds, not
the server. Files above a size budget are skipped before any matching.

The worker opens no file: this process reads each one by descriptor from the
workspace root (search_files.open_candidates) and streams its bytes to the
worker's stdin, so a symbolic link swapped in after the walk cannot make
the search read outside the workspace. When the session has a sandbox the
worker runs in it as well (system view plus the Python installation it
needs, workspace read-only), as every process started for a workspace does.
Either way it is its own process group guarded by the child reaper
(process.guarded_exec): a ``kill -9`` of the server ends it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.to_thread

from dispatcher.errors import ToolCancelled, ToolExecutionError, ToolValidationFailed
from dispatcher.process import guarded_exec
from dispatcher.tool import ToolContext, ToolOutput
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
    Candidate,
    gather_candidates,
    open_candidates,
    read_fd,
    sandboxed_reader,
)
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects, ToolDefinition

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regex_worker.py")
# Passed with -c: the worker needs no path of ours visible (in the sandbox, the
# server's source tree is not), and its stdin stays free for the file data.
WORKER_SOURCE = Path(WORKER).read_text(encoding="utf-8")
# The interpreter itself, not a venv's link to it: -I -S uses nothing of the venv.
PYTHON = os.path.realpath(sys.executable)
DEFAULT_FILE_TIMEOUT = 2.0
DEFAULT_MAX_SLOW_FILES = 3
WORKER_IDLE_TIMEOUT = 20.0
# Files read per worker-thread hop while feeding the worker, and their bytes.
FEED_BATCH_FILES = 64
FEED_BATCH_BYTES = 4 * 1024 * 1024


@dataclass(slots=True)
class _Progress:
    matches: list[dict[str, Any]] = field(default_factory=list)
    slow_files: list[str] = field(default_factory=list)
    stopped_early: bool = False


class SearchCodeTool:
    """Regex search with context lines over the workspace."""

    definition: ToolDefinition = ToolDefinition(
        name="search_code",
        description=(
            "Search text files for a Python regular expression (matched line by line). "
            "Returns each match with its line number and surrounding lines. Filter files "
            "with a glob; .gitignore is honoured by default."
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
                    "description": "Glob for file names, e.g. '*.py' (default '*': all).",
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
    )
    path_fields: tuple[str, ...] = ("path",)

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None

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
        pattern: str = input["pattern"]
        ignore_case = not input.get("case_sensitive", True)
        try:
            re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise ToolValidationFailed(f"pattern is not a valid Python regex: {exc}") from exc
        limit: int = input.get("max_results", 50)
        ctx_lines: int = input.get("context_lines", 2)
        ws = context.workspace_files
        cands = await anyio.to_thread.run_sync(
            lambda: gather_candidates(
                ws,
                input.get("path", "."),
                input.get("file_pattern", "*"),
                respect_gitignore=input.get("respect_gitignore", True),
                max_file_bytes=max_bytes,
                max_files=max_files,
                cancelled=context.cancel_event.is_set,
            )
        )
        check_cancelled(context, "search_code")
        job = {
            "pattern": pattern,
            "ignore_case": ignore_case,
            "context": ctx_lines,
            "max_bytes": max_bytes,
        }
        progress = await self._search(cands.files, job, limit + 1, file_timeout, max_slow, context)
        truncated = len(progress.matches) > limit
        matches = progress.matches[:limit]
        text = _render(matches, progress, truncated, limit, len(cands.files))
        return ToolOutput.text(
            text,
            metadata={
                "matches": matches,
                "count": len(matches),
                "truncated": truncated,
                "files_searched": len(cands.files),
                "skipped_files": cands.skipped,
                "file_list_truncated": cands.truncated,
                "slow_files": progress.slow_files,
                "stopped_early": progress.stopped_early,
            },
        )

    async def cancel(self) -> bool:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return False
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return True

    async def _search(
        self,
        files: list[Candidate],
        job: dict[str, Any],
        limit: int,
        file_timeout: float,
        max_slow: int,
        context: ToolContext,
    ) -> _Progress:
        """Run workers until every file is searched, restarting after a file
        that blew its budget; bounded by ``max_slow`` restarts."""
        progress = _Progress()
        pending = list(enumerate(files))
        while pending and len(progress.matches) < limit:
            if len(progress.slow_files) >= max_slow:
                progress.stopped_early = True
                break
            job["limit"] = limit - len(progress.matches)
            slow_index = await self._run_worker(
                job, files, pending, progress, file_timeout, context
            )
            if slow_index is None:
                break
            progress.slow_files.append(files[slow_index].rel)
            pending = [(i, c) for i, c in pending if i > slow_index]
        return progress

    async def _run_worker(
        self,
        job: dict[str, Any],
        files: list[Candidate],
        pending: list[tuple[int, Candidate]],
        progress: _Progress,
        file_timeout: float,
        context: ToolContext,
    ) -> int | None:
        """One worker run over ``pending``; returns the index of the file it
        was killed on, if any."""
        argv = [PYTHON, "-I", "-S", "-c", WORKER_SOURCE]
        if context.sandbox is not None:
            argv = sandboxed_reader(
                context.sandbox, argv, [PYTHON, sys.base_prefix, sys.base_exec_prefix]
            )
        # guarded_exec: its own process group, guarded by the child reaper,
        # so a kill -9 of the server mid-search leaves no worker behind.
        async with guarded_exec(
            argv,
            cwd="/",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={"PATH": os.defpath, "LC_ALL": "C.UTF-8"},
            limit=16 * 1024 * 1024,
        ) as proc:
            return await self._drive_worker(
                proc, job, files, pending, progress, file_timeout, context
            )

    async def _drive_worker(
        self,
        proc: asyncio.subprocess.Process,
        job: dict[str, Any],
        files: list[Candidate],
        pending: list[tuple[int, Candidate]],
        progress: _Progress,
        file_timeout: float,
        context: ToolContext,
    ) -> int | None:
        """Feed the worker and collect its answers (see _run_worker)."""
        self._proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        current: int | None = None
        feeder = asyncio.ensure_future(
            _feed(
                proc.stdin,
                context.workspace_files,
                pending,
                job,
                int(job["max_bytes"]),
            )
        )
        try:
            while True:
                # The per-file budget runs from a file's "start" to its "done";
                # start-up and the hop between files get a fixed, generous one.
                budget = file_timeout if current is not None else WORKER_IDLE_TIMEOUT
                line = await _next_line(proc.stdout, budget, context.cancel_event)
                if line is None:
                    if current is None:
                        raise ToolExecutionError(
                            f"the regex worker stalled for {WORKER_IDLE_TIMEOUT:g} s"
                        )
                    return current
                if not line:
                    break
                msg = json.loads(line)
                if "start" in msg:
                    current = msg["start"]
                    continue
                current = None
                rel = files[msg["done"]].rel
                for match in msg["matches"]:
                    progress.matches.append({"path": rel, **match})
            await proc.wait()
            if proc.returncode != 0:
                assert proc.stderr is not None
                err = (await proc.stderr.read()).decode("utf-8", "replace").strip()
                raise ToolExecutionError(
                    f"the regex worker failed (status {proc.returncode}): {err[-500:]}"
                )
            return None
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeder
            self._proc = None


async def _feed(
    stdin: asyncio.StreamWriter,
    ws: WorkspaceFileAPI,
    pending: list[tuple[int, Candidate]],
    job: dict[str, Any],
    max_bytes: int,
) -> None:
    """Write the job, then each pending file's bytes (read by descriptor, off
    the event loop, a batch per hop) to the worker's stdin, then EOF. The
    worker stopping early (limit reached, or killed) just ends the feed."""
    opened = open_candidates(ws, pending, max_bytes)
    try:
        stdin.write(json.dumps(job).encode("utf-8") + b"\n")
        while True:
            batch = await anyio.to_thread.run_sync(lambda: _read_batch(opened, max_bytes))
            if not batch:
                break
            for index, data in batch:
                stdin.write(json.dumps({"index": index, "size": len(data)}).encode() + b"\n")
                stdin.write(data)
                await stdin.drain()
        stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        return
    finally:
        # Cancelled while a thread still iterates ``opened`` (the worker hit its
        # limit): closing it then raised 'generator already executing', a bug
        # of this version that the thread-based search no longer has.
        with contextlib.suppress(ValueError):
            opened.close()


def _read_batch(
    opened: Iterator[tuple[int, Candidate, int]], max_bytes: int
) -> list[tuple[int, bytes]]:
    """The next few files' contents; a file that grew past the budget or
    cannot be read is left out."""
    batch: list[tuple[int, bytes]] = []
    total = 0
    for index, _, fd in opened:
        try:
            data = read_fd(fd, max_bytes)
        finally:
            os.close(fd)
        if data is None:
            continue
        batch.append((index, data))
        total += len(data)
        if len(batch) >= FEED_BATCH_FILES or total >= FEED_BATCH_BYTES:
            break
    return batch


async def _next_line(
    stream: asyncio.StreamReader, budget: float, cancel_event: asyncio.Event
) -> bytes | None:
    """The next line, b'' at EOF, None after ``budget`` seconds; ToolCancelled on cancel."""
    reader = asyncio.ensure_future(stream.readline())
    waiter = asyncio.ensure_future(cancel_event.wait())
    try:
        done, _ = await asyncio.wait(
            {reader, waiter}, timeout=budget, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        waiter.cancel()
        if not reader.done():
            reader.cancel()
    if reader in done:
        return reader.result()
    if cancel_event.is_set():
        raise ToolCancelled("search_code was cancelled before it finished")
    return None


def _render(
    matches: list[dict[str, Any]], progress: _Progress, truncated: bool, limit: int, searched: int
) -> str:
    out: list[str] = []
    if progress.slow_files:
        out.append(
            "warning: the pattern exceeded the per-file time budget on "
            + ", ".join(progress.slow_files)
            + ("; the search stopped early" if progress.stopped_early else "")
            + ". Simplify the pattern (avoid nested quantifiers like (a+)+)."
        )
    blocks: list[str] = []
    for m in matches:
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
    if truncated:
        out.append(f"[truncated: only the first {limit} matches are shown]")
    return "\n".join(out)
