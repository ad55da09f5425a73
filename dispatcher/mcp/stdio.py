"""The stdio transport of MCP servers, with every message bounded.

The SDK's ``stdio_client`` joins each chunk of a server's stdout to the text
before it until a newline comes (``buffer + chunk``): one 100 MiB line costs
time quadratic in its length, all of it on the event loop, and is then
parsed whole. This transport is the SDK's (the same process start, pipes
and shutdown, through its helpers) with the reading side replaced:

- stdout is cut into lines by ``LineSplitter`` (dispatcher/mcp/lines.py),
  linear in its length, keeping at most ``max_message_bytes`` of a line;
- a line within the limit is parsed, in a worker thread when it is large
  (``THREAD_PARSE_BYTES``), so parsing megabytes does not hold the loop;
- a line over the limit is dropped as it streams and answered, on the
  client's side, by a JSON-RPC error to the request it answered, naming the
  limit and the key that sets it: that call fails, the connection stays. An
  oversized request or notification of the server's is dropped (logged);
  one whose id cannot be found ends the connection, which the manager
  restarts, since some call would otherwise wait for an answer that was
  thrown away.

It uses private helpers of ``mcp.client.stdio`` (process start, stdout
drain, shutdown) as mcp 2.3 has them; tests/mcp/test_bounds.py runs this
transport against real server processes.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import anyio.to_thread
import mcp_types as types
from mcp.client._transport import TransportStreams
from mcp.client.stdio import (
    StdioServerParameters,
    _aclose_all,
    _create_platform_compatible_process,
    _drain_stdout,
    _stop_server_process,
    get_default_environment,
)
from mcp.os.win32.utilities import ServerProcess
from mcp.shared.message import SessionMessage

from dispatcher.mcp.lines import LineSplitter, Oversized, oversized_id

log = logging.getLogger("toolrelay.mcp")

# Lines longer than this are parsed in a worker thread.
THREAD_PARSE_BYTES = 1024 * 1024
READ_CHUNK = 256 * 1024
# Bounded window for the writer to flush accepted messages before stdin closes.
WRITER_FLUSH_TIMEOUT = 0.5


class MessageTooLarge(ValueError):
    """A server's message over ``max_message_bytes`` was dropped."""


def too_large(server: str, size: int, limit: int) -> str:
    return (
        f"MCP server {server!r} sent a message of {size} bytes, over the limit of "
        f"{limit} bytes (mcp_servers.{server}.max_message_bytes); it was dropped unread"
    )


def parse(line: bytes) -> SessionMessage | Exception:
    """One line as a message, or the parse error as a value (the session logs it)."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


def answer_oversized(line: Oversized, server: str, limit: int) -> SessionMessage | Exception | None:
    """What the session receives for a dropped line: an error answering its
    request, an exception to log (a server request or notification), or
    None when nothing can be answered (the connection must end)."""
    message = too_large(server, line.size, limit)
    request_id, from_server = oversized_id(line)
    if from_server:
        return MessageTooLarge(message + " (a request or notification of the server's)")
    if request_id is None or not isinstance(request_id, int | str):
        return None
    error = types.ErrorData(code=types.INTERNAL_ERROR, message=message)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


@asynccontextmanager
async def bounded_stdio_client(
    params: StdioServerParameters, *, server: str, max_message_bytes: int
) -> AsyncIterator[TransportStreams]:
    """``mcp.client.stdio.stdio_client`` with bounded reading (see the module)."""
    process = await _create_platform_compatible_process(
        command=params.command,
        args=params.args,
        env=get_default_environment() | (params.env or {}),
        errlog=sys.stderr,
        cwd=params.cwd,
    )
    # No awaits until the task group is entered, or a cancellation in the gap
    # would leak the live process (as in the SDK).
    pipes = _Pipes(process, server, max_message_bytes)
    async with anyio.create_task_group() as tg:
        tg.start_soon(pipes.stdout_reader)
        tg.start_soon(pipes.stdin_writer)
        try:
            yield pipes.read_stream, pipes.write_stream
        finally:
            # Shielded and bounded inside, as the SDK's: the process must not leak.
            with anyio.CancelScope(shield=True):
                await pipes.shutdown()
            tg.cancel_scope.cancel()


class _Pipes:
    """A server process's stdout read into the session's stream and the
    session's messages written to its stdin, and their shutdown."""

    def __init__(self, process: ServerProcess, server: str, max_message_bytes: int) -> None:
        self.process = process
        self.server = server
        self.limit = max_message_bytes
        self.read_writer, self.read_stream = anyio.create_memory_object_stream[
            SessionMessage | Exception
        ](0)
        self.write_stream, self.write_reader = anyio.create_memory_object_stream[SessionMessage](0)
        self.writer_done = anyio.Event()
        self.splitter = LineSplitter(max_message_bytes)

    async def deliver(self, line: bytes | Oversized) -> bool:
        """Hand one line to the session; False when the reading must stop."""
        item: SessionMessage | Exception | None
        if isinstance(line, Oversized):
            why = too_large(self.server, line.size, self.limit)
            item = answer_oversized(line, self.server, self.limit)
            if item is None:
                log.error("%s; it answers no request we can find: the connection ends", why)
                await self.read_writer.send(MessageTooLarge(why))
                # Closed before the drain, so the session sees the end now.
                await self.read_writer.aclose()
                return False
            log.warning("%s", why)
        elif not line.strip():
            return True
        elif len(line) > THREAD_PARSE_BYTES:
            item = await anyio.to_thread.run_sync(parse, line)
        else:
            item = parse(line)
        await self.read_writer.send(item)
        return True

    async def stdout_reader(self) -> None:
        stdout = self.process.stdout
        assert stdout, "the server is spawned with pipes"
        try:
            async with self.read_writer:
                try:
                    while True:
                        chunk = await stdout.receive(READ_CHUNK)
                        for line in self.splitter.feed(chunk):
                            if not await self.deliver(line):
                                return
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return
                finally:
                    await _drain_stdout(self.process)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            return  # our own shutdown closed a stream under the read

    async def stdin_writer(self) -> None:
        stdin = self.process.stdin
        assert stdin, "the server is spawned with pipes"
        try:
            async with self.write_reader:
                async for message in self.write_reader:
                    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send((text + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server may still live: close the read side so the session
            # sees the end instead of a request waiting forever.
            await self.read_writer.aclose()
        finally:
            self.writer_done.set()

    async def shutdown(self) -> None:
        self.read_stream.close()
        self.write_stream.close()
        with anyio.move_on_after(WRITER_FLUSH_TIMEOUT):
            await self.writer_done.wait()
        await _stop_server_process(self.process)
        await _aclose_all(self.read_stream, self.write_stream, self.read_writer, self.write_reader)
        await anyio.lowlevel.checkpoint()
