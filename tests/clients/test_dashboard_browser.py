"""The web dashboard in real headless Chromium, next to the SDK and the TUI.

Debian's /usr/bin/chromium driven by Playwright for Python (no browser
download); the server is the real `toolrelay serve` subprocess. Screenshots
land in test-artifacts/ at the repository root.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, WebSocketRoute, expect

from clients.sdk import (
    AnyEvent,
    ConfirmationResolved,
    ConnectionState,
    ToolrelayClient,
)
from clients.tui.app import ToolrelayTUI
from clients.tui.widgets import ConfirmationScreen
from tests.clients.conftest import CHROMIUM, WRITE_A, eventually
from tests.clients.test_tui_live import FAST_RECONNECT, SIZE, tool_entry, until
from tests.harness import REPO_ROOT, ServerProcess

ARTIFACTS = REPO_ROOT / "test-artifacts"
WAIT_MS = 15_000

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
]


class Dashboard:
    """One dashboard tab, signed in under ``name``, with its JS errors recorded."""

    def __init__(self, page: Page, name: str) -> None:
        self.page = page
        self.name = name
        self.errors: list[str] = []
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self._held: list[tuple[WebSocketRoute, str | bytes]] | None = None

    def _relay(self, page_socket: WebSocketRoute) -> None:
        """Connect the tab's socket to the real server; forward what it sends,
        unless held, in which case keep it (in order) until ``release``."""
        server_socket = page_socket.connect_to_server()

        def forward(message: str | bytes) -> None:
            if self._held is None:
                page_socket.send(message)
            else:
                self._held.append((page_socket, message))

        server_socket.on_message(forward)

    def hold(self) -> None:
        """Delay the server's events to this tab, as a slow network would."""
        self._held = []

    def release(self) -> None:
        held, self._held = self._held or [], None
        for page_socket, message in held:
            page_socket.send(message)

    @classmethod
    async def open(
        cls,
        browser: Browser,
        server: ServerProcess,
        name: str,
        *,
        holdable: bool = False,
        width: int = 1280,
        height: int = 900,
    ) -> Dashboard:
        """Sign in a new tab. With ``holdable``, its event sockets pass through a
        relay that can hold back what the server sends (see ``hold``)."""
        context = await browser.new_context(viewport={"width": width, "height": height})
        board = cls(await context.new_page(), name)
        if holdable:
            await board.page.route_web_socket(re.compile(r"/events(\?|$)"), board._relay)
        await board.page.goto(f"{server.base_url}/dashboard")
        await board.page.fill("#token-input", server.token)
        await board.page.fill("#name-input", name)
        await board.page.click("#login-form button[type=submit]")
        await expect(board.page.locator("#app")).to_be_visible(timeout=WAIT_MS)
        return board

    async def watch(self, session_id: str) -> None:
        await self.page.click(f".session-item[data-session-id='{session_id}']", timeout=WAIT_MS)
        await self.expect_live()

    async def expect_live(self) -> None:
        await expect(self.page.locator("#connection")).to_have_attribute(
            "data-state", "live", timeout=WAIT_MS
        )

    def card(self, request_id: str | None = None) -> Any:
        selector = "article.confirmation"
        if request_id:
            selector += f"[data-request-id='{request_id}']"
        return self.page.locator(selector)

    def call_row(self, tool_use_id: str) -> Any:
        return self.page.locator(f"#calls-body tr[data-tool-use-id='{tool_use_id}']")

    async def session_seqs(self) -> list[int]:
        rows = await self.page.locator("#session-timeline li").evaluate_all(
            "items => items.map(li => li.dataset.sessionSeqs)"
        )
        return sorted(int(seq) for row in rows for seq in str(row).split())

    async def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / name
        await self.page.screenshot(path=str(path), full_page=True)
        return path


async def collect(stream: Any, into: list[AnyEvent]) -> None:
    async for event in stream:
        into.append(event)


