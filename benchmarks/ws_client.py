"""The WebSocket client process of the fan-out and scale benchmarks.

Run by ``benchmarks.processes.ClientProcess``; it reads one JSON spec from
stdin::

    {"mode": "measure" | "hold", "urls": [...], "match": "tool.output_delta",
     "expect": 1000, "latency": false, "timeout": 120, "connect_concurrency": 50}

and prints ``{"ready": true, "sockets": n}`` once every socket is open.

- ``measure``: each socket reads until it has received ``expect`` messages
  whose type is ``match``; those carry a publish stamp (``time.monotonic_ns()``
  of the publishing process, the same clock on one Linux machine) at the
  start of ``data.text``. Prints the count, the first stamp and the last
  receive time (for deliveries/s) and, with ``latency``, the distribution of
  publish-to-receive latency over every delivery.
- ``hold``: keeps the sockets open, reading and discarding, until "quit"
  arrives on stdin; prints how many messages arrived and how many sockets the
  server closed meanwhile.

The client must cost much less per message than the server it measures, or
the figures measure the client: with 100 sockets on a 2-core machine a full
WebSocket library spends more per delivery than the server does. So this
speaks the protocol itself (RFC 6455) on a plain asyncio Protocol: the
handshake, unmasked server frames parsed straight from the buffer, pongs for
the server's pings and a close for its close. Messages are counted, not
decoded; a stamp is parsed only where a figure needs it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from benchmarks.report import summarize

_TEXT, _CLOSE, _PING, _CONT = 0x1, 0x8, 0x9, 0x0
_STAMP_KEY = b'"text":"'


class HandshakeError(RuntimeError):
    """The server refused the WebSocket upgrade."""


@dataclass(slots=True)
class Tally:
    """What every socket of one client process received, together."""

    marker: bytes
    expect: int
    latency: bool
    received: int = 0
    complete: int = 0
    other: int = 0
    closed_early: list[str] = field(default_factory=list)
    first_stamp: int | None = None
    first_recv: int | None = None
    last_recv: int = 0
    latencies_us: list[float] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    sockets: int = 0


def _stamp(message: bytes) -> int:
    start = message.find(_STAMP_KEY)
    if start < 0:
        raise ValueError(f"message without a publish stamp: {message[:200]!r}")
    start += len(_STAMP_KEY)
    return int(message[start : message.index(b"|", start)])


def _frame(opcode: int, payload: bytes) -> bytes:
    """A masked client frame (clients must mask)."""
    mask = os.urandom(4)
    length = len(payload)
    if length < 126:
        header = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
    elif length < 65536:
        header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return header + mask + masked


class RawWebSocket(asyncio.Protocol):
    """One client WebSocket: handshake, then frames counted as they arrive."""

    def __init__(self, host: str, path: str, tally: Tally | None) -> None:
        self.host = host
        self.path = path
        self.tally = tally
        self.key = base64.b64encode(os.urandom(16)).decode()
        self.transport: asyncio.Transport | None = None
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed = asyncio.get_running_loop().create_future()
        self.buffer = bytearray()
        self.upgraded = False
        self.fragments = bytearray()
        self.got = 0
        self.messages = 0

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        request = (
            f"GET {self.path} HTTP/1.1\r\nHost: {self.host}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {self.key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        )
        transport.write(request.encode())

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.upgraded:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            status = bytes(self.buffer[: self.buffer.find(b"\r\n")])
            if b" 101 " not in status + b" ":
                self._fail(HandshakeError(bytes(self.buffer[: end + 4]).decode(errors="replace")))
                return
            del self.buffer[: end + 4]
            self.upgraded = True
            if not self.opened.done():
                self.opened.set_result(None)
        self._parse()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(exc or ConnectionError("closed during the handshake"))
        if not self.closed.done():
            self.closed.set_result("connection lost")

    # -- frames -----------------------------------------------------------------------

    def _parse(self) -> None:
        buf = self.buffer
        offset = 0
        size = len(buf)
        while size - offset >= 2:
            b0, b1 = buf[offset], buf[offset + 1]
            length = b1 & 0x7F
            head = 2
            if length == 126:
                if size - offset < 4:
                    break
                length = (buf[offset + 2] << 8) | buf[offset + 3]
                head = 4
            elif length == 127:
                if size - offset < 10:
                    break
                (length,) = struct.unpack_from("!Q", buf, offset + 2)
                head = 10
            if size - offset < head + length:
                break
            payload = bytes(buf[offset + head : offset + head + length])
            offset += head + length
            self._frame(b0 & 0x80, b0 & 0x0F, payload)
        if offset:
            del buf[:offset]

    def _frame(self, fin: int, opcode: int, payload: bytes) -> None:
        if opcode == _PING:
            if self.transport is not None:
                self.transport.write(_frame(0xA, payload))
            return
        if opcode == _CLOSE:
            code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
            reason = f"{code} {payload[2:].decode(errors='replace')}"
            if self.transport is not None:
                self.transport.write(_frame(_CLOSE, payload[:2]))
                self.transport.close()
            if not self.closed.done():
                self.closed.set_result(reason)
            return
        if opcode not in (_TEXT, _CONT):
            return
        if not fin:
            self.fragments += payload
            return
        if self.fragments:
            payload = bytes(self.fragments) + payload
            self.fragments.clear()
        self._message(payload)

    def _message(self, message: bytes) -> None:
        self.messages += 1
        tally = self.tally
        if tally is None:
            return
        if tally.marker not in message:
            tally.other += 1
            return
        if self.got >= tally.expect:
            return
        now = time.monotonic_ns()
        self.got += 1
        tally.received += 1
        tally.last_recv = now
        if tally.latency or self.got == 1:
            stamp = _stamp(message)
            if tally.latency:
                tally.latencies_us.append((now - stamp) / 1000)
            if self.got == 1:
                if tally.first_stamp is None or stamp < tally.first_stamp:
                    tally.first_stamp = stamp
                if tally.first_recv is None or now < tally.first_recv:
                    tally.first_recv = now
        if self.got == tally.expect:
            tally.complete += 1
            if tally.complete == tally.sockets:
                tally.done.set()

    def _fail(self, exc: Exception) -> None:
        if not self.opened.done():
            self.opened.set_exception(exc)
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


async def open_socket(url: str, tally: Tally | None, within: float = 60.0) -> RawWebSocket:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    loop = asyncio.get_running_loop()
    _, protocol = await asyncio.wait_for(
        loop.create_connection(lambda: RawWebSocket(f"{host}:{port}", path, tally), host, port),
        within,
    )
    await asyncio.wait_for(protocol.opened, within)
    return protocol


async def _open_all(urls: list[str], tally: Tally | None, concurrency: int) -> list[RawWebSocket]:
    gate = asyncio.Semaphore(concurrency)

    async def one(url: str) -> RawWebSocket:
        async with gate:
            return await open_socket(url, tally)

    return list(await asyncio.gather(*(one(u) for u in urls)))


def _out(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


async def _measure(socks: list[RawWebSocket], tally: Tally, within: float) -> dict[str, Any]:
    closers = [asyncio.ensure_future(s.closed) for s in socks]
    try:
        await asyncio.wait_for(tally.done.wait(), within)
        timed_out = False
    except TimeoutError:
        timed_out = True
    for sock, closer in zip(socks, closers, strict=True):
        if closer.done() and sock.got < tally.expect:
            tally.closed_early.append(str(closer.result()))
        closer.cancel()
    result: dict[str, Any] = {
        "sockets": len(socks),
        "expected": tally.expect * len(socks),
        "received": tally.received,
        "complete": tally.complete,
        "other_messages": tally.other,
        "timed_out": timed_out,
        "closed_early": tally.closed_early[:5],
        "first_stamp_ns": tally.first_stamp,
        "first_recv_ns": tally.first_recv,
        "last_recv_ns": tally.last_recv,
    }
    if tally.latency:
        result["latency_us"] = summarize(tally.latencies_us)
    return result


async def _hold(socks: list[RawWebSocket]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    # Blocking stdin read off the loop; "quit" (or EOF) ends the hold.
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line or line.strip() == "quit":
            break
    return {
        "sockets": len(socks),
        "messages": sum(s.messages for s in socks),
        "closed": sum(1 for s in socks if s.closed.done()),
    }


async def _main() -> None:
    spec: dict[str, Any] = json.loads(sys.stdin.readline())
    urls = list(spec["urls"])
    tally: Tally | None = None
    if spec["mode"] == "measure":
        tally = Tally(
            marker=f'"type":"{spec["match"]}"'.encode(),
            expect=int(spec["expect"]),
            latency=bool(spec.get("latency")),
            sockets=len(urls),
        )
    socks = await _open_all(urls, tally, int(spec.get("connect_concurrency", 50)))
    _out({"ready": True, "sockets": len(socks)})
    if tally is None:
        result = await _hold(socks)
    else:
        result = await _measure(socks, tally, float(spec.get("timeout", 120)))
    _out(result)
    # The server sees the sockets go when they are aborted; a close handshake
    # per socket would only slow the benchmark down.
    for sock in socks:
        sock.abort()


if __name__ == "__main__":
    asyncio.run(_main())
