"""Fixtures of the reliability and security suite: real servers (subprocesses)
with the suite's plugin tools loaded, and payload validation switched on so a
malformed event fails loudly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import ServerProcess, server, server_factory  # noqa: F401
from tests.reliability.plugin_tools import PLUGINS

DEBUG_ENV = {"TOOLRELAY_EVENT_DEBUG": "1"}


def config(**sections: Any) -> dict[str, Any]:
    """A server config with the suite's plugins, plus ``sections``."""
    return {"plugins": {"import_paths": PLUGINS, "entry_points": False}, **sections}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for a whole module (sessions keep the tests apart)."""
    srv = ServerProcess(tmp_path_factory.mktemp("reliability"), config=config(), env=DEBUG_ENV)
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
