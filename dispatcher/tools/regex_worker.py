"""The process search_code runs its regular expression in.

Python's ``re`` cannot be interrupted, and a catastrophic pattern such as
``(a+)+$`` against a long line would hold the interpreter (and with it the
server's event loop) for minutes. So the matching happens here, in a child
process the tool can kill: it announces each file before it starts on it,
and the parent kills it when one file takes longer than its budget.

Run as a script (``python -I -S regex_worker.py``); it imports only the
standard library so it starts in a few milliseconds. Input: one JSON object
on stdin. Output: JSON lines, ``{"start": i}`` then ``{"done": i, ...}`` per
file. Paths arrive already resolved and confined by the parent; each is
checked again against the root in case it was swapped for a link meanwhile.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

SNIFF = 8192
MAX_LINE_CHARS = 2000


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _search_file(
    real: str, root_prefix: str, rx: re.Pattern[str], context: int, limit: int, max_bytes: int
) -> tuple[list[dict[str, Any]], str | None]:
    if not os.path.realpath(real).startswith(root_prefix):
        return [], "left the workspace"
    try:
        with open(real, "rb") as fh:
            if os.fstat(fh.fileno()).st_size > max_bytes:
                return [], f"larger than {max_bytes} bytes"
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        return [], f"unreadable: {exc.strerror}"
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


def main() -> int:
    """Read the job, search every file in order, report as JSON lines."""
    job = json.loads(sys.stdin.read())
    flags = re.IGNORECASE if job["ignore_case"] else 0
    rx = re.compile(job["pattern"], flags)
    root_prefix = job["root"].rstrip("/") + "/"
    remaining = int(job["limit"])
    for index, real in job["files"]:
        if remaining <= 0:
            break
        _emit({"start": index})
        found, skipped = _search_file(
            real, root_prefix, rx, int(job["context"]), remaining, int(job["max_bytes"])
        )
        remaining -= len(found)
        _emit({"done": index, "matches": found, "skipped": skipped})
    return 0


if __name__ == "__main__":
    sys.exit(main())
