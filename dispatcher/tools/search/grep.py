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

The model reads ``path:line:text`` lines; clients get the matches as
``ToolOutput.data`` (``GREP_OUTPUT``), and ``metadata`` keeps how the search
ran (backend, files searched and skipped, count, truncated).

rg and grep never get a name to open. The server opens every file itself,
by descriptor from the workspace root (search_files.open_candidates), and
hands the program ``/proc/self/fd/N`` for each: the kernel resolves such a
name to the very file already open, so a process that swaps a file or folder
for a symbolic link after the walk changes nothing about what is read. When
the session has a sandbox, rg/grep also run inside it with only the system
folders and the read-only workspace visible (``host_view="system"``): a
second wall, should anything ever reach them by name. Either way each run is
its own process group guarded by the child reaper (process.guarded_exec), so
a ``kill -9`` of the server mid-search leaves no rg/grep behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import re
import resource
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dispatcher.errors import ToolExecutionError, ToolValidationFailed
from dispatcher.process import guarded_exec
from dispatcher.sandbox import Sandbox
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
    Candidate,
    CandidateSet,
    open_candidates,
    read_text_files,
    sandboxed_reader,
    sniff_binary_fd,
)
from dispatcher.tools.search.candidates import gather_candidates as _gather
from dispatcher.tools.shapes import COUNT, LINE, PATH, STRING, array, record
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects, ToolDefinition

BACKENDS = ("auto", "rg", "grep", "python")
BACKEND_TIMEOUT = 120.0
FD_DIR = "/proc/self/fd"
MAX_FD_CHUNK = 4096


