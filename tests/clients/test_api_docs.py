"""API conventions a client meets first: the bearer scheme in OpenAPI, a /docs
page that works with no network but the server, and 404 (not 401) for paths
no route serves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx2
import pytest
import websockets
from playwright.async_api import Browser, Route, expect

from tests.clients.test_dashboard_browser import WAIT_MS
from tests.harness import ServerProcess


async def test_openapi_declares_the_bearer_scheme(server: ServerProcess) -> None:
    async with httpx2.AsyncClient(base_url=server.base_url) as anon:
        spec = (await anon.get("/openapi.json")).json()
    scheme = spec["components"]["securitySchemes"]["bearerAuth"]
    assert scheme["type"] == "http" and scheme["scheme"] == "bearer"
    assert spec["security"] == [{"bearerAuth": []}]
    # Public routes say so; the others inherit the bearer requirement.
    assert spec["paths"]["/healthz"]["get"]["security"] == []
    assert "security" not in spec["paths"]["/sessions"]["post"]


async def test_unknown_paths_are_404_before_authentication(server: ServerProcess) -> None:
    async with httpx2.AsyncClient(base_url=server.base_url) as anon:
        for method, path in [("GET", "/nope"), ("POST", "/session"), ("GET", "/sessions/x/y/z")]:
            response = await anon.request(method, path)
            assert response.status_code == 404, (method, path, response.text)
            error = response.json()["error"]
            assert error["code"] == "not_found" and path in error["message"]
        # Known paths still want the token first, whatever the method.
        assert (await anon.get("/sessions")).status_code == 401
        assert (await anon.delete("/sessions")).status_code == 401
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(f"{server.ws_base}/no-such-stream"):
            pass
    assert refused.value.response.status_code == 404


async def test_docs_page_works_offline_and_tries_a_call(
    server: ServerProcess, browser: Browser, workspace: Path
) -> None:
    async with httpx2.AsyncClient(base_url=server.base_url) as anon:
        page_html = (await anon.get("/docs")).text
    # Nothing is fetched from elsewhere: every URL in the page is our own.
    assert not re.search(r"""(src|href)=["']https?://""", page_html)

    context = await browser.new_context(viewport={"width": 800, "height": 900})
    outside: list[str] = []

    async def only_ours(route: Route) -> None:
        if route.request.url.startswith(server.base_url):
            await route.continue_()
        else:
            outside.append(route.request.url)
            await route.abort()

    await context.route("**/*", only_ours)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{server.base_url}/docs")
    op = page.locator("details.op", has=page.locator(".path", has_text=re.compile("^/sessions$")))
    create = op.filter(has=page.locator(".method.post"))
    await expect(create).to_have_count(1, timeout=WAIT_MS)
    await expect(create.locator(".lock")).to_have_text("bearer token")

    # Try it out: create a session with the token typed into the page.
    await page.fill("#token", server.token)
    await page.locator("#token").dispatch_event("change")
    await create.locator("summary").click()
    await create.locator("textarea").fill(json.dumps({"workspace": str(workspace), "name": "docs"}))
    await create.locator("button.try").click()
    await expect(create.locator(".status")).to_have_text("201 Created", timeout=WAIT_MS)
    await expect(create.locator("pre").last).to_contain_text('"name": "docs"')
    assert outside == [] and errors == []
    await context.close()