async def test_two_dashboards_race_to_allow_one_wins_and_everyone_sees_it(
    server: ServerProcess, sdk: ToolrelayClient, workspace: Path, browser: Browser
) -> None:
    session = await sdk.create_session(workspace, name="race")
    sdk_events: list[AnyEvent] = []
    async with (
        ToolrelayClient(server.base_url, server.token, client_name="tui") as tui_client,
        sdk.events(session.id, after=0) as stream,
    ):
        watcher = asyncio.create_task(collect(stream, sdk_events))
        app = ToolrelayTUI(tui_client, session_id=session.id, stream_backoff=FAST_RECONNECT)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.connection is ConnectionState.CONNECTED, "TUI live")
            boards = [
                await Dashboard.open(browser, server, n, holdable=True)
                for n in ("dash-a", "dash-b")
            ]
            for board in boards:
                await board.watch(session.id)
            watchers = await eventually(
                lambda: _watchers(sdk, session.id, 4), what="all four clients attached"
            )
            assert sorted(watchers) == ["dash-a", "dash-b", "sdk-test", "tui"]

            turn_id = await sdk.send_tool_uses(session.id, [WRITE_A])
            for board in boards:
                await expect(board.card()).to_have_count(1, timeout=WAIT_MS)
                await expect(board.card().locator("pre.preview")).to_contain_text("+hi")
                await expect(board.call_row("tu1")).to_contain_text("awaiting confirmation")
            request_id = await boards[0].card().get_attribute("data-request-id")
            assert request_id
            await until(pilot, lambda: isinstance(app.screen, ConfirmationScreen), "TUI pop-up")
            pending_shot = await boards[0].screenshot("dashboard-pending-confirmation.png")

            # Both dashboards click Allow at once; the server decides who was first.
            def is_answer(response: Any) -> bool:
                return "/confirmations/" in response.url and response.request.method == "POST"

            allow = [
                b.card(request_id).locator("button[data-decision=allow][data-scope=once]")
                for b in boards
            ]
            for button in allow:
                await expect(button).to_be_enabled()
            # Neither tab may hear who won before both have clicked: hold the server's
            # events to both tabs (a slow network) until both answers got their reply.
            for board in boards:
                board.hold()
            async with (
                boards[0].page.expect_response(is_answer, timeout=WAIT_MS) as answer_a,
                boards[1].page.expect_response(is_answer, timeout=WAIT_MS) as answer_b,
            ):
                await asyncio.gather(*(button.click() for button in allow))
            statuses = [(await answer_a.value).status, (await answer_b.value).status]
            for board in boards:
                board.release()
            assert sorted(statuses) == [200, 409], statuses
            winner, loser = (boards[0], boards[1]) if statuses[0] == 200 else boards[::-1]

            await expect(winner.card(request_id).locator(".resolution")).to_have_text(
                f"allow by {winner.name} (you)", timeout=WAIT_MS
            )
            await expect(loser.card(request_id).locator(".resolution")).to_have_text(
                f"already resolved by {winner.name}: allow", timeout=WAIT_MS
            )
            for board in boards:
                row = board.call_row("tu1")
                await expect(row).to_have_attribute("data-status", "completed", timeout=WAIT_MS)
                await expect(row.locator(".call-confirmation")).to_have_text(
                    f"allow by {winner.name}"
                )
                await expect(row.locator(".call-duration")).to_contain_text("ms")
                await expect(row.locator(".badge")).to_have_text("write")
                assert board.errors == []
            resolved_shot = await loser.screenshot("dashboard-after-resolution.png")
            await winner.screenshot("dashboard-after-resolution-winner.png")

            # The TUI saw the same single resolution, and its pop-up went away.
            call = await until(
                pilot,
                lambda: (c := tool_entry(app, "tu1")) and c.status == "completed" and c,
                "TUI shows the call completed",
            )
            assert call.resolution == f"allow by {winner.name}"
            assert not isinstance(app.screen, ConfirmationScreen)

            await sdk.wait_for_turn(session.id, turn_id, within=60)
            await eventually(
                lambda: any(e.type == "turn.completed" for e in sdk_events), what="SDK turn end"
            )
        watcher.cancel()
    resolved = [e for e in sdk_events if isinstance(e, ConfirmationResolved)]
    assert [(r.data.decision, r.data.resolved_by) for r in resolved] == [("allow", winner.name)]
    assert (workspace / "a.txt").read_text() == "hi"
    assert pending_shot.stat().st_size > 0 and resolved_shot.stat().st_size > 0


async def _watchers(sdk: ToolrelayClient, session_id: str, count: int) -> list[str] | None:
    names = [c.client_name for c in await sdk.attached_clients(session_id)]
    return names if len(names) >= count else None


