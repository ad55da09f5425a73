"""Attack: another site frames the dashboard (clickjacking).

A page on another origin puts the dashboard in an invisible iframe and lures
the visitor into clicking where the dashboard's Allow button sits. The
dashboard and its assets must forbid being framed by anyone:
``Content-Security-Policy: frame-ancestors 'none'`` (and ``X-Frame-Options:
DENY`` for browsers that predate it).

The headers are checked on every dashboard response; then real headless
Chromium loads a page from a tiny HTTP server on another port of 127.0.0.1
(another origin) that frames the real server's dashboard, and the frame must
come up blocked, never showing the dashboard.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx2
import pytest
from playwright.async_api import Browser, async_playwright

from tests.harness import ServerProcess

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run"]
DASHBOARD_PATHS = [
    "/dashboard/",
    "/dashboard/static/app.js",
    "/dashboard/static/style.css",
    "/dashboard/static/index.html",
    "/docs",
]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("framing"))
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.mark.parametrize("path", DASHBOARD_PATHS)
def test_dashboard_responses_forbid_framing(srv: ServerProcess, path: str) -> None:
    response = httpx2.get(f"{srv.base_url}{path}", timeout=10)
    assert response.status_code == 200, (path, response.status_code)
    csp = response.headers.get("content-security-policy", "")
    assert "frame-ancestors 'none'" in csp, (path, csp)
    assert response.headers.get("x-frame-options") == "DENY", path


class _EvilSite:
    """A page on another origin (another port) that frames the dashboard."""

    def __init__(self, target: str) -> None:
        page = (
            "<!doctype html><title>win a prize</title>"
            f'<iframe id="victim" src="{target}" width="800" height="600"></iframe>'
        ).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> _EvilSite:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.mark.browser
async def test_chromium_blocks_another_origin_framing_the_dashboard(
    srv: ServerProcess, browser: Browser
) -> None:
    with _EvilSite(f"{srv.base_url}/dashboard/") as evil:
        page = await browser.new_page()
        refusals: list[str] = []
        page.on("console", lambda msg: refusals.append(msg.text))
        await page.goto(evil.url, wait_until="load", timeout=15_000)
        victim = await page.query_selector("#victim")
        assert victim is not None
        frame = await victim.content_frame()
        assert frame is not None
        # The dashboard's own page has a composer; a blocked frame shows
        # Chromium's error page instead. Bounded wait for the frame to settle.
        await frame.wait_for_load_state("load", timeout=15_000)
        composer = await frame.query_selector("#composer")
        title = await frame.title()
        assert composer is None, f"the dashboard rendered inside {evil.url} (title {title!r})"
        assert "toolrelay" not in title.lower(), title
        assert frame.url != f"{srv.base_url}/dashboard/" or any(
            "frame-ancestors" in r for r in refusals
        ), (frame.url, refusals)


@pytest.mark.browser
async def test_the_dashboard_still_loads_on_its_own(srv: ServerProcess, browser: Browser) -> None:
    """The headers forbid framing only: opened directly, the page works."""
    page = await browser.new_page()
    await page.goto(f"{srv.base_url}/dashboard/", wait_until="load", timeout=15_000)
    assert await page.query_selector("#composer") is not None
