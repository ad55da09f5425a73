"""Provider SDK clients that live for the server's life, shared by every turn.

Building an ``AsyncOpenAI``/``AsyncAnthropic`` client costs 25-100 ms, nearly
all of it ``ssl.create_default_context()`` inside the SDK's HTTP client; done
per turn on the event loop it stalled every session's events for that long
and opened a new connection to the provider each time. A
:class:`ProviderClients` pool builds each client once, in a worker thread,
keeps it (and so its connection pool) for reuse by every later turn with the
same provider, endpoint and credentials, and closes them all at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeVar, runtime_checkable

log = logging.getLogger(__name__)

T = TypeVar("T")

# A client that does not close within this many seconds at shutdown is abandoned.
CLOSE_TIMEOUT = 5.0


@runtime_checkable
class ClosableClient(Protocol):
    """What the pool needs of an SDK client: an async ``close()``."""

    async def close(self) -> None: ...


@runtime_checkable
class SharedClientAdapter(Protocol):
    """An adapter whose SDK client can come from a :class:`ProviderClients` pool.

    ``use_clients`` fetches (or has the pool build, off the event loop) the
    client for the adapter's provider, endpoint and credentials; the adapter
    then never closes it: the pool does, at shutdown.
    """

    async def use_clients(self, clients: ProviderClients) -> None: ...


class ProviderClients:
    """One SDK client per key (provider, base_url, credentials, timeout), built
    once in a worker thread and shared until :meth:`aclose`.

    Concurrent first uses of a key wait for the same build. A build that fails
    is not cached: the next use tries again. Keys hold credentials, so they are
    never logged.
    """

    def __init__(self) -> None:
        self._clients: dict[Hashable, asyncio.Future[Any]] = {}
        self._closed = False

    def __len__(self) -> int:
        return sum(1 for f in self._clients.values() if f.done() and not f.exception())

    async def get(self, key: Hashable, build: Callable[[], T]) -> T:
        """The client for ``key``; ``build`` (blocking) runs in a worker thread
        the first time only."""
        if self._closed:
            raise RuntimeError("the provider client pool is closed")
        future = self._clients.get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._clients[key] = future
            try:
                client = await asyncio.to_thread(build)
            except BaseException as exc:
                del self._clients[key]
                future.set_exception(exc)
                # Waiters get the error; nobody else needs to retrieve it.
                future.exception()
                raise
            future.set_result(client)
            if self._closed:  # shut down while building: nobody will close it later
                await close_quietly(client)
                raise RuntimeError("the provider client pool is closed")
            return client
        # shield: one waiter being cancelled must not cancel the shared build.
        result: T = await asyncio.shield(future)
        return result

    async def aclose(self) -> None:
        """Close every client (bounded; errors are logged, not raised)."""
        self._closed = True
        futures, self._clients = list(self._clients.values()), {}
        for future in futures:
            if not future.done() or future.cancelled() or future.exception() is not None:
                continue
            client = future.result()
            if not isinstance(client, ClosableClient):
                continue
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await client.close()
            except Exception as exc:  # one bad client must not keep the others open
                log.warning("closing a provider client failed: %s", exc)


async def close_quietly(client: ClosableClient | None) -> None:
    """Close a client this code owns (bounded, never raises)."""
    if client is None:
        return
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await client.close()
