"""Fixtures for the client tests: the real server (tests.harness), a workspace,
an SDK client, and small helpers that wait with a bound on time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, async_playwright

from clients.sdk import ToolrelayClient
from tests.harness import ServerProcess, server_factory  # noqa: F401

# Debian's chromium, driven by Playwright (no browser download).
CHROMIUM = Path("/usr/bin/chromium")
HAVE_CHROMIUM = CHROMIUM.exists()
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WRITE_A = {"id": "tu1", "name": "write_file", "input": {"path": "a.txt", "content": "hi"}}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    return root


@pytest.fixture(scope="package")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real server for every client test that does not stop or reconfigure it.

    Each test works in its own session, so sharing costs no isolation and saves
    a server start-up (about two seconds) per test.
    """
    process = ServerProcess(tmp_path_factory.mktemp("clients-server")).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def server(shared_server: ServerProcess) -> ServerProcess:
    return shared_server


@pytest.fixture
def own_server(server_factory: Any) -> ServerProcess:  # noqa: F811
    """A server of the test's own, for tests that restart it."""
    started: ServerProcess = server_factory()
    return started


@pytest.fixture
async def sdk(server: ServerProcess) -> AsyncIterator[ToolrelayClient]:
    async with ToolrelayClient(server.base_url, server.token, client_name="sdk-test") as client:
        yield client


async def eventually(
    check: Callable[[], Any | Awaitable[Any]],
    *,
    within: float = 60.0,
    step: float = 0.05,
    what: str = "condition",
) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    last: Any = None
    while loop.time() < deadline:
        last = check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(step)
    raise AssertionError(f"{what} not reached within {within:g} s (last value: {last!r})")


@pytest.fixture
async def own_sdk(own_server: ServerProcess) -> AsyncIterator[ToolrelayClient]:
    async with ToolrelayClient(own_server.base_url, own_server.token, "sdk-test") as client:
        yield client


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Headless Chromium for the dashboard and /docs tests."""
    if not HAVE_CHROMIUM:
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            await launched.close()