def _fd_chunk() -> int:
    """Files (open descriptors) handed to one rg/grep run: an eighth of the
    process's descriptor limit (so a few concurrent searches cannot exhaust
    it), at most MAX_FD_CHUNK. Each run costs a process start (and a sandbox
    start), so bigger is faster: raise ``ulimit -n`` for big workspaces."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_FD_CHUNK
    return max(16, min(MAX_FD_CHUNK, soft // 8))


log = logging.getLogger("toolrelay.tools.grep")

GREP_OUTPUT = record(
    {
        "matches": array(
            record({"path": PATH, "line": LINE, "text": STRING}),
            "Matching lines, by file (walk order) then line.",
        ),
        "count": COUNT,
        "truncated": {"type": "boolean", "description": "More lines matched than were returned."},
    }
)


@dataclass(frozen=True, slots=True)
class GrepMatch:
    """One matching line; ``file_index`` orders results by walk order."""

    file_index: int
    path: str
    line: int
    text: str


def choose_backend(requested: str) -> str:
    """The backend to use: the requested one, or the best installed for 'auto'.
    Without /proc (no way to name an open file) only Python can search safely."""
    if requested != "python" and not os.path.isdir(FD_DIR):
        if requested == "auto":
            return "python"
        raise ToolExecutionError(f"grep backend {requested!r} needs {FD_DIR}, which is missing")
    if requested == "auto":
        if shutil.which("rg"):
            return "rg"
        if shutil.which("grep"):
            return "grep"
        return "python"
    if requested != "python" and shutil.which(requested) is None:
        raise ToolExecutionError(f"grep backend {requested!r} is not installed")
    return requested


class GrepTool(BaseTool):
    """Literal search; see the module docstring for the backend contract."""

    definition: ToolDefinition = ToolDefinition(
        name="grep",
        description=(
            "Search text files for LITERAL text: the pattern is matched character for "
            "character, never as a regular expression (use search_code for a regex). "
            "Returns path:line:text for each matching line. Filter files with a glob "
            "such as '*.py' or '*.{ts,tsx}'; .gitignore is honoured by default."
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
                    "description": "Glob for file names, e.g. '*.{ts,tsx}' (default '*').",
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
        output_schema=GREP_OUTPUT,
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
            raise ToolValidationFailed("pattern must be a single line of text")
        limit: int = input.get("max_results", 100)
        ws = context.workspace_files
        cands = await asyncio.to_thread(
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
        ignore_case = not input.get("case_sensitive", True)
        found = await self._search(
            backend, context, cands.files, pattern, ignore_case, wanted(limit), max_bytes
        )
        check_cancelled(context, "grep")
        return _grep_output(cap(found, limit), cands, backend, limit)

    async def _search(
        self,
        backend: str,
        context: ToolContext,
        files: list[Candidate],
        pattern: str,
        ignore_case: bool,
        want: int,
        max_bytes: int,
    ) -> list[GrepMatch]:
        """The matches of ``pattern`` in ``files`` by the chosen backend."""
        ws = context.workspace_files
        if backend == "python":
            return await asyncio.to_thread(
                lambda: python_search(
                    ws, files, pattern, ignore_case, want, context.cancel_event.is_set, max_bytes
                )
            )
        return await self._external(
            backend, ws, files, pattern, ignore_case, want, max_bytes, context.sandbox
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
        max_bytes: int,
        sandbox: Sandbox | None,
    ) -> list[GrepMatch]:
        exe = shutil.which(backend)
        if exe is None:
            raise ToolExecutionError(f"grep backend {backend!r} is not installed")
        opened = open_candidates(ws, enumerate(files), max_bytes)
        chunk_size = _fd_chunk()
        found: list[GrepMatch] = []
        try:
            while len(found) < limit:
                # Opening is file I/O: off the event loop, one chunk per hop.
                chunk = await _open_chunk(opened, chunk_size)
                if not chunk:
                    break
                try:
                    found += await self._run_chunk(
                        exe, backend, chunk, pattern, ignore_case, limit, sandbox
                    )
                finally:
                    for _, _, fd in chunk:
                        os.close(fd)
        finally:
            opened.close()
        return found[:limit]

    async def _run_chunk(
        self,
        exe: str,
        backend: str,
        chunk: list[tuple[int, Candidate, int]],
        pattern: str,
        ignore_case: bool,
        limit: int,
        sandbox: Sandbox | None,
    ) -> list[GrepMatch]:
        """One rg/grep run over files already open in this process; the
        program reads them as /proc/self/fd/N of the descriptors it inherits."""
        by_name = {f"{FD_DIR}/{fd}": (i, cand, fd) for i, cand, fd in chunk}
        argv = _argv(exe, backend, pattern, ignore_case, limit, list(by_name))
        if sandbox is not None:
            argv = sandboxed_reader(sandbox, argv, [exe])
        output = await self._run(argv, [fd for _, _, fd in chunk])
        matches = sorted(
            _parse_output(output, by_name), key=lambda mf: (mf[0].file_index, mf[0].line)
        )
        binary: dict[int, bool] = {}
        kept: list[GrepMatch] = []
        for m, fd in matches:
            if m.file_index not in binary:
                binary[m.file_index] = sniff_binary_fd(fd)
            if not binary[m.file_index]:
                kept.append(m)
        return kept

    async def _run(self, argv: list[str], pass_fds: Sequence[int]) -> bytes:
        # guarded_exec: its own process group, guarded by the child reaper,
        # so a kill -9 of the server mid-search leaves no rg/grep behind.
        async with guarded_exec(
            argv,
            # No workspace name is needed (files come as descriptors); "/"
            # keeps the program's cwd from depending on one.
            cwd="/",
            pass_fds=pass_fds,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C.UTF-8"},
        ) as proc:
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


async def _open_chunk(
    opened: Iterator[tuple[int, Candidate, int]], size: int
) -> list[tuple[int, Candidate, int]]:
    """The next ``size`` opened candidates, opened in a worker thread.

    asyncio.to_thread does not stop the thread when the caller is cancelled,
    and the thread's result holds open descriptors: a cancellation therefore
    waits for the thread, closes what it opened, then propagates (and
    ``opened`` is never closed while the thread still iterates it)."""
    hop = asyncio.ensure_future(asyncio.to_thread(lambda: list(itertools.islice(opened, size))))
    try:
        return await asyncio.shield(hop)
    except asyncio.CancelledError:
        await asyncio.wait([hop])
        if not hop.cancelled() and hop.exception() is None:
            for _, _, fd in hop.result():
                os.close(fd)
        raise


def _argv(
    exe: str, backend: str, pattern: str, ignore_case: bool, limit: int, paths: list[str]
) -> list[str]:
    case = ["-i"] if ignore_case else ["-s"] if backend == "rg" else []
    if backend == "rg":
        # --no-follow: the paths are single files, but should one ever be a
        # folder, rg must not follow links found inside it.
        return [
            exe, "--no-config", "--no-ignore", "--hidden", "--no-follow", "-a", "-F", "-n",
            "--no-heading", "--with-filename", "--null", "--color", "never", *case,
            "-m", str(limit), "-e", pattern, "--", *paths,
        ]  # fmt: skip
    return [
        exe, "-a", "-F", "-n", "-H", "-Z", "--color=never", *case, "-m", str(limit),
        "-e", pattern, "--", *paths,
    ]  # fmt: skip


def _parse_output(
    output: bytes, by_name: dict[str, tuple[int, Candidate, int]]
) -> list[tuple[GrepMatch, int]]:
    """Records are ``path NUL line ':' text '\\n'``; a path never holds NUL and
    a line never holds '\\n', so this split is exact. Each match comes with
    the descriptor of its file."""
    matches: list[tuple[GrepMatch, int]] = []
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
        known = by_name.get(path)
        if known is None or not number.isdigit():
            continue
        index, cand, fd = known
        matches.append((GrepMatch(index, cand.rel, int(number), _decode_line(text)), fd))
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
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> list[GrepMatch]:
    """The pure-Python backend; reads every file by descriptor (open_candidates)."""
    with contextlib.closing(open_candidates(ws, enumerate(files), max_file_bytes)) as opened:
        return _python_scan(opened, pattern, ignore_case, limit, cancelled, max_file_bytes)


def _python_scan(
    opened: Iterator[tuple[int, Candidate, int]],
    pattern: str,
    ignore_case: bool,
    limit: int,
    cancelled: Callable[[], bool],
    max_file_bytes: int,
) -> list[GrepMatch]:
    needle = pattern.encode("utf-8")
    folded = re.compile(re.escape(pattern), re.IGNORECASE) if ignore_case else None
    found: list[GrepMatch] = []
    for i, cand, data in read_text_files(opened, max_file_bytes, cancelled):
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


def _grep_output(
    shown: Capped[GrepMatch], cands: CandidateSet, backend: str, limit: int
) -> ToolOutput:
    """The matches shown as ``path:line:text`` lines, with the counts clients read."""
    lines = [f"{m.path}:{m.line}:{clip_line(m.text)}" for m in shown.items]
    text = "\n".join(lines) if lines else f"(no matches in {len(cands.files)} files)"
    if shown.truncated:
        text += "\n" + shown.notice(limit)
    return ToolOutput.text(
        text,
        metadata={
            "count": shown.count,
            "truncated": shown.truncated,
            "backend": backend,
            "files_searched": len(cands.files),
            "skipped_files": cands.skipped,
            "file_list_truncated": cands.truncated,
        },
        data={
            "matches": [{"path": m.path, "line": m.line, "text": m.text} for m in shown.items],
            "count": shown.count,
            "truncated": shown.truncated,
        },
    )
