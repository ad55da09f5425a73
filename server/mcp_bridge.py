"""``toolrelay mcp ...``: the command-line side of MCP.

- ``toolrelay mcp serve --session ID`` (or ``--workspace DIR``, which creates
  a session): an MCP server on stdin/stdout for clients that only launch
  commands. It is a proxy: every ``tools/list`` and ``tools/call`` goes to
  the running server's ``/sessions/{id}/mcp`` endpoint with the SDK's client,
  progress notifications included, so the call takes exactly the HTTP road
  (policy, confirmations any client may answer, events, log). Listings and
  results pass through as the endpoint made them: ``outputSchema`` and
  ``structuredContent`` included.
- ``toolrelay mcp list``: ``GET /mcp-servers``, one line per server.

The server's address comes from ``--url`` or ``TOOLRELAY_URL`` (default
``http://127.0.0.1:8765``); the token from ``--token``, ``TOOLRELAY_TOKEN``
or the token file in the default data dir. Nothing but MCP goes to stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import anyio
import httpx2
import mcp_types as types

from clients.local import BadUsage, resolve_token

DEFAULT_URL = "http://127.0.0.1:8765"


def add_arguments(sub: Any) -> None:
    """The ``mcp`` subcommand and its own subcommands."""
    mcp_p = sub.add_parser("mcp", help="MCP: serve a session over stdio, list MCP servers")
    mcp_sub = mcp_p.add_subparsers(dest="mcp_command")
    serve_p = mcp_sub.add_parser("serve", help="an MCP server on stdio for one session")
    target = serve_p.add_mutually_exclusive_group(required=True)
    target.add_argument("--session", help="the session whose tools to serve")
    target.add_argument("--workspace", help="create a session on this directory and serve it")
    list_p = mcp_sub.add_parser("list", help="the configured MCP servers and their state")
    for p in (serve_p, list_p):
        p.add_argument(
            "--url",
            default=os.environ.get("TOOLRELAY_URL", DEFAULT_URL),
            help=f"server URL (default: $TOOLRELAY_URL or {DEFAULT_URL})",
        )
        p.add_argument(
            "--token",
            default=None,
            help="access token (default: $TOOLRELAY_TOKEN, else the token file in "
            "$TOOLRELAY_DATA_DIR or the default data dir)",
        )


def run(args: argparse.Namespace) -> int:
    try:
        token = resolve_token(args.token)
    except BadUsage as exc:
        print(f"toolrelay mcp: {exc}", file=sys.stderr)
        return 2
    headers = {"Authorization": f"Bearer {token}", "X-Client-Name": "mcp-bridge"}
    url = args.url.rstrip("/")
    try:
        if args.mcp_command == "list":
            return _list(url, headers)
        if args.mcp_command == "serve":
            session = args.session or _create_session(url, headers, args.workspace)
            anyio.run(_serve, url, headers, session)
            return 0
    except httpx2.HTTPError as exc:
        print(f"toolrelay mcp: cannot reach {url}: {exc}", file=sys.stderr)
        return 1
    print("toolrelay mcp: say 'serve' or 'list' (see --help)", file=sys.stderr)
    return 2


def _list(url: str, headers: dict[str, str]) -> int:
    r = httpx2.get(f"{url}/mcp-servers", headers=headers, timeout=10)
    if r.status_code != 200:
        print(f"toolrelay mcp list: {r.status_code} {r.text}", file=sys.stderr)
        return 1
    servers = r.json()
    if not servers:
        print("no MCP servers configured (mcp_servers: in the config)")
    for s in servers:
        error = f"  error: {s['error']}" if s.get("error") else ""
        print(
            f"{s['name']}  {s['state']}  restarts={s['restarts']}  tools={len(s['tools'])}{error}"
        )
        for tool in s["tools"]:
            print(f"    {tool}")
        for skipped in s.get("skipped", []):
            print(f"    (not registered) {skipped['tool']}: {skipped['error']}")
        for dropped in s.get("output_schemas_dropped", []):
            print(f"    (outputSchema dropped) {dropped['tool']}: {dropped['error']}")
    return 0


def _create_session(url: str, headers: dict[str, str], workspace: str) -> str:
    r = httpx2.post(
        f"{url}/sessions",
        json={"workspace": os.path.abspath(workspace), "name": "mcp"},
        headers=headers,
        timeout=30,
    )
    if r.status_code != 201:
        raise SystemExit(f"toolrelay mcp serve: cannot create a session: {r.text}")
    session_id = str(r.json()["id"])
    print(f"toolrelay mcp serve: session {session_id}", file=sys.stderr)
    return session_id


async def _serve(url: str, headers: dict[str, str], session_id: str) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.lowlevel.server import Server
    from mcp.server.stdio import stdio_server

    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=None)) as http,
        Client(
            streamable_http_client(f"{url}/sessions/{session_id}/mcp", http_client=http),
            mode="legacy",
            cache=None,
        ) as upstream,
    ):

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return await upstream.list_tools()

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            async def progress(progress: float, total: float | None, message: str | None) -> None:
                await ctx.session.report_progress(progress, total, message)

            return await upstream.call_tool(
                params.name, dict(params.arguments or {}), progress_callback=progress
            )

        bridge: Server[Any] = Server("toolrelay", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (read, write):
            await bridge.run(read, write, bridge.create_initialization_options())
