"""``GET /mcp-servers``: each configured MCP server's state, tools and restarts."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from server.routes.deps import McpDep, PrincipalDep

router = APIRouter(tags=["mcp"])


@router.get("/mcp-servers")
async def mcp_servers(mcp: McpDep, principal: PrincipalDep) -> list[dict[str, Any]]:
    """``[{name, transport, state, error?, tools, skipped, restarts}]``; ``state`` is
    ``connecting``, ``ready``, ``failed`` (with ``error`` and ``next_retry_s``) or
    ``stopped``; ``skipped`` names each tool whose schema could not be expressed,
    with the construct and its JSON pointer."""
    return mcp.states() if mcp is not None else []
