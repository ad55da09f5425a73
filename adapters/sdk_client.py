"""The SDK client a provider adapter calls through, and who owns it.

Building an SDK client is slow (its SSL context, mostly), so an adapter
builds one on first use in a worker thread, at once when the caller hands it
an HTTP client (which already holds the SSL context), or takes one from a
``ProviderClients`` pool that outlives turns; a pooled client is closed by
the pool at shutdown, never by the adapter. The Anthropic and OpenAI
adapters share this life cycle; each names how to build its client and the
pool key that identifies it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from adapters.clients import ProviderClients


class _Closable(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


class SDKClientOwner(Generic[C]):
    """The client life cycle above; subclasses define ``_build_client`` and
    ``_pool_key`` and call ``_init_client`` once their settings are set."""

    _client: C | None
    _owns_client: bool

    def _init_client(self, *, eager: bool) -> None:
        self._client = None
        self._owns_client = True
        if eager:
            # The caller's HTTP client already holds the SSL context: cheap.
            self._client = self._build_client()

    def _build_client(self) -> C:
        raise NotImplementedError

    def _pool_key(self) -> Hashable:
        """What identifies this adapter's client in a ``ProviderClients`` pool."""
        raise NotImplementedError

    @property
    def client(self) -> C | None:
        """The SDK client in use (None until the first call or ``use_clients``)."""
        return self._client

    async def use_clients(self, clients: ProviderClients) -> None:
        """Take the SDK client for this adapter's key from ``clients`` (built
        there once, off the event loop); the pool closes it, not us."""
        if self._client is not None:
            return
        self._client = await clients.get(self._pool_key(), self._build_client)
        self._owns_client = False

    async def _sdk(self) -> C:
        if self._client is None:
            self._client = await asyncio.to_thread(self._build_client)
        return self._client

    async def aclose(self) -> None:
        """Close the SDK client's connection pool, if this adapter owns it (a
        client from a pool stays open: the pool closes it at shutdown)."""
        if self._client is not None and self._owns_client:
            client, self._client = self._client, None
            await client.close()
