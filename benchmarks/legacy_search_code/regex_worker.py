"""The process search_code runs its regular expression in.

Python's ``re`` cannot be interrupted, and a catastrophic pattern such as
``(a+)+$`` against a long line would hold the interpreter (and with it the
server's event loop) for minutes. So the matching happens here, in a child
process the tool can kill: it announces each file before it starts on it,
and the parent kills it when one file takes longer than its budget.

Run as ``python -I -S -c <this file's source>``: it imports only the
standard library so it starts in a few milliseconds, and it opens no file at
all. The parent reads every file itself, by descriptor from the workspace
root, and sends the bytes; a path swapped for a link meanwhile can therefore
not make this process read anything (and in a sandboxed session it runs in
the sandbox too, seeing only the system folders and the workspace).

Input on stdin: one JSON line (the job), then per file a JSON line
``{"index": i, "size": n}`` followed by exactly n bytes of content, until
EOF. Output: JSON lines, ``{"start": i}`` then ``{"done": i, ...}`` per
file; it stops reading once ``limit`` matches are found.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, BinaryIO

SNIFF = 8192
MAX_LINE_CHARS = 2000


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _search_data(
    data: bytes, rx: re.Pattern[str], context: int, limit: int
) -> tuple[list[dict[str, Any]], str | None]:
    if b"\x00" in data[:SNIFF]:
        return [], "binary"
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
    found: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        m = rx.search(line)
        if m is None:
            continue
        found.append(
            {
                "line": i + 1,
                "column": m.start() + 1,
                "text": line[:MAX_LINE_CHARS],
                "before": [x[:MAX_LINE_CHARS] for x in lines[max(0, i - context) : i]],
                "after": [x[:MAX_LINE_CHARS] for x in lines[i + 1 : i + 1 + context]],
            }
        )
        if len(found) >= limit:
            break
    return found, None


def _read_exact(stream: BinaryIO, size: int) -> bytes | None:
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = stream.read(left)
        if not chunk:
            return None  # the parent stopped sending mid-file
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def main() -> int:
    """Read the job, then search each file as it arrives, reporting as JSON lines."""
    stdin = sys.stdin.buffer
    job = json.loads(stdin.readline())
    flags = re.IGNORECASE if job["ignore_case"] else 0
    rx = re.compile(job["pattern"], flags)
    context = int(job["context"])
    remaining = int(job["limit"])
    while remaining > 0:
        header = stdin.readline()
        if not header:
            break
        meta = json.loads(header)
        data = _read_exact(stdin, int(meta["size"]))
        if data is None:
            break
        index = meta["index"]
        _emit({"start": index})
        found, skipped = _search_data(data, rx, context, remaining)
        remaining -= len(found)
        _emit({"done": index, "matches": found, "skipped": skipped})
    return 0


if __name__ == "__main__":
    sys.exit(main())
