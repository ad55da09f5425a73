"""The TUI and the dashboard, side by side on one session of a REAL server,
show the pipeline and sub-agents end to end: a sub-agent's work nested under
the dispatch_subagent call that started it (by ``data.parent_tool_use_id``),
a failing post_tool_use hook, and dry-run turns started from each client.

The offline scripted model drives (adapters/scripted_rules.py). One server
for the module (its config has the hook), one Chromium tab and one TUI per
test; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Locator, expect
from textual.pilot import Pilot
from textual.widgets import Input

from clients.sdk import ConnectionState, ToolrelayClient
from clients.tui.app import ToolrelayTUI
from clients.tui.transcript import NoteEntry, ToolCallEntry, field_of
from tests.clients.conftest import CHROMIUM
from tests.clients.test_dashboard_browser import WAIT_MS, Dashboard
from tests.clients.test_tui_live import FAST_RECONNECT, SIZE, until
from tests.harness import ServerProcess

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium"),
]

HOOK = "lint"
HOOK_OUTPUT = "lint: style is bad"
# Two delegations at once, and the second one's child must start first (else
# the old guess, "the oldest open call", would be right by luck): the call
# reading a.txt waits in a pre-hook until the c.txt call's post-hook left a
# mark. Bounded: 200 polls of 50 ms, then it goes on anyway.
MARK = ".c-delegated"
HOLD_A = (
    'case "$TOOLRELAY_TOOL_INPUT" in *a.txt*) '
    f"for i in $(seq 200); do [ -e {MARK} ] && break; sleep 0.05; done;; esac"
)
MARK_C = f'case "$TOOLRELAY_TOOL_INPUT" in *c.txt*) touch {MARK};; esac'
CONFIG = {
    "hooks": {
        "pre_tool_use": [{"name": "hold-a", "command": HOLD_A, "matcher": "dispatch_subagent"}],
        "post_tool_use": [
            # A post-edit lint stand-in that always fails with output; list_dir
            # only, so the sub-agents' reads and the dry-run writes stay quiet.
            {"name": HOOK, "command": f"echo '{HOOK_OUTPUT}'; exit 1", "matcher": "list_dir"},
            {"name": "mark-c", "command": MARK_C, "matcher": "dispatch_subagent"},
        ],
    }
}
HOOK_LINE = f"hook {HOOK} (post_tool_use): error, exit 1"
HOOK_REPORT = f"[Hook {HOOK}: FAILED (exit 1)]\n{HOOK_OUTPUT}"
# Writes run without asking, so a dry-run turn reaches its plan unattended
# (the pipeline asks for confirmation before it records a planned call).
AUTO_WRITES = {"per_tool": {"write_file": "auto"}}


@pytest.fixture(scope="module")
def hook_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("pipeline-server"), config=CONFIG).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
async def client(hook_server: ServerProcess) -> AsyncIterator[ToolrelayClient]:
    async with ToolrelayClient(hook_server.base_url, hook_server.token, "sdk-test") as sdk:
        yield sdk


@pytest.fixture
def files(workspace: Path) -> Path:
    (workspace / "a.txt").write_text("alpha\n")
    (workspace / "c.txt").write_text("gamma\n")
    return workspace


@asynccontextmanager
async def both_clients(
    server: ServerProcess, browser: Browser, session_id: str
) -> AsyncIterator[tuple[ToolrelayTUI, Pilot[Any], Dashboard]]:
    """The TUI and a dashboard tab, both live on ``session_id``."""
    async with ToolrelayClient(server.base_url, server.token, client_name="tui") as tui_sdk:
        app = ToolrelayTUI(tui_sdk, session_id=session_id, stream_backoff=FAST_RECONNECT)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.connection is ConnectionState.CONNECTED, "TUI live")
            board = await Dashboard.open(browser, server, "web")
            await board.watch(session_id)
            yield app, pilot, board
            assert board.errors == []


async def tui_send(app: ToolrelayTUI, pilot: Pilot[Any], text: str) -> None:
    """Type ``text`` into the TUI's prompt and send it, as a person would."""
    app.query_one("#prompt", Input).value = text
    await pilot.click("#prompt")
    await pilot.press("enter")


def turn_ends(app: ToolrelayTUI) -> list[NoteEntry]:
    notes = (e for e in app.transcript.entries if isinstance(e, NoteEntry))
    return [note for note in notes if " completed" in note.text]


