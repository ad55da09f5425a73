"""The server's pre-bound listener gives every connection TCP_NODELAY.

``toolrelay serve`` binds its socket itself (server/startup.py) and hands it
to uvicorn. asyncio turns Nagle off only on accepted sockets whose ``proto``
is IPPROTO_TCP; a listener made with proto 0 left Nagle on, and every small
write (a WebSocket event, the body after the headers of a response) waited
for the client's delayed ACK, about 40 ms (issue 16).
"""

from __future__ import annotations

import asyncio
import socket

from server.startup import bind_listener


async def test_accepted_connections_have_nodelay() -> None:
    sock = bind_listener("127.0.0.1", 0)
    seen: list[int] = []
    accepted = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("socket")
        seen.append(peer.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        accepted.set()
        writer.close()

    server = await asyncio.start_server(handle, sock=sock)
    try:
        port = sock.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        async with asyncio.timeout(60):
            await accepted.wait()
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    assert seen == [1]
