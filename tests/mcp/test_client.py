"""toolrelay consuming MCP servers: the real test server over stdio and over
streamable HTTP, behind the dispatcher (validation, policy, confirmation,
cancellation, events), its crash and restart, and a tool-list change."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dispatcher import DispatchSession, RulePolicy, ToolDispatcher, WorkspaceFileAPI
from dispatcher.mcp import McpManager, McpServerConfig
from protocol.canonical import ImageBlock, SideEffects, TextBlock, ToolUseBlock
from tests.dispatcher.support import RecordingPublisher
from tests.mcp.support import http_server, stdio_command, until

pytestmark = pytest.mark.timeout(300)


def stdio_config(cwd: Path, **extra: Any) -> McpServerConfig:
    command, args = stdio_command()
    return McpServerConfig(command=command, args=args, cwd=str(cwd), **extra)


@pytest.fixture
def server_dir(tmp_path: Path) -> Path:
    d = tmp_path / "srv"
    d.mkdir()
    return d


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


@pytest.fixture
def dispatcher(publisher: RecordingPublisher) -> ToolDispatcher:
    return ToolDispatcher(publisher, cancel_grace=5.0)


@pytest.fixture
def session(tmp_path: Path) -> DispatchSession:
    ws = tmp_path / "ws"
    ws.mkdir()
    return DispatchSession("sess_1", WorkspaceFileAPI(ws), policy=RulePolicy())


class Changes:
    def __init__(self) -> None:
        self.seen: list[tuple[list[str], list[str], str]] = []

    def __call__(self, added: list[str], removed: list[str], source: str) -> None:
        self.seen.append((added, removed, source))


async def started(
    dispatcher: ToolDispatcher, config: McpServerConfig, changes: Changes | None = None
) -> McpManager:
    manager = McpManager(
        {"t": config}, dispatcher, on_tools_changed=changes, backoff_base=0.1, stable_after=60
    )
    await manager.start(wait=30)
    return manager


@pytest.fixture
async def stdio_manager(
    dispatcher: ToolDispatcher, server_dir: Path
) -> AsyncIterator[tuple[McpManager, Changes]]:
    changes = Changes()
    config = stdio_config(
        server_dir,
        side_effects=SideEffects.READ,
        tools={"write_note": {"side_effects": "write"}, "slow": {"timeout": 30}},
    )
    manager = await started(dispatcher, config, changes)
    try:
        yield manager, changes
    finally:
        await manager.stop()


def use(name: str, tool_input: dict[str, Any], id: str = "tu1") -> ToolUseBlock:
    return ToolUseBlock(id=id, name=name, input=tool_input)


def texts(result: Any) -> str:
    return "".join(b.text for b in result.content if isinstance(b, TextBlock))


async def test_tools_are_registered_translated_and_skipped_with_pointer(
    stdio_manager: tuple[McpManager, Changes], dispatcher: ToolDispatcher
) -> None:
    manager, changes = stdio_manager
    [state] = manager.states()
    assert state["state"] == "ready" and state["restarts"] == 0
    assert "mcp_t_echo" in dispatcher.names() and "mcp_t_lookup" in dispatcher.names()
    # The oneOf schema is not registered; the state names the construct and pointer.
    assert "mcp_t_choose" not in dispatcher.names()
    [skipped] = state["skipped"]
    assert skipped["tool"] == "choose" and skipped["pointer"] == "/properties/pick/oneOf"
    assert "oneOf" in skipped["error"]
    assert changes.seen and changes.seen[0][2] == "mcp:t"
    lookup = next(e for e in dispatcher._registry.entries() if e.name == "mcp_t_lookup")
    schema = lookup.definition.input_schema
    assert schema["properties"]["item"]["properties"]["tag"]["enum"] == ["a", "b"]
    assert schema["required"] == ["item"]  # the nullable field became optional
    # Declared per server and per tool; undeclared would be network.
    assert lookup.definition.side_effects is SideEffects.READ
    write = next(e for e in dispatcher._registry.entries() if e.name == "mcp_t_write_note")
    assert write.definition.side_effects is SideEffects.WRITE


async def test_calls_map_text_images_structured_and_errors(
    stdio_manager: tuple[McpManager, Changes],
    dispatcher: ToolDispatcher,
    session: DispatchSession,
    publisher: RecordingPublisher,
) -> None:
    result = await dispatcher.dispatch(use("mcp_t_echo", {"text": "hi"}), session, turn_id="t")
    assert not result.is_error and texts(result) == "echo: hi"
    result = await dispatcher.dispatch(
        use("mcp_t_add", {"a": 2, "b": 3}, "tu2"), session, turn_id="t"
    )
    assert texts(result) == "5"
    done = [e for e in publisher.events if e.type == "tool.completed"][-1]
    assert done.data["structured"] == {"sum": 5}
    result = await dispatcher.dispatch(use("mcp_t_picture", {}, "tu3"), session, turn_id="t")
    assert isinstance(result.content[0], ImageBlock)
    assert result.content[0].media_type == "image/png"
    result = await dispatcher.dispatch(use("mcp_t_fail", {}, "tu4"), session, turn_id="t")
    assert result.is_error and "on purpose" in texts(result)
    failed = [e for e in publisher.events if e.type == "tool.failed"][-1]
    assert failed.data["error_class"] == "execution_error"
    # $ref-inlined schema: the input is validated before the server sees it.
    result = await dispatcher.dispatch(
        use("mcp_t_lookup", {"item": {"id": "x"}}, "tu5"), session, turn_id="t"
    )
    assert result.is_error and publisher.events[-1].type == "tool.input_invalid"
    result = await dispatcher.dispatch(
        use("mcp_t_lookup", {"item": {"id": 7, "tag": "a"}, "note": None}, "tu6"),
        session,
        turn_id="t",
    )
    assert texts(result) == "item 7 note None"


async def test_structured_output_is_checked_against_the_translated_output_schema(
    stdio_manager: tuple[McpManager, Changes],
    dispatcher: ToolDispatcher,
    session: DispatchSession,
    publisher: RecordingPublisher,
) -> None:
    manager, _ = stdio_manager
    entries = {e.name: e for e in dispatcher._registry.entries()}
    # The server's outputSchema, in the subset, is the definition's output_schema.
    assert entries["mcp_t_add"].definition.output_schema == {
        "type": "object",
        "properties": {"sum": {"type": "integer"}},
        "required": ["sum"],
    }
    # A result that breaks the server's own schema: execution_error naming the path.
    result = await dispatcher.dispatch(use("mcp_t_bad_add", {}), session, turn_id="t")
    assert result.is_error and "at '/sum'" in texts(result)
    failed = publisher.events[-1]
    assert failed.type == "tool.failed" and failed.data["error_class"] == "execution_error"
    assert "at '/sum'" in failed.data["message"]
    # The connection is fine: a bad result is the tool's bug, not a dead server.
    assert manager.states()[0]["restarts"] == 0 and manager.states()[0]["state"] == "ready"
    # An outputSchema outside the subset (pattern) is dropped, with the reason
    # and pointer; the tool stays, and its structured result passes unchecked.
    assert entries["mcp_t_code"].definition.output_schema is None
    [dropped] = manager.states()[0]["output_schemas_dropped"]
    assert dropped["tool"] == "code" and dropped["pointer"] == "/properties/code/pattern"
    result = await dispatcher.dispatch(use("mcp_t_code", {}, "tu2"), session, turn_id="t")
    assert not result.is_error and texts(result) == '{"code": "abc"}'
    done = publisher.events[-1]
    assert done.type == "tool.completed" and done.data["structured"] == {"code": "abc"}


async def test_write_tool_asks_and_runs_after_allow(
    stdio_manager: tuple[McpManager, Changes],
    dispatcher: ToolDispatcher,
    session: DispatchSession,
    publisher: RecordingPublisher,
    server_dir: Path,
) -> None:
    call = asyncio.create_task(
        dispatcher.dispatch(
            use("mcp_t_write_note", {"name": "n.txt", "content": "x"}), session, turn_id="t"
        )
    )
    asked = await publisher.wait_for("tool.confirmation_requested")
    assert '"name": "n.txt"' in asked.data["preview"]["text"] or "n.txt" in str(asked.data)
    dispatcher.broker.resolve(asked.data["request_id"], "allow", resolved_by="test")
    result = await asyncio.wait_for(call, 60)
    assert not result.is_error
    assert (server_dir / "n.txt").read_text() == "x"


async def test_cancel_sends_cancellation_to_the_server(
    stdio_manager: tuple[McpManager, Changes],
    dispatcher: ToolDispatcher,
    session: DispatchSession,
    publisher: RecordingPublisher,
    server_dir: Path,
) -> None:
    call = asyncio.create_task(
        dispatcher.dispatch(use("mcp_t_slow", {"seconds": 20}), session, turn_id="t")
    )
    await publisher.wait_for("tool.output_delta")  # progress arrived: it is running
    await dispatcher.cancel_session_tools("sess_1")
    result = await asyncio.wait_for(call, 60)
    assert result.is_error
    assert publisher.events[-1].data["error_class"] == "cancelled"
    await until(lambda: (server_dir / "cancelled.txt").exists())


async def test_crash_mid_call_is_execution_error_then_restart(
    stdio_manager: tuple[McpManager, Changes],
    dispatcher: ToolDispatcher,
    session: DispatchSession,
    publisher: RecordingPublisher,
) -> None:
    manager, changes = stdio_manager
    seen_before = len(changes.seen)
    result = await dispatcher.dispatch(use("mcp_t_crash", {}), session, turn_id="t")
    assert result.is_error
    assert publisher.events[-1].data["error_class"] == "execution_error"
    assert "restarted" in texts(result)
    await until(
        lambda: manager.states()[0]["restarts"] >= 1 and manager.states()[0]["state"] == "ready",
        within=30,
    )
    # Same tools after the restart: no tools.changed.
    assert len(changes.seen) == seen_before
    result = await dispatcher.dispatch(
        use("mcp_t_echo", {"text": "back"}, "tu2"), session, turn_id="t"
    )
    assert texts(result) == "echo: back"


async def test_list_change_updates_the_registry_once(
    stdio_manager: tuple[McpManager, Changes], dispatcher: ToolDispatcher, session: DispatchSession
) -> None:
    manager, changes = stdio_manager
    before = len(changes.seen)
    assert "mcp_t_extra" not in dispatcher.names()
    await dispatcher.dispatch(use("mcp_t_grow", {}), session, turn_id="t")
    await until(lambda: "mcp_t_extra" in dispatcher.names())
    await asyncio.sleep(0.3)
    assert changes.seen[before:] == [(["mcp_t_extra"], [], "mcp:t")]
    assert "mcp_t_extra" in manager.states()[0]["tools"]


async def test_undeclared_side_effects_are_network_and_ask(
    dispatcher: ToolDispatcher,
    server_dir: Path,
    session: DispatchSession,
    publisher: RecordingPublisher,
) -> None:
    manager = await started(dispatcher, stdio_config(server_dir))
    try:
        entry = next(e for e in dispatcher._registry.entries() if e.name == "mcp_t_echo")
        assert entry.definition.side_effects is SideEffects.NETWORK
        call = asyncio.create_task(
            dispatcher.dispatch(use("mcp_t_echo", {"text": "q"}), session, turn_id="t")
        )
        asked = await publisher.wait_for("tool.confirmation_requested")
        dispatcher.broker.resolve(
            asked.data["request_id"], "deny", resolved_by="test", message="not now"
        )
        result = await asyncio.wait_for(call, 60)
        assert result.is_error and "not now" in texts(result)
    finally:
        await manager.stop()


async def test_streamable_http_server(
    dispatcher: ToolDispatcher, server_dir: Path, session: DispatchSession
) -> None:
    with http_server(server_dir) as url:
        config = McpServerConfig(url=url, side_effects=SideEffects.READ)
        manager = await started(dispatcher, config)
        try:
            assert manager.states()[0]["state"] == "ready", manager.states()
            result = await dispatcher.dispatch(
                use("mcp_t_echo", {"text": "web"}), session, turn_id="t"
            )
            assert texts(result) == "echo: web"
            result = await dispatcher.dispatch(
                use("mcp_t_add", {"a": 1, "b": 1}, "tu2"), session, turn_id="t"
            )
            assert texts(result) == "2"
        finally:
            await manager.stop()


async def test_unreachable_server_is_failed_with_reason(
    dispatcher: ToolDispatcher,
) -> None:
    config = McpServerConfig(command="/nonexistent/mcp-server", connect_timeout=5)
    manager = McpManager({"gone": config}, dispatcher, backoff_base=0.1)
    await manager.start(wait=10)
    try:
        await until(lambda: manager.states()[0]["state"] == "failed")
        state = manager.states()[0]
        assert state["error"] and state["tools"] == []
    finally:
        await manager.stop()


async def test_stdio_server_runs_in_the_sandbox(
    dispatcher: ToolDispatcher, tmp_path: Path, session: DispatchSession
) -> None:
    from dispatcher.sandbox import SandboxConfig, hidden_paths, probe

    bwrap, reason = probe()
    if bwrap is None:
        pytest.skip(reason)
    srv = tmp_path / "srv"
    srv.mkdir()
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "token").write_text("s3cret")
    config = stdio_config(srv, side_effects=SideEffects.READ)
    manager = McpManager(
        {"t": config},
        dispatcher,
        sandbox_config=SandboxConfig(bwrap, hidden_paths([str(secret)])),
        backoff_base=0.1,
    )
    await manager.start(wait=30)
    try:
        assert manager.states()[0]["state"] == "ready", manager.states()
        # Its cwd is writable...
        ok = await dispatcher.dispatch(
            use("mcp_t_write_note", {"name": "in.txt", "content": "1"}), session, turn_id="t"
        )
        assert not ok.is_error and (srv / "in.txt").read_text() == "1"
        # ... the rest of the host is read-only (a fresh /tmp is thrown away),
        # and hidden paths are not there.
        outside = Path(__file__).with_name("sandbox-escape.txt")
        for n, target in enumerate((str(outside), "../out.txt", str(secret / "token"))):
            await dispatcher.dispatch(
                use("mcp_t_write_note", {"name": target, "content": "x"}, f"tx{n}"),
                session,
                turn_id="t",
            )
        assert not outside.exists() and not (tmp_path / "out.txt").exists()
        assert (secret / "token").read_text() == "s3cret"
    finally:
        await manager.stop()


async def test_cwd_inside_a_hidden_path_is_refused(
    dispatcher: ToolDispatcher, tmp_path: Path
) -> None:
    from dispatcher.sandbox import SandboxConfig, probe

    bwrap, reason = probe()
    if bwrap is None:
        pytest.skip(reason)
    hidden = tmp_path / "data"
    (hidden / "srv").mkdir(parents=True)
    manager = McpManager(
        {"t": stdio_config(hidden / "srv")},
        dispatcher,
        sandbox_config=SandboxConfig(bwrap, (str(hidden),)),
        backoff_base=0.1,
    )
    await manager.start(wait=10)
    try:
        await until(lambda: manager.states()[0]["state"] == "failed")
        assert "hides" in manager.states()[0]["error"]
    finally:
        await manager.stop()


async def test_http_server_crash_mid_call_then_failed_with_reason(
    dispatcher: ToolDispatcher,
    server_dir: Path,
    session: DispatchSession,
    publisher: RecordingPublisher,
) -> None:
    with http_server(server_dir) as url:
        manager = await started(dispatcher, McpServerConfig(url=url, side_effects=SideEffects.READ))
        try:
            result = await dispatcher.dispatch(use("mcp_t_crash", {}), session, turn_id="t")
            assert result.is_error
            assert publisher.events[-1].data["error_class"] == "execution_error"
            # Nothing listens any more: reconnecting fails, with the reason shown.
            await until(
                lambda: (
                    manager.states()[0]["restarts"] >= 1
                    and manager.states()[0]["state"] == "failed"
                ),
                within=30,
            )
            assert manager.states()[0]["error"]
            again = await dispatcher.dispatch(
                use("mcp_t_echo", {"text": "x"}, "tu2"), session, turn_id="t"
            )
            assert again.is_error and "not connected" in texts(again)
        finally:
            await manager.stop()
