"""Reading one big MCP message over stdio: the SDK's transport against the
bounded one (issue 25, item 6; dispatcher/mcp/stdio.py).

A real hostile server process (tests/security/mcp_attack_server.py) answers
one ``tools/call`` with a text result of N MiB, on one line. For each size
and transport: the wall time of the call and the longest time the event
loop was held (a ticker task sleeping 2 ms records how late it woke up),
which is what every other client of the server waits through.

- sdk: ``mcp.client.stdio.stdio_client`` (joins each chunk to the text
  before it: quadratic in the line's length);
- bounded: ``bounded_stdio_client`` with a limit above the size (the line is
  read and parsed, the parse in a worker thread);
- capped: ``bounded_stdio_client`` with the default limit (32 MiB), for
  sizes past it (the line is dropped as it streams; the call fails).

Run: ``.venv/bin/python -m benchmarks.mcp_stdio_read [MiB ...]`` (default
8 24 48; the SDK transport is skipped past 48 MiB, where it takes minutes).
"""

from __future__ import annotations

import asyncio
import sys
import time
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client

from dispatcher.mcp.config import DEFAULT_MESSAGE_BYTES
from dispatcher.mcp.stdio import bounded_stdio_client

SERVER = str(Path(__file__).parents[1] / "tests" / "security" / "mcp_attack_server.py")
SDK_MAX_MIB = 48


async def _ticker(worst: list[float]) -> None:
    while True:
        before = time.perf_counter()
        await asyncio.sleep(0.002)
        worst[0] = max(worst[0], time.perf_counter() - before - 0.002)


async def _measure(
    transport: AbstractAsyncContextManager[Any], mib: float
) -> tuple[float, float, str]:
    worst = [0.0]
    async with Client(transport, mode="legacy") as client:
        ticker = asyncio.create_task(_ticker(worst))
        started = time.perf_counter()
        try:
            await client.session.send_request(_request(mib), _result_type())
            outcome = "ok"
        except MCPError as exc:
            outcome = f"error: {str(exc)[:60]}"
        elapsed = time.perf_counter() - started
        ticker.cancel()
    return elapsed, worst[0], outcome


def _request(mib: float) -> Any:
    import mcp_types as types

    params = types.CallToolRequestParams(name="huge", arguments={"mb": mib})
    return types.CallToolRequest(params=params)


def _result_type() -> Any:
    import mcp_types as types

    return types.CallToolResult


async def main(sizes: list[float]) -> None:
    params = StdioServerParameters(command=sys.executable, args=[SERVER])
    print(f"{'MiB':>6} {'transport':>9} {'call s':>8} {'loop held ms':>13}  outcome")
    for mib in sizes:
        runs: list[tuple[str, AbstractAsyncContextManager[Any]]] = []
        if mib <= SDK_MAX_MIB:
            runs.append(("sdk", stdio_client(params)))
        over = mib * 1024 * 1024 > DEFAULT_MESSAGE_BYTES
        limit = DEFAULT_MESSAGE_BYTES if over else int(mib * 1024 * 1024) + 1024 * 1024
        runs.append(
            (
                "capped" if over else "bounded",
                bounded_stdio_client(params, server="bench", max_message_bytes=limit),
            )
        )
        for name, transport in runs:
            elapsed, held, outcome = await _measure(transport, mib)
            print(f"{mib:>6g} {name:>9} {elapsed:>8.2f} {held * 1000:>13.1f}  {outcome}")


if __name__ == "__main__":
    asyncio.run(main([float(a) for a in sys.argv[1:]] or [8, 24, 48]))
