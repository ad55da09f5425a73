from __future__ import annotations

from pathlib import Path

import pytest

from dispatcher import WorkspaceFileAPI


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def ws(root: Path) -> WorkspaceFileAPI:
    return WorkspaceFileAPI(root)


@pytest.fixture
def ws_delete(root: Path) -> WorkspaceFileAPI:
    return WorkspaceFileAPI(root, allow_delete=True)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder next to the workspace, with a secret file in it."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("top secret\n")
    return path
