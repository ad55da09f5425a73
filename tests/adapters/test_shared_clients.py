"""Provider SDK clients shared for the server's life (adapters.clients).

Real parts: the official SDKs against the local fake provider server, which
here also records the client address (host, port) of every request, so one
reused TCP connection is visible as one port.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.clients import ProviderClients, SharedClientAdapter
from tests.adapters.helpers import CountingProvider, collect, final, make_adapter, request, user
from tests.fakes.fake_providers import Reply


@pytest.fixture(scope="module")
def counting_provider() -> Iterator[CountingProvider]:
    server = CountingProvider()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def provider(counting_provider: CountingProvider) -> Iterator[CountingProvider]:
    counting_provider.reset()
    counting_provider.peers.clear()
    yield counting_provider
    assert counting_provider.unplanned == 0


class _Closable:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


async def test_one_build_per_key_even_when_asked_at_once() -> None:
    pool = ProviderClients()
    builds: list[threading.Thread] = []

    def build() -> _Closable:
        builds.append(threading.current_thread())
        return _Closable()

    first, second = await asyncio.gather(pool.get("k", build), pool.get("k", build))
    third = await pool.get("k", build)
    other = await pool.get("other", build)
    assert first is second is third
    assert other is not first
    assert len(builds) == 2
    # Built in worker threads, never on the event loop's thread.
    assert threading.main_thread() not in builds
    await pool.aclose()
    assert first.closed and other.closed
    with pytest.raises(RuntimeError, match="closed"):
        await pool.get("k", build)


async def test_a_cancelled_first_caller_does_not_cancel_the_build() -> None:
    pool = ProviderClients()
    started, release = threading.Event(), threading.Event()

    def build() -> _Closable:
        started.set()
        release.wait(5)
        return _Closable()

    first = asyncio.create_task(pool.get("k", build))
    second = asyncio.create_task(pool.get("k", build))
    await asyncio.to_thread(started.wait, 5)
    first.cancel()  # its turn was cancelled while the client was being built
    release.set()
    client = await second
    assert first.cancelled()
    assert await pool.get("k", build) is client
    await pool.aclose()
    assert client.closed


async def test_a_failed_build_is_not_cached() -> None:
    pool = ProviderClients()
    attempts = 0

    def build() -> _Closable:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ValueError("bad base url")
        return _Closable()

    with pytest.raises(ValueError, match="bad base url"):
        await pool.get("k", build)
    client = await pool.get("k", build)
    assert attempts == 2 and len(pool) == 1
    await pool.aclose()
    assert client.closed


@pytest.mark.parametrize("kind", ["anthropic", "openai-compatible"])
async def test_two_calls_share_one_client_and_one_connection(
    provider: CountingProvider, kind: str
) -> None:
    pool = ProviderClients()
    provider.plan(Reply.text("one"), Reply.text("two"))
    clients: list[Any] = []
    for text in ("one", "two"):
        # A fresh adapter per call, as the agent loop makes one per turn.
        adapter = make_adapter(kind, provider)
        assert isinstance(adapter, SharedClientAdapter)
        await adapter.use_clients(pool)
        done = final(await collect(adapter, request(user("hi"))))
        assert done.message.content[0].model_dump()["text"] == text
        clients.append(adapter.client)
        await adapter.aclose()  # the pool's client stays open for the next turn
    assert clients[0] is clients[1]
    assert not clients[0].is_closed()
    # The SDK's stream parsing was primed in the build thread too.
    module = sys.modules[type(adapter).__module__]
    assert module._primed
    assert len(provider.peers) == 2
    assert len(set(provider.peers)) == 1, f"connections opened: {provider.peers}"
    # Both calls carried the key (the OpenAI path posts through the SDK's post).
    for sent in provider.requests:
        if kind == "anthropic":
            assert "sk-test" in str(sent.headers), sent.headers
        else:
            assert sent.headers["authorization"] == "Bearer sk-test"
        assert sent.body["stream"] is True
    await pool.aclose()
    assert clients[0].is_closed()


@pytest.mark.parametrize("kind", ["anthropic", "openai-compatible"])
async def test_an_adapter_without_a_pool_builds_and_closes_its_own_client(
    provider: CountingProvider, kind: str
) -> None:
    provider.plan(Reply.text("alone"))
    adapter = make_adapter(kind, provider)
    assert adapter.client is None  # nothing built on the event loop at construction
    final(await collect(adapter, request(user("hi"))))
    client = adapter.client
    assert client is not None and not client.is_closed()
    await adapter.aclose()
    assert client.is_closed()


async def test_different_credentials_get_different_clients(provider: CountingProvider) -> None:
    pool = ProviderClients()
    first = make_adapter("openai-compatible", provider)
    second = make_adapter("openai-compatible", provider)
    other_key = make_adapter("openai-compatible", provider)
    other_key._api_key = "sk-other"  # what create_adapter would pass for another key
    for adapter in (first, second, other_key):
        await adapter.use_clients(pool)
    assert first.client is second.client
    assert other_key.client is not first.client
    await pool.aclose()
