"""The dashboard on recorded pipeline and sub-agent events, in real headless
Chromium, with no server: the page's files are served from the source tree
and its HTTP calls and WebSockets are answered by Playwright routes (the
server side of these events is built in parallel). Cheap: one page, 360 px
wide, every wait bounded."""

from __future__ import annotations

import json
from typing import Any

import pytest
from playwright.async_api import Browser, Page, Route, WebSocketRoute, expect

from tests.clients.conftest import CHROMIUM
from tests.clients.test_dashboard_browser import WAIT_MS, Dashboard
from tests.clients.test_dashboard_client import assert_fits
from tests.harness import REPO_ROOT

STATIC = REPO_ROOT / "clients" / "dashboard" / "static"
ORIGIN = "http://dashboard.test"
PARENT, CHILD = "ses_parent", "ses_child"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium"),
]

PARENT_SESSION = {
    "id": PARENT,
    "workspace": "/srv/repo",
    "name": "parent",
    "agent": "build",
    "profile": "dev",
    "dry_run": False,
    "children": [CHILD],
    "parent_session_id": None,
    "created_at": "2026-01-01T00:00:00Z",
}
CHILD_SESSION = {
    "id": CHILD,
    "workspace": "/srv/repo",
    "name": "worker",
    "agent": "explore",
    "profile": "read-only",
    "parent_session_id": PARENT,
    "children": [],
    "created_at": "2026-01-01T00:00:01Z",
}


def sub(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "subagent_session_id": CHILD, "agent_type": "explore"}


