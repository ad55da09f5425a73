"""Pytest fixtures for the fake provider server.

Import them into a conftest.py::

    from tests.fakes.fixtures import fake_provider, fake_provider_server  # noqa: F401

``fake_provider_server`` is one server for the whole session; ``fake_provider``
hands it to a test with plans and records cleared, and fails the test if a
request arrived that nothing was planned for.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.fake_providers import FakeProviderServer


@pytest.fixture(scope="session")
def fake_provider_server() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        yield server


@pytest.fixture
def fake_provider(fake_provider_server: FakeProviderServer) -> Iterator[FakeProviderServer]:
    fake_provider_server.reset()
    yield fake_provider_server
    unplanned = fake_provider_server.unplanned
    fake_provider_server.reset()
    if unplanned:
        pytest.fail(f"the fake provider got {unplanned} request(s) with no planned reply")