def finished_child(app: ToolrelayTUI, tool_use_id: str) -> ToolCallEntry | None:
    """The TUI's call ``tool_use_id`` once the sub-agent nested in it is done."""
    call = app.transcript.entry(f"tool:{tool_use_id}")
    if not isinstance(call, ToolCallEntry) or call.subagent is None:
        return None
    return call if call.subagent.transcript.turn_status == "completed" else None


async def first_child_events(client: ToolrelayClient, session_id: str, turn_id: str) -> list[str]:
    """The sub-agent sessions in the order their first event reached the
    parent's stream, read from the log up to the end of ``turn_id``."""
    order: list[str] = []
    async with asyncio.timeout(60), client.events(session_id, after=0) as stream:
        async for event in stream:
            child = field_of(event.data, "subagent_session_id")
            if isinstance(child, str) and child not in order:
                order.append(child)
            if event.turn_id == turn_id and event.type == "turn.completed" and child is None:
                return order
    raise AssertionError("the parent's stream ended before its turn did")


def own_block(board: Dashboard, tool_name: str) -> Locator:
    """The session's own call (not a sub-agent's) of ``tool_name`` in the conversation."""
    return board.page.locator("#conversation > li.tool-block").filter(
        has=board.page.locator(".tool-name", has_text=re.compile(f"^{tool_name}$"))
    )


async def test_a_sub_agent_works_nested_under_its_own_dispatch_call(
    hook_server: ServerProcess, client: ToolrelayClient, files: Path, browser: Browser
) -> None:
    session = await client.create_session(files, agent="build", profile="full")
    assert (session.agent, session.profile, session.parent_session_id) == ("build", "full", None)
    assert session.children == [] and session.dry_run is False
    tools = {tool.name: tool for tool in await client.list_tools(session.id)}
    assert tools["dispatch_subagent"].timeout_s == 600.0
    assert tools["read_file"].timeout_s == 60.0
    assert tools["list_dir"].output_schema and tools["list_dir"].output_schema["type"] == "object"

    async with both_clients(hook_server, browser, session.id) as (app, pilot, board):
        # Two delegations of one agent type at once: the oldest-call guess could
        # only be right by luck about which child is whose.
        tasks = {"tu_a": "read a.txt", "tu_c": "read c.txt"}
        delegations = [
            {"id": tid, "name": "dispatch_subagent", "input": {"task": t, "agent_type": "explore"}}
            for tid, t in tasks.items()
        ]
        turn_id = await client.send_tool_uses(session.id, delegations)
        turn = await client.wait_for_turn(session.id, turn_id, within=30)
        assert turn.status == "completed" and turn.results is not None
        child_of: dict[str, str] = {}
        for result in turn.results:
            text = "".join(b.get("text", "") for b in result["content"])
            found = re.search(r"\(session (ses_\w+)\)", text)
            assert found and not result["is_error"], text
            child_of[result["tool_use_id"]] = found.group(1)
        assert sorted(child_of) == ["tu_a", "tu_c"]
        started = await first_child_events(client, session.id, turn_id)
        assert started.index(child_of["tu_c"]) < started.index(child_of["tu_a"]), started

        # The SDK reads the family both ways.
        parent = await client.get_session(session.id)
        assert sorted(parent.children) == sorted(child_of.values())
        for child_id in child_of.values():
            child = await client.get_session(child_id)
            assert (child.parent_session_id, child.agent) == (session.id, "explore")
            assert child.profile == "read-only"

        for tool_use_id, child_id in child_of.items():
            path = tasks[tool_use_id].split()[1]
            # TUI: the call holds the child's run and its read of the right file.
            call = await until(
                pilot,
                partial(finished_child, app, tool_use_id),
                f"TUI nests {child_id} under {tool_use_id}",
            )
            assert isinstance(call, ToolCallEntry) and call.subagent is not None
            assert call.subagent.session_id == child_id
            reads = call.subagent.transcript.tool_calls()
            assert [(r.name, r.summary, r.status) for r in reads] == [
                ("read_file", path, "completed")
            ]
            view = app.entry_view(call.key)
            assert view is not None and f"⤷ sub-agent explore · {child_id}" in view.plain
            # Dashboard: the child's lane inside that call, with its link.
            block = board.page.locator(f".tool-block[data-tool-use-id='{tool_use_id}']")
            nested = block.locator(f"section.subagent[data-subagent-session-id='{child_id}']")
            await expect(nested.locator(".subagent-label")).to_have_text(
                "sub-agent explore", timeout=WAIT_MS
            )
            await expect(nested.locator(".tool-block .tool-input")).to_have_text(path)
            read = nested.locator(".tool-block")
            await expect(read).to_have_attribute("data-status", "completed")
            await expect(nested.locator(".subagent-status")).to_contain_text("completed")
            await expect(nested.locator("a.subagent-link")).to_have_attribute(
                "data-session-id", child_id
            )
        # Nothing fell back to an entry of its own.
        assert [e.key for e in app.transcript.entries if e.key.startswith("subagent:")] == []
        await expect(board.page.locator(".subagent-orphan")).to_have_count(0)
        await board.screenshot("dashboard-live-subagents.png")

        # The child's link opens its own view, which links back to the parent.
        await board.page.locator(f"a.subagent-link[data-session-id='{child_of['tu_a']}']").click()
        await expect(board.page.locator("#session-agent")).to_have_text("explore", timeout=WAIT_MS)
        await expect(board.page.locator("#session-parent a")).to_have_attribute(
            "data-session-id", session.id
        )


