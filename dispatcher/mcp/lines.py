"""Splitting a stdio MCP server's output into bounded messages.

A stdio server writes one JSON-RPC message per line. ``LineSplitter`` cuts
the byte stream into lines in time linear in its length (it searches each
chunk once and appends it once) and keeps at most ``limit`` bytes of any
line: a longer line is dropped as it streams, only its first and last
``KEEP`` bytes are kept (``Oversized``), so a hostile server writing a
100 MiB line costs a bounded amount of memory and no parsing at all.

``oversized_id`` finds the request such a line answers (its top-level
``id``, in the kept head, or in the kept tail when the server writes the id
last as the TypeScript SDK does), so the transport can answer that request
with a JSON-RPC error naming the limit while the connection stays up. A
line whose id cannot be found, or that is a request or a notification of the
server's, has nothing to answer: the caller decides (the transport drops
notifications and ends the connection otherwise).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# Bytes kept from each end of a line over the limit, to find its id.
KEEP = 4096
_WS = b" \t\r\n"
_TAIL_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*\}\s*$')
_VALUE = re.compile(rb'\s*(-?\d+|"(?:[^"\\]|\\.)*")')


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line longer than the limit: its size and both ends."""

    size: int
    head: bytes
    tail: bytes


class LineSplitter:
    """Cuts a byte stream into lines of at most ``limit`` bytes (see the module)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._line = bytearray()
        # While a line is over the limit: its size so far, head and tail.
        self._over_size: int | None = None
        self._head = b""
        self._tail = bytearray()

    def feed(self, chunk: bytes) -> list[bytes | Oversized]:
        """The lines ``chunk`` completes (without their newline)."""
        lines: list[bytes | Oversized] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            self._add(chunk[start:] if end < 0 else chunk[start:end])
            if end < 0:
                return lines
            lines.append(self._finish())
            start = end + 1

    def _add(self, piece: bytes) -> None:
        if self._over_size is not None:
            self._over_size += len(piece)
            if len(self._head) < KEEP:  # a limit below KEEP went over early
                self._head += piece[: KEEP - len(self._head)]
            self._tail += piece[-KEEP:]
            del self._tail[:-KEEP]
            return
        self._line += piece
        if len(self._line) > self.limit:
            self._over_size = len(self._line)
            self._head = bytes(self._line[:KEEP])
            self._tail = bytearray(self._line[-KEEP:])
            self._line = bytearray()

    def _finish(self) -> bytes | Oversized:
        if self._over_size is not None:
            line: bytes | Oversized = Oversized(self._over_size, self._head, bytes(self._tail))
            self._over_size = None
            self._head, self._tail = b"", bytearray()
            return line
        done = bytes(self._line)
        self._line = bytearray()
        return done


def top_level_fields(head: bytes) -> dict[bytes, int]:
    """The keys of the JSON object ``head`` begins with, each with the offset
    of its value, as far as ``head`` goes (nested objects are skipped)."""
    fields: dict[bytes, int] = {}
    depth = 0
    want_key = False
    i = 0
    while i < len(head):
        c = head[i : i + 1]
        if c == b'"':
            end = _string_end(head, i)
            if end < 0:
                break
            if depth == 1 and want_key:
                colon = _skip_ws(head, end + 1)
                if head[colon : colon + 1] == b":":
                    fields[head[i + 1 : end]] = colon + 1
                want_key = False
            i = end + 1
            continue
        if c in (b"{", b"["):
            depth += 1
            want_key = c == b"{" and depth == 1
        elif c in (b"}", b"]"):
            depth -= 1
        elif c == b"," and depth == 1:
            want_key = True
        i += 1
    return fields


def oversized_id(line: Oversized) -> tuple[Any, bool]:
    """(the line's top-level ``id`` or None, whether it is the server's own
    request or notification, which carries a ``method``)."""
    fields = top_level_fields(line.head)
    if b"method" in fields:
        return None, True
    if b"id" in fields:
        match = _VALUE.match(line.head, fields[b"id"])
        return (json.loads(match.group(1)) if match else None), False
    match = _TAIL_ID.search(line.tail)
    return (json.loads(match.group(1)) if match else None), False


def _string_end(buf: bytes, start: int) -> int:
    """Index of the quote closing the string opened at ``start``; -1 if cut off."""
    i = start + 1
    while True:
        i = buf.find(b'"', i)
        if i < 0:
            return -1
        backslashes = 0
        while buf[i - 1 - backslashes] == 0x5C:
            backslashes += 1
        if backslashes % 2 == 0:
            return i
        i += 1


def _skip_ws(buf: bytes, i: int) -> int:
    while i < len(buf) and buf[i] in _WS:
        i += 1
    return i