async def test_dashboard_resumes_after_server_restart_without_gaps(
    own_server: ServerProcess, own_sdk: ToolrelayClient, workspace: Path, browser: Browser
) -> None:
    server, sdk = own_server, own_sdk  # this test restarts its server
    session = await sdk.create_session(workspace)
    board = await Dashboard.open(browser, server, "dash-r")
    await board.watch(session.id)

    # First write, allowed once from the dashboard.
    await sdk.send_tool_uses(session.id, [WRITE_A])
    await (
        board.card().locator("button[data-decision=allow][data-scope=once]").click(timeout=WAIT_MS)
    )
    await expect(board.call_row("tu1")).to_have_attribute(
        "data-status", "completed", timeout=WAIT_MS
    )

    states: list[str] = []
    restart = asyncio.create_task(asyncio.to_thread(server.restart))
    while not restart.done():
        states.append(await board.page.locator("#connection").get_attribute("data-state") or "")
        await asyncio.sleep(0.05)
    await restart
    await board.expect_live()
    assert "reconnecting" in states

    # A second write after the restart shows up live; allow it for the session.
    second = {**WRITE_A, "id": "tu2", "input": {"path": "b.txt", "content": "again"}}
    await sdk.send_tool_uses(session.id, [second])
    await expect(board.card()).to_have_count(2, timeout=WAIT_MS)
    card = board.card().first  # waiting cards come before resolved ones
    await card.locator("button[data-decision=allow][data-scope=session]").click(timeout=WAIT_MS)
    await expect(board.call_row("tu2")).to_have_attribute(
        "data-status", "completed", timeout=WAIT_MS
    )
    await expect(board.call_row("tu2").locator(".call-confirmation")).to_have_text(
        "allow for the session by dash-r"
    )
    # The session-wide approval means a third write runs without asking.
    third = {**WRITE_A, "id": "tu3", "input": {"path": "c.txt", "content": "more"}}
    turn_id = await sdk.send_tool_uses(session.id, [third])
    assert (await sdk.wait_for_turn(session.id, turn_id, within=60)).status == "completed"
    await expect(board.call_row("tu3")).to_have_attribute(
        "data-status", "completed", timeout=WAIT_MS
    )
    await expect(board.card()).to_have_count(2)

    # Nothing missed, nothing repeated: the dashboard holds exactly the log's events.
    async with sdk.events(session.id, after=0) as replay:
        last = await replay.next_matching(
            lambda e: e.type == "turn.completed" and e.turn_id == turn_id, within=60
        )
    await eventually(lambda: _seqs_reach(board, last.session_seq), what="dashboard caught up")
    seqs = await board.session_seqs()
    assert seqs[: last.session_seq] == list(range(1, last.session_seq + 1))
    assert len(seqs) == len(set(seqs))
    connects = await board.page.evaluate("window.toolrelayDashboard.connects")
    assert connects["session"] >= 2 and connects["global"] >= 2
    assert board.errors == []

    # The token is kept for the tab: a reload goes straight back to the app.
    await board.page.reload()
    await expect(board.page.locator("#app")).to_be_visible(timeout=WAIT_MS)
    await expect(board.page.locator("#login")).to_be_hidden()
    await board.expect_live()


async def _seqs_reach(board: Dashboard, last: int) -> bool:
    seqs = await board.session_seqs()
    return bool(seqs) and seqs[-1] >= last


async def test_dashboard_rejects_a_wrong_token(server: ServerProcess, browser: Browser) -> None:
    page = await browser.new_page()
    await page.goto(f"{server.base_url}/dashboard")
    await page.fill("#token-input", "definitely-not-the-token")
    await page.fill("#name-input", "someone")
    await page.click("#login-form button[type=submit]")
    await expect(page.locator("#login-error")).to_have_text(
        "The server rejected the token.", timeout=WAIT_MS
    )
    await expect(page.locator("#login")).to_be_visible()
    assert await page.evaluate("sessionStorage.getItem('toolrelay.token')") is None


async def test_dashboard_deny_sends_the_reason_to_the_model(
    server: ServerProcess, sdk: ToolrelayClient, workspace: Path, browser: Browser
) -> None:
    """A message turn (the offline scripted model) whose write is denied with a reason."""
    session = await sdk.create_session(workspace)
    board = await Dashboard.open(browser, server, "dash-d")
    await board.watch(session.id)
    turn_id = await sdk.send_message(session.id, "write a.txt: hi")
    card = board.card()
    await expect(card.locator(".mods")).to_have_text("Would modify: a.txt", timeout=WAIT_MS)
    await card.locator("input.deny-message").fill("wrong file")
    await card.locator("button[data-decision=deny]").click(timeout=WAIT_MS)
    await expect(card.locator(".resolution")).to_have_text(
        "deny by dash-d (you): wrong file", timeout=WAIT_MS
    )
    row = board.page.locator("#calls-body tr").first
    await expect(row).to_have_attribute("data-status", "failed", timeout=WAIT_MS)
    await expect(row.locator(".call-error")).to_contain_text("user_denied")
    turn = await sdk.wait_for_turn(session.id, turn_id, within=60)
    assert turn.status == "completed"
    messages = await sdk.get_messages(session.id)
    tool_results = [b for m in messages if m.role == "tool" for b in m.content]
    assert tool_results and tool_results[0]["is_error"] is True
    assert "wrong file" in str(tool_results[0]["content"])
    # The model's streamed replies are growing timeline rows, not one row per fragment.
    async with sdk.events(session.id, after=0) as replay:
        logged = [await replay.next_matching(lambda e: True, within=60)]
        while logged[-1].type != "turn.completed":
            logged.append(await replay.next_matching(lambda e: True, within=60))
    fragments = sum(1 for e in logged if e.type == "message.delta")
    await eventually(lambda: _seqs_reach(board, logged[-1].session_seq), what="caught up")
    seqs = await board.session_seqs()
    assert seqs == list(range(1, len(seqs) + 1))
    rows = await board.page.locator("#session-timeline li[data-type='message.delta']").count()
    assert 0 < rows < fragments
    assert not (workspace / "a.txt").exists()
    assert board.errors == []