def called(tool_use_id: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {
        "tool_use_id": tool_use_id,
        "tool_name": name,
        "side_effects": "read",
        "input": tool_input,
        "rating": None,
    }


def completed(tool_use_id: str, name: str, text: str) -> dict[str, Any]:
    return {
        "tool_use_id": tool_use_id,
        "tool_name": name,
        "duration_ms": 4.0,
        "content": [{"type": "text", "text": text}],
        "files_modified": None,
        "command_executed": None,
        "metadata": {},
    }


DISPATCH = {
    "type": "tool_use",
    "id": "tu_d",
    "name": "dispatch_subagent",
    "input": {"task": "find the loader", "agent_type": "explore"},
}
PLAN = [
    {
        "tool_use_id": "tu_p",
        "tool_name": "write_file",
        "summary": "write_file notes/a.txt (+12 lines)",
        "input": {"path": "notes/a.txt"},
    },
    {
        "tool_use_id": "tu_q",
        "tool_name": "shell",
        "summary": "shell: npm test",
        "input": {"command": "npm test"},
    },
]
ASK = {
    "request_id": "c1",
    "tool_use_id": "tu_s",
    "tool_name": "shell",
    "side_effects": "execute",
    "rating": "dev",
    "input_summary": "pytest -q",
    "projected_modifications": [],
    "preview": {"kind": "command", "text": "pytest -q"},
    "expires_at": "2999-01-01T00:00:00Z",
}
RECORDED: list[tuple[str, str | None, dict[str, Any]]] = [
    ("turn.started", "t1", {"source": "message", "created_by": "me"}),
    ("message.completed", "t1", {"message": {"role": "assistant", "content": [DISPATCH]}}),
    (
        "hook.completed",
        "t1",
        {
            "hook": "audit",
            "event": "pre_tool_use",
            "decision": "allow",
            "exit_code": 0,
            "duration_ms": 3.0,
            "tool_use_id": "tu_d",
        },
    ),
    ("tool.called", "t1", called("tu_d", "dispatch_subagent", DISPATCH["input"])),  # type: ignore[arg-type]
    ("turn.started", "t_child", sub({"source": "message"})),
    ("message.delta", "t_child", sub({"text": "Looking around."})),
    ("tool.called", "t_child", sub(called("tu_r", "read_file", {"path": "loader.py"}))),
    ("tool.completed", "t_child", sub(completed("tu_r", "read_file", "def load(): ..."))),
    ("tool.confirmation_requested", "t_child", sub(ASK)),
    ("tool.completed", "t1", completed("tu_d", "dispatch_subagent", "loader.py:1")),
    (
        "tool.failed",
        "t1",
        {
            "tool_use_id": "tu_w",
            "tool_name": "write_file",
            "error_class": "permission_denied",
            "message": ".env is protected",
            "duration_ms": 0.5,
            "partial_output": None,
            "blocked_by": {"kind": "guardrail", "name": "protected_files"},
        },
    ),
    (
        "guardrail.warning",
        "t1",
        {"rule": "no-eval", "message": "eval( found", "tool_use_id": "tu_w"},
    ),
    ("tool.planned", "t1", PLAN[0]),
    ("model.retry", "t1", {"attempt": 1, "error_kind": "overloaded", "delay_s": 2}),
    ("tools.changed", "t1", {}),
    (
        "quality_gate.completed",
        "t1",
        {"name": "tests", "passed": False, "exit_code": 1, "output": "1 failed", "required": True},
    ),
    ("brand.new", "t1", {"answer": 42}),
    ("turn.completed", "t1", {"usage": None, "plan": PLAN}),
    ("turn.started", "t2", {}),
    ("turn.failed", "t2", {"reason": "budget_exhausted", "message": "200000 tokens reached"}),
]


def envelope(n: int, type_: str, turn: str | None, data: dict[str, Any]) -> str:
    return json.dumps(
        {
            "seq": n,
            "session_seq": n,
            "id": f"evt_{n}",
            "type": type_,
            "session_id": PARENT,
            "turn_id": turn,
            "ts": "2026-01-01T00:00:00Z",
            "data": data,
        }
    )


class FakeServer:
    """Answers the page's HTTP calls and event sockets; records what it was sent."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.sent = 0
        self.parent_socket: WebSocketRoute | None = None

    def push(self, type_: str, turn: str | None, data: dict[str, Any]) -> None:
        """One more live event on the parent's stream."""
        assert self.parent_socket is not None
        self.sent += 1
        self.parent_socket.send(envelope(self.sent, type_, turn, data))

    async def http(self, route: Route) -> None:
        request = route.request
        path = request.url.removeprefix(ORIGIN).split("?")[0]
        if path.startswith("/dashboard"):
            name = path.removeprefix("/dashboard/static/") if "/static/" in path else "index.html"
            file = STATIC / name
            kind = {"js": "text/javascript", "css": "text/css"}.get(file.suffix[1:], "text/html")
            await route.fulfill(body=file.read_bytes(), content_type=kind)
            return
        body: Any = {}
        if request.method == "POST":
            sent = json.loads(request.post_data or "{}")
            self.posts.append((path, sent))
            if path == "/sessions":
                body = {**CHILD_SESSION, "id": "ses_new", "name": "new", **sent}
            elif path.endswith("/turns"):
                body = {"turn_id": "t9"}
            else:
                body = {"decision": sent["decision"], "scope": sent["scope"], "resolved_by": "web"}
        elif path == "/sessions":
            body = {"sessions": [PARENT_SESSION]}
        elif path == f"/sessions/{PARENT}":
            body = PARENT_SESSION
        elif path == f"/sessions/{CHILD}":
            body = CHILD_SESSION
        elif path.endswith("/clients"):
            body = {"clients": []}
        await route.fulfill(status=200, body=json.dumps(body), content_type="application/json")

    def events(self, socket: WebSocketRoute) -> None:
        # Only the parent's stream has a story; the others stay quiet and open.
        if f"/sessions/{PARENT}/events" in socket.url:
            self.parent_socket, self.sent = socket, 0
            for type_, turn, data in RECORDED:
                self.push(type_, turn, data)


async def open_board(browser: Browser, fake: FakeServer) -> tuple[Dashboard, Page]:
    context = await browser.new_context(viewport={"width": 360, "height": 800})
    page = await context.new_page()
    page.set_default_timeout(WAIT_MS)
    board = Dashboard(page, "web")
    await page.route(f"{ORIGIN}/**", fake.http)
    await page.route_web_socket("**/events*", fake.events)
    await page.goto(f"{ORIGIN}/dashboard/")
    await page.fill("#token-input", "t" * 24)
    await page.fill("#name-input", "web")
    await page.click("#login-form button[type=submit]")
    await page.click(f".session-item[data-session-id='{PARENT}']", timeout=WAIT_MS)
    return board, page


async def test_pipeline_and_sub_agent_events_render_and_act(browser: Browser) -> None:
    fake = FakeServer()
    board, page = await open_board(browser, fake)
    conversation = page.locator("#conversation")
    dispatch = conversation.locator(".tool-block[data-tool-use-id='tu_d']").first
    await expect(dispatch).to_have_attribute("data-status", "completed", timeout=WAIT_MS)
    await expect(dispatch.locator(".tool-events")).to_have_text(
        "hook audit (pre_tool_use): allow, exit 0 · 3.0 ms"
    )
    # The sub-agent works nested in the call that started it, linked to its own view.
    nested = dispatch.locator(f"section.subagent[data-subagent-session-id='{CHILD}']")
    await expect(nested.locator(".subagent-label")).to_have_text("sub-agent explore")
    await expect(nested.locator(".msg-assistant")).to_contain_text("Looking around.")
    await expect(nested.locator(".tool-block[data-tool-use-id='tu_r']")).to_have_attribute(
        "data-status", "completed"
    )
    await expect(nested.locator(".tool-block[data-tool-use-id='tu_r'] .tool-input")).to_have_text(
        "loader.py"
    )
    child_row = page.locator(f"#calls-body tr[data-subagent-session-id='{CHILD}']").first
    await expect(child_row.locator(".call-name")).to_have_text("sub-agent explore \u203a read_file")
    # The parent's own turn is not the child's.
    await expect(page.locator("#session-turn")).to_have_attribute("data-status", "failed")

    blocked = conversation.locator(".tool-block[data-tool-use-id='tu_w']")
    await expect(blocked).to_have_attribute("data-status", "blocked")
    await expect(blocked.locator(".tool-error")).to_have_text(
        "blocked by guardrail protected_files: .env is protected"
    )
    await expect(blocked.locator(".tool-event")).to_have_text("guardrail no-eval: eval( found")
    await expect(blocked.locator(".tool-event")).to_have_attribute("data-level", "warn")
    planned = conversation.locator(".tool-block[data-tool-use-id='tu_p']")
    await expect(planned).to_have_attribute("data-status", "planned")
    await expect(planned.locator(".tool-input")).to_have_text("notes/a.txt (+12 lines)")
    await expect(dispatch.locator(".tool-input").first).to_have_text("find the loader")
    await expect(planned.locator(".tool-note")).to_have_text(
        "confirmation: dry-run: recorded, not run"
    )
    plan = conversation.locator(".turn-plan")
    await expect(plan.locator("strong")).to_have_text("Dry-run plan: 2 actions, nothing was run")
    await expect(plan.locator(".plan li")).to_have_text(
        ["write_file notes/a.txt (+12 lines)", "shell npm test"]
    )
    await expect(conversation.locator(".note-retry")).to_have_text(
        "Model call failed (overloaded), retry 1 in 2 s"
    )
    await expect(conversation.locator(".note-tools")).to_have_text("Tools changed")
    gate = conversation.locator(".note-gate")
    await expect(gate).to_have_attribute("data-level", "error")
    await expect(gate.locator(".note-text")).to_have_text("Quality gate tests failed (exit 1)")
    await expect(conversation.locator(".note-generic")).to_have_text("brand.new: answer=42")
    await expect(conversation.locator(".turn-failed .failure")).to_have_text(
        "budget_exhausted: 200000 tokens reached"
    )
    timeline = page.locator(f"#session-timeline li[data-subagent-session-id='{CHILD}']")
    await expect(timeline.first).to_contain_text("[sub-agent explore ses_child]")
    await expect(page.locator("#session-timeline li[data-type='brand.new']")).to_contain_text(
        "answer=42"
    )

    # Facts from GET /sessions/{id}: agent, profile, the sub-agent's link.
    await expect(page.locator("#session-agent")).to_have_text("build")
    await expect(page.locator("#session-profile")).to_have_text("dev")
    await expect(page.locator("#session-children a")).to_have_text([CHILD])
    await assert_fits(board, "pipeline events at 360 px")
    await board.screenshot("dashboard-360-pipeline.png")

    # The sub-agent's question is answered at its own session.
    card = board.card("c1")
    await expect(card.locator(".card-agent")).to_have_text("sub-agent explore asks:")
    await card.locator("button[data-decision=allow][data-scope=once]").click()
    await expect(card.locator(".resolution")).to_have_text("allow by web (you)", timeout=WAIT_MS)
    assert (
        f"/sessions/{CHILD}/turns/t_child/confirmations/c1",
        {"decision": "allow", "scope": "once"},
    ) in fake.posts

    # A turn is a dry-run only when ticked.
    await page.fill("#message-input", "plan it")
    await page.locator("#send-message").click()
    await expect(page.locator("#session-turn")).to_have_attribute("data-status", "running")
    fake.push("turn.started", "t9", {})
    fake.push("turn.completed", "t9", {"usage": None})
    await page.locator("#turn-dry-run").check()
    await page.fill("#message-input", "plan it again")
    await page.locator("#send-message").click()
    await expect(page.locator("#message-input")).to_have_value("", timeout=WAIT_MS)
    turns = [body for path, body in fake.posts if path.endswith("/turns")]
    assert turns == [{"message": "plan it"}, {"message": "plan it again", "dry_run": True}]

    # The child's link opens its own view, which links back to its parent.
    await page.locator("#session-children a").click()
    await expect(page.locator("#session-title")).to_have_text("worker", timeout=WAIT_MS)
    await expect(page.locator("#session-parent a")).to_have_text("parent")
    await expect(page.locator("#session-profile")).to_have_text("read-only")
    assert board.errors == []


async def test_create_form_sends_profile_agent_and_dry_run_only_when_set(
    browser: Browser,
) -> None:
    fake = FakeServer()
    board, page = await open_board(browser, fake)
    for profile, agent, dry_run in (("", "", False), ("read-only", "plan", True)):
        if not await page.locator("#new-session-panel").evaluate("p => p.open"):
            await page.locator("#new-session-panel summary").click()
        await page.fill("#new-workspace", "/srv/repo")
        await page.fill("#new-profile", profile)
        await page.fill("#new-agent", agent)
        await page.locator("#new-dry-run").set_checked(dry_run)
        await assert_fits(board, "create form")
        await page.locator("#new-session-form button[type=submit]").click()
        await expect(page.locator("#session-title")).to_have_text("new", timeout=WAIT_MS)
        await page.click(f".session-item[data-session-id='{PARENT}']", timeout=WAIT_MS)
    created = [body for path, body in fake.posts if path == "/sessions"]
    assert created == [
        {"workspace": "/srv/repo"},
        {"workspace": "/srv/repo", "profile": "read-only", "agent": "plan", "dry_run": True},
    ]
    assert board.errors == []