async def test_a_failing_hook_and_dry_run_turns_show_in_both_clients(
    hook_server: ServerProcess, client: ToolrelayClient, files: Path, browser: Browser
) -> None:
    session = await client.create_session(files, policy=AUTO_WRITES)
    async with both_clients(hook_server, browser, session.id) as (app, pilot, board):
        # A turn typed in the TUI: list_dir, then the hook fails with output.
        await tui_send(app, pilot, "list .")
        await until(pilot, lambda: turn_ends(app), "the list turn ends")
        listing = next(c for c in app.transcript.tool_calls() if c.name == "list_dir")
        assert [level for text, level in listing.notes if text.startswith(HOOK_LINE)] == ["warn"]
        assert HOOK_REPORT in listing.result  # what the model got back
        view = app.entry_view(listing.key)
        assert view is not None and HOOK_LINE in view.plain
        assert app.transcript.turn_id is not None
        turn = await client.get_turn(session.id, app.transcript.turn_id)
        assert turn.results is not None
        model_saw = "".join(b.get("text", "") for b in turn.results[0]["content"])
        assert HOOK_REPORT in model_saw
        hook_line = own_block(board, "list_dir").locator(".tool-event.ev-hook")
        await expect(hook_line).to_contain_text(HOOK_LINE, timeout=WAIT_MS)
        await expect(hook_line).to_have_attribute("data-level", "warn")
        await expect(own_block(board, "list_dir").locator(".result-text")).to_contain_text(
            HOOK_REPORT
        )

        # A dry-run turn from the TUI's /dry-run command: a plan, no file.
        await tui_send(app, pilot, "/dry-run write b.txt: hi")
        first = await until(
            pilot,
            lambda: [n for n in turn_ends(app) if "dry-run plan" in n.text],
            "the TUI shows the first plan",
        )
        assert first[0].text.endswith("completed (dry-run plan: 1 action)")
        assert first[0].detail == ["1. write_file b.txt (+1 lines)"]
        plans = board.page.locator("#conversation > .turn-plan")
        await expect(plans).to_have_count(1, timeout=WAIT_MS)
        await expect(plans.locator("strong")).to_have_text(
            "Dry-run plan: 1 action, nothing was run"
        )
        await expect(plans.locator(".plan li")).to_have_text(["write_file b.txt (+1 lines)"])
        await expect(own_block(board, "write_file")).to_have_attribute("data-status", "planned")

        # Another from the dashboard's composer, ticked "Dry-run this turn".
        await board.page.locator("#turn-dry-run").check()
        await board.page.fill("#message-input", "write d.txt: yo")
        await board.page.locator("#send-message").click()
        await expect(plans).to_have_count(2, timeout=WAIT_MS)
        await expect(plans.nth(1).locator(".plan li")).to_have_text(["write_file d.txt (+1 lines)"])
        second = await until(
            pilot,
            lambda: [n for n in turn_ends(app) if "d.txt" in " ".join(n.detail)],
            "the TUI shows the dashboard's plan",
        )
        view = app.entry_view(second[0].key)
        assert view is not None and "1. write_file d.txt (+1 lines)" in view.plain
        turn = await client.get_turn(session.id, app.transcript.turn_id or "")
        assert turn.dry_run and turn.plan is not None
        assert [(p.tool_name, p.summary) for p in turn.plan] == [
            ("write_file", "write_file d.txt (+1 lines)")
        ]
        await board.screenshot("dashboard-live-hook-and-plans.png")
    # Nothing was written.
    assert not (files / "b.txt").exists() and not (files / "d.txt").exists()
