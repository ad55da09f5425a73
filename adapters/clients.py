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

    The build is the pool's own task: concurrent first uses wait for the same
    one, and a caller cancelled meanwhile (its turn was) cancels only its wait.
    A build that fails is not cached: the next use tries again. Keys hold
    credentials, so they are never logged.
    """

    def __init__(self) -> None:
        self._builds: dict[Hashable, asyncio.Task[Any]] = {}
        self._closed = False

    def __len__(self) -> int:
        """How many clients are built and open."""
        return sum(1 for t in self._builds.values() if _built(t))

    async def get(self, key: Hashable, build: Callable[[], T]) -> T:
        """The client for ``key``; ``build`` (blocking) runs in a worker thread
        the first time only."""
        if self._closed:
            raise RuntimeError("the provider client pool is closed")
        task = self._builds.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(asyncio.to_thread(build))
            # Retrieved here too, in case every waiter was cancelled before it failed.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._builds[key] = task
        try:
            # shield: one waiter being cancelled must not cancel the shared build.
            client: T = await asyncio.shield(task)
        except Exception:
            if self._builds.get(key) is task:
                del self._builds[key]  # not cached: the next use builds again
            raise
        if self._closed:  # shut down while building: aclose() closes what was built
            raise RuntimeError("the provider client pool is closed")
        return client

    async def aclose(self) -> None:
        """Close every client, waiting for builds under way (bounded; errors are
        logged, not raised)."""
        self._closed = True
        builds, self._builds = list(self._builds.values()), {}
        for task in builds:
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    client = await asyncio.shield(task)
                    if isinstance(client, ClosableClient):
                        await client.close()
            except Exception as exc:  # one bad client must not keep the others open
                log.warning("closing a provider client failed: %s", exc)


def _built(task: asyncio.Task[Any]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is None
