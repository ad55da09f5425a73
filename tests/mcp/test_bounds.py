"""The consumer's bounds on what an MCP server sends: the line splitter
against a plain model (Hypothesis), finding the id of a dropped line, and the
bounded stdio transport against a real hostile server process (an oversized
answer fails its call and keeps the connection; an oversized notification is
dropped; an oversized line with no id ends the connection, which restarts)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher import DispatchSession, RulePolicy, ToolDispatcher, WorkspaceFileAPI
from dispatcher.mcp import McpManager, McpServerConfig
from dispatcher.mcp.lines import KEEP, LineSplitter, Oversized, oversized_id
from dispatcher.mcp.tool import capped
from protocol.canonical import SideEffects, TextBlock, ToolUseBlock
from tests.dispatcher.support import RecordingPublisher
from tests.mcp.support import http_server, until

pytestmark = pytest.mark.timeout(120)

HOSTILE = str(Path(__file__).parents[1] / "security" / "mcp_attack_server.py")


# -- the splitter against a model ----------------------------------------------


def model_lines(data: bytes, limit: int) -> list[bytes | Oversized]:
    lines = data.split(b"\n")[:-1]  # the last piece has no newline yet
    return [
        line if len(line) <= limit else Oversized(len(line), line[:KEEP], line[-KEEP:])
        for line in lines
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([b"\n", b"x", b"yy", b"{", b"zzzzzzzz", b"\n\n"]), max_size=60),
    st.integers(min_value=0, max_value=12),
    st.data(),
)
def test_splitting_matches_the_model_however_the_chunks_fall(
    pieces: list[bytes], limit: int, data: st.DataObject
) -> None:
    stream = b"".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    splitter = LineSplitter(limit)
    got: list[bytes | Oversized] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got.extend(splitter.feed(stream[start:end]))
    assert got == model_lines(stream, limit)


def test_a_long_line_keeps_only_its_ends() -> None:
    splitter = LineSplitter(100)
    body = b"a" * 10_000 + b"b" * 10_000
    lines = []
    for n in range(0, len(body), 777):
        lines += splitter.feed(body[n : n + 777])
    lines += splitter.feed(b"\nnext\n")
    over, nxt = lines
    assert over == Oversized(20_000, b"a" * KEEP, b"b" * KEEP) and nxt == b"next"


@pytest.mark.parametrize(
    ("head", "tail", "expected"),
    [
        (b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"id":9', b"", (7, False)),
        (b'{"jsonrpc":"2.0","id":"a\\"b","result":', b"", ('a"b', False)),
        (b'{"result":{"x":{"id":3}', b'xx"}]},"jsonrpc":"2.0","id":12}', (12, False)),
        # A nested id at the end is not the message's.
        (b'{"result":{"x":[', b'"id":5}}}', (None, False)),
        # "id" inside a string value is not a key.
        (b'{"result":"\\"id\\":4, ', b"", (None, False)),
        (b'{"jsonrpc":"2.0","method":"notifications/message","params":', b"", (None, True)),
        (b'{"method":"sampling/createMessage","id":3,"params":', b"", (None, True)),
    ],
)
def test_the_id_of_a_dropped_line(head: bytes, tail: bytes, expected: tuple[Any, bool]) -> None:
    assert oversized_id(Oversized(10**9, head, tail)) == expected


def test_capped_keeps_head_and_tail_with_a_note() -> None:
    content: list[Any] = [TextBlock(text="h" * 5000), TextBlock(text="t" * 5000)]
    [block] = capped(content, "srv", 2048)
    assert isinstance(block, TextBlock)
    assert block.text.startswith("h" * 1024) and "bytes omitted" in block.text
    assert "mcp_servers.srv.max_result_bytes" in block.text
    assert len(block.text) < 2048 + 300
    small: list[Any] = [TextBlock(text="fine")]
    assert capped(small, "srv", 2048) == small


# -- the transport against a real hostile server ----------------------------------


@pytest.fixture
async def hostile(
    tmp_path: Path,
) -> AsyncIterator[tuple[McpManager, ToolDispatcher, DispatchSession]]:
    cwd = tmp_path / "srv"
    cwd.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    dispatcher = ToolDispatcher(RecordingPublisher(), cancel_grace=5.0)
    config = McpServerConfig(
        command=sys.executable,
        args=[HOSTILE],
        cwd=str(cwd),
        side_effects=SideEffects.READ,
        max_message_bytes=256 * 1024,
    )
    manager = McpManager({"h": config}, dispatcher, backoff_base=0.1, stable_after=60)
    await manager.start(wait=30)
    try:
        yield manager, dispatcher, DispatchSession("s", WorkspaceFileAPI(ws), policy=RulePolicy())
    finally:
        await manager.stop()


def text_of(result: Any) -> str:
    return "".join(b.text for b in result.content if isinstance(b, TextBlock))


async def call(dispatcher: ToolDispatcher, session: DispatchSession, shape: str, n: int) -> Any:
    block = ToolUseBlock(id=f"tu{n}", name="mcp_h_huge", input={"mb": 1, "shape": shape})
    return await dispatcher.dispatch(block, session, turn_id="t")


async def test_oversized_answers_fail_their_call_and_keep_the_connection(
    hostile: tuple[McpManager, ToolDispatcher, DispatchSession],
) -> None:
    manager, dispatcher, session = hostile
    for n, shape in enumerate(("id_first", "id_last")):
        result = await call(dispatcher, session, shape, n)
        assert result.is_error
        assert "mcp_servers.h.max_message_bytes" in text_of(result), text_of(result)
        assert "over the limit of 262144 bytes" in text_of(result)
    # An oversized notification is dropped; the answer after it arrives.
    result = await call(dispatcher, session, "notification", 3)
    assert not result.is_error and text_of(result) == "after the notification"
    [state] = manager.states()
    assert state["state"] == "ready" and state["restarts"] == 0


async def test_an_oversized_line_without_an_id_ends_the_connection(
    hostile: tuple[McpManager, ToolDispatcher, DispatchSession],
) -> None:
    manager, dispatcher, session = hostile
    result = await call(dispatcher, session, "no_id", 0)
    assert result.is_error and "restarted" in text_of(result), text_of(result)
    await until(lambda: manager.states()[0]["restarts"] >= 1, within=30)
    await until(lambda: manager.states()[0]["state"] == "ready", within=30)
    ok = await dispatcher.dispatch(
        ToolUseBlock(id="p", name="mcp_h_ping", input={}), session, turn_id="t"
    )
    assert text_of(ok) == "pong"


async def test_big_results_over_streamable_http_are_capped_not_fatal(tmp_path: Path) -> None:
    # 2 MiB: over the SDK's own 1 MiB SSE event default, under max_message_bytes.
    cwd = tmp_path / "srv"
    cwd.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    dispatcher = ToolDispatcher(RecordingPublisher(), cancel_grace=5.0)
    session = DispatchSession("s", WorkspaceFileAPI(ws), policy=RulePolicy())
    with http_server(cwd) as url:
        config = McpServerConfig(url=url, side_effects=SideEffects.READ, max_result_bytes=4096)
        manager = McpManager({"t": config}, dispatcher, backoff_base=0.1, stable_after=60)
        await manager.start(wait=30)
        try:
            block = ToolUseBlock(id="b", name="mcp_t_big", input={"kb": 2048})
            result = await dispatcher.dispatch(block, session, turn_id="t")
            text = text_of(result)
            assert not result.is_error, text[:300]
            assert "bytes omitted" in text and "mcp_servers.t.max_result_bytes" in text
            assert len(text) < 4096 + 300
            [state] = manager.states()
            assert state["state"] == "ready" and state["restarts"] == 0
        finally:
            await manager.stop()
