from __future__ import annotations

from pathlib import Path

import pytest

from dispatcher import DispatchSession, RulePolicy, ToolDispatcher, WorkspaceFileAPI
from tests.dispatcher.support import RecordingPublisher


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


@pytest.fixture
def dispatcher(publisher: RecordingPublisher) -> ToolDispatcher:
    return ToolDispatcher(publisher)


@pytest.fixture
def workspace(tmp_path: Path) -> WorkspaceFileAPI:
    root = tmp_path / "ws"
    root.mkdir()
    return WorkspaceFileAPI(root)


@pytest.fixture
def session(workspace: WorkspaceFileAPI) -> DispatchSession:
    return DispatchSession(session_id="sess_1", workspace=workspace, policy=RulePolicy())
