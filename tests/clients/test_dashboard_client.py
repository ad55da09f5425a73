"""The dashboard as a whole web client, in real headless Chromium at three widths.

Each run drives what a person does all day against the real server and its
offline scripted model: create a session from the page, send a message (the
reply streams in), approve a write, run a shell command whose stdout and
stderr land in one terminal block, cancel that turn, and delete the session.
At every step the page must fit the viewport (no horizontal overflow) and a
waiting confirmation must be reachable from the top. Screenshots are kept in
test-artifacts/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, expect

from clients.sdk import ToolrelayClient
from tests.clients.test_dashboard_browser import (
    ARTIFACTS,
    WAIT_MS,
    Dashboard,
)
from tests.harness import ServerProcess

pytestmark = pytest.mark.browser

# stdout, then stderr, then stdout again (apart in time: the streams are
# separate pipes); then it waits to be cancelled.
SHELL = "echo first-out; sleep 0.5; echo second-err 1>&2; sleep 0.5; echo third-out; sleep 30"


async def assert_fits(board: Dashboard, where: str) -> None:
    """Nothing on the page is wider than the viewport."""
    sizes: dict[str, Any] = await board.page.evaluate(
        "({scroll: document.documentElement.scrollWidth, inner: window.innerWidth,"
        " body: document.body.scrollWidth})"
    )
    assert sizes["scroll"] <= sizes["inner"], f"{where}: horizontal overflow {sizes}"
    assert sizes["body"] <= sizes["inner"], f"{where}: horizontal overflow {sizes}"


async def shot(board: Dashboard, name: str, width: int) -> Path:
    return await board.screenshot(f"dashboard-{width}-{name}.png")


@pytest.mark.parametrize("width", [360, 800, 1400])
async def test_dashboard_drives_a_whole_session(
    server: ServerProcess, sdk: ToolrelayClient, workspace: Path, browser: Browser, width: int
) -> None:
    real_workspace = str(workspace.resolve())  # noqa: ASYNC240 (tmp dir, instant)
    board = await Dashboard.open(browser, server, f"web-{width}", width=width, height=800)
    page = board.page
    await assert_fits(board, "signed in")

    # Create: the form asks for a workspace (a path on the server) and a model.
    panel = page.locator("#new-session-panel")
    if not await panel.evaluate("p => p.open"):
        await page.locator("#new-session-panel summary").click()
    await page.fill("#new-workspace", str(workspace))
    await page.fill("#new-name", f"notes at {width}")
    await page.fill("#new-model", "scripted")
    await page.locator("#new-session-form button[type=submit]").click()
    await expect(page.locator("#session-title")).to_have_text(f"notes at {width}", timeout=WAIT_MS)
    await expect(page.locator("#session-model")).to_have_text("scripted")
    await expect(page.locator("#session-workspace")).to_have_text(real_workspace)
    item = page.locator(".session-item[aria-current=true]")
    await expect(item.locator(".session-name")).to_have_text(f"notes at {width}")
    await expect(item.locator(".session-model")).to_have_text("scripted")
    await board.expect_live()
    # Keyboard: the composer has focus after creation; Enter sends.
    await expect(page.locator("#message-input")).to_be_focused()
    await page.keyboard.type("write notes.txt: hello")
    await page.keyboard.press("Enter")

    conversation = page.locator("#conversation")
    await expect(conversation.locator(".msg-user")).to_have_text("userwrite notes.txt: hello")
    card = board.card()
    await expect(card).to_have_count(1, timeout=WAIT_MS)
    await expect(card).to_have_attribute("role", "alertdialog")
    await expect(card.locator("pre.preview")).to_contain_text("+hello")
    await expect(card.locator(".expires")).to_contain_text("left")
    # Reachable from the top: the sticky banner leads straight to the answer buttons.
    banner = page.locator("#pending-banner")
    await expect(banner).to_be_visible()
    await page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    box = await banner.bounding_box()
    assert box is not None and box["y"] <= 1, box  # stuck to the top of the viewport
    await assert_fits(board, "confirmation pending")
    await shot(board, "1-pending", width)
    await page.locator("#pending-review").focus()
    await page.keyboard.press("Enter")
    allow = card.locator("button[data-decision=allow][data-scope=once]")
    await expect(allow).to_be_focused()
    await page.keyboard.press("Enter")

    # The resolved card collapses to one line; the reply streamed into one message.
    await expect(card).to_have_class("card confirmation resolved", timeout=WAIT_MS)
    await expect(card.locator(".resolution")).to_have_text(f"allow by web-{width} (you)")
    line = await card.bounding_box()
    assert line is not None and line["height"] < 48, line
    await expect(banner).to_be_hidden()
    block = conversation.locator(".tool-block").first
    await expect(block).to_have_attribute("data-status", "completed", timeout=WAIT_MS)
    await expect(page.locator("#session-turn")).to_have_attribute(
        "data-status", "completed", timeout=WAIT_MS
    )
    replies = conversation.locator(".msg-assistant")
    await expect(replies.last).to_contain_text("ok", timeout=WAIT_MS)
    await expect(conversation.locator(".msg-assistant.streaming")).to_have_count(0)
    assert (workspace / "notes.txt").read_text() == "hello"
    # Deltas folded into their messages: fewer message nodes than delta events.
    deltas = await page.locator("#session-timeline li[data-type='message.delta']").evaluate_all(
        "rows => rows.map(r => r.dataset.sessionSeqs.split(' ').length)"
    )
    assert sum(deltas) > await replies.count()
    await assert_fits(board, "write done")

    # A shell command: one terminal block, stdout and stderr in order, live.
    await page.fill("#message-input", f"run {SHELL}")
    await page.locator("#send-message").click()
    # In the sandbox a shell command runs without asking; outside it asks first.
    term = conversation.locator(".tool-block pre.terminal")
    waiting = board.card().and_(page.locator("[role=alertdialog]"))
    await expect(term.or_(waiting)).to_have_count(1, timeout=WAIT_MS)
    if await waiting.count():
        await expect(waiting.locator("pre.preview")).to_contain_text("sleep 30")
        await waiting.locator("button[data-decision=allow][data-scope=once]").click()
    await expect(term).to_have_count(1, timeout=WAIT_MS)
    await expect(term).to_contain_text("third-out", timeout=WAIT_MS)
    spans = await term.locator("span").evaluate_all(
        "s => s.map(x => [x.dataset.stream, x.textContent.trim()])"
    )
    assert spans == [
        ["stdout", "first-out"],
        ["stderr", "second-err"],
        ["stdout", "third-out"],
    ], spans
    colours = await term.locator("span").evaluate_all("s => s.map(x => getComputedStyle(x).color)")
    assert colours[0] != colours[1] and colours[0] == colours[2]
    await expect(page.locator("#cancel-turn")).to_be_enabled()
    await expect(page.locator("#send-message")).to_be_disabled()
    await assert_fits(board, "shell running")
    await shot(board, "2-shell-running", width)

    # Cancel the running turn.
    await page.locator("#cancel-turn").click()
    await expect(page.locator("#session-turn")).to_have_attribute(
        "data-status", "cancelled", timeout=WAIT_MS
    )
    await expect(conversation.locator(".turn-cancelled")).to_contain_text(
        f"Turn cancelled by web-{width}"
    )
    await expect(conversation.locator(".tool-block").last).to_have_attribute(
        "data-status", "failed"
    )
    await expect(page.locator("#send-message")).to_be_enabled()
    await assert_fits(board, "cancelled")
    final = await shot(board, "3-cancelled", width)

    # Delete, through the dialog.
    session_id = await page.locator("#session-title").get_attribute("title")
    assert session_id
    await page.locator("#delete-session").click()
    dialog = page.locator("#delete-dialog")
    await expect(dialog).to_be_visible()
    await dialog.locator("#delete-confirm").click()
    await expect(page.locator("#empty-view")).to_be_visible(timeout=WAIT_MS)
    await expect(page.locator(f".session-item[data-session-id='{session_id}']")).to_have_count(0)
    assert session_id not in [s.id for s in await sdk.list_sessions()]
    assert board.errors == []
    assert final.stat().st_size > 0 and (ARTIFACTS / f"dashboard-{width}-1-pending.png").exists()


async def test_dashboard_shows_why_a_turn_failed_and_refused_sessions(
    server: ServerProcess, sdk: ToolrelayClient, workspace: Path, browser: Browser
) -> None:
    """A failed turn's reason and message reach the page; a refused create says why."""
    script = workspace / "script.yaml"
    script.write_text("- Hello from the script.\n")
    session = await sdk.create_session(workspace, name="failing", model=f"scripted:{script}")
    script.unlink()  # the next turn cannot read its model's script: a model error
    board = await Dashboard.open(browser, server, "web-fail", width=800)
    await board.watch(session.id)
    await board.page.fill("#message-input", "hello")
    await board.page.keyboard.press("Enter")
    failed = board.page.locator("#conversation .turn-failed")
    await expect(failed).to_contain_text("Turn failed", timeout=WAIT_MS)
    await expect(failed.locator(".failure")).to_contain_text("model_error: ")
    await expect(failed.locator(".failure")).to_contain_text("cannot read script")
    await expect(board.page.locator("#session-turn")).to_have_attribute("data-status", "failed")

    # Creating a session for a directory the server does not have: the server's reason.
    await board.page.locator("#new-session-panel summary").click()
    await board.page.fill("#new-workspace", str(workspace / "missing"))
    await board.page.locator("#new-session-form button[type=submit]").click()
    await expect(board.page.locator("#new-session-error")).to_contain_text(
        "Could not create the session: ", timeout=WAIT_MS
    )
    await expect(board.page.locator("#new-session-error")).to_contain_text("missing")
    await assert_fits(board, "errors shown")
    await board.screenshot("dashboard-800-failed-turn.png")
    assert board.errors == []


async def test_dashboard_shows_the_model_a_default_session_resolves_to(
    server: ServerProcess, sdk: ToolrelayClient, workspace: Path, browser: Browser
) -> None:
    """A session without a model shows the server's default by name, before any turn."""
    session = await sdk.create_session(workspace, name="defaulted")
    assert session.model is None and session.resolved_model == "scripted"
    assert (await sdk.get_session(session.id)).resolved_model == "scripted"
    board = await Dashboard.open(browser, server, "web-model", width=800)
    await board.watch(session.id)
    await expect(board.page.locator("#session-model")).to_have_text(
        "scripted (server default)", timeout=WAIT_MS
    )
    item = board.page.locator(f".session-item[data-session-id='{session.id}']")
    await expect(item.locator(".session-model")).to_have_text("scripted (server default)")
    assert board.errors == []
