"""Fixtures for the server tests: real servers started as subprocesses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import ServerProcess, server, server_factory  # noqa: F401
from tests.server.plugin_tools import PLUGINS

BASE_CONFIG = {"plugins": {"import_paths": PLUGINS, "entry_points": False}}
# The bus checks every payload against its model: a malformed event fails loudly.
DEBUG_ENV = {"TOOLRELAY_EVENT_DEBUG": "1"}


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for a whole test module (sessions keep tests apart), with the
    test plugin tools loaded."""
    srv = ServerProcess(tmp_path_factory.mktemp("shared"), config=BASE_CONFIG, env=DEBUG_ENV)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / "ws"
    root.mkdir()
    return root
