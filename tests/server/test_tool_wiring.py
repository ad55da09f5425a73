"""The server's side of tool metadata: the timeout it gives each tool
(server/tool_wiring.py) and the option sections a session's tools read
(server/dispatch_factory.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatcher import DispatchSession, ToolDispatcher, WorkspaceFileAPI
from dispatcher.publisher import NullPublisher
from dispatcher.tools import ReadFileTool
from dispatcher.tools.shell.tool import MAX_TIMEOUT, ShellTool
from server.config import Config
from server.dispatch_factory import DispatchSessionFactory
from server.errors import Conflict
from server.store import SessionRecord
from server.tool_wiring import register_tools, timeout_for


def test_timeouts_follow_the_spec_unless_configured(tmp_path: Path) -> None:
    # Nothing configured: no override, the registry's defaults by side effects apply.
    assert timeout_for(ReadFileTool, Config().dispatcher) is None
    # A global default replaces them for tools that declare none and do not
    # time themselves (the shell keeps its backstop).
    plain = Config.model_validate({"dispatcher": {"tool_timeout": 45}})
    assert timeout_for(ReadFileTool, plain.dispatcher) == 45
    assert timeout_for(ShellTool, plain.dispatcher) is None
    configured = Config.model_validate(
        {"dispatcher": {"tool_timeout": 45, "tool_timeouts": {"read_file": 7, "run_command": 20}}}
    )
    assert timeout_for(ReadFileTool, configured.dispatcher) == 7
    timeouts = _registered(tmp_path, configured)
    assert timeouts["read_file"] == 7
    assert timeouts["list_dir"] == 45
    # The shell times its own calls (up to MAX_TIMEOUT): the dispatcher's
    # timeout is a backstop above that, unless the admin set one for it.
    assert timeouts["shell"] == MAX_TIMEOUT + 10
    assert timeouts["run_command"] == 20
    defaults = _registered(tmp_path, Config())
    assert defaults["read_file"] == defaults["write_file"] == 60
    assert defaults["shell"] == MAX_TIMEOUT + 10


def _registered(tmp_path: Path, config: Config) -> dict[str, float]:
    """Each tool's effective timeout, registered as the server registers them."""
    dispatcher = ToolDispatcher()
    register_tools(dispatcher, config)
    session = DispatchSession(session_id="s", workspace=WorkspaceFileAPI(str(tmp_path)))
    try:
        return {e.name: e.timeout for e in dispatcher.entries_for(session)}
    finally:
        session.workspace.close()


def _record(workspace: str) -> SessionRecord:
    return SessionRecord(id="ses_1", workspace=workspace, owner="admin", name=None, model=None)


def test_a_session_gets_its_option_sections_by_name(tmp_path: Path) -> None:
    config = Config.model_validate({"workspaces": {"shell": {"allowed_only": True, "timeout": 33}}})
    factory = DispatchSessionFactory(
        config, sandbox_config=None, memory_store=None, publisher=NullPublisher()
    )
    session = factory(_record(str(tmp_path)))
    try:
        assert session.tool_options["shell"] == {"allowed_only": True, "timeout": 33}
        assert "memory" not in session.tool_options  # no memory store, no section
        assert session.sandbox is None
    finally:
        session.workspace.close()


def test_a_workspace_that_went_away_is_a_conflict(tmp_path: Path) -> None:
    factory = DispatchSessionFactory(
        Config(), sandbox_config=None, memory_store=None, publisher=NullPublisher()
    )
    with pytest.raises(Conflict) as caught:
        factory(_record(str(tmp_path / "gone")))
    assert caught.value.code == "workspace_missing"
