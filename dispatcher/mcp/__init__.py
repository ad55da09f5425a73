"""MCP servers' tools behind the dispatcher's gate (the client side of MCP).

``McpServerConfig`` is one ``mcp_servers:`` entry; ``McpManager`` connects to
every configured server, registers each tool it can express as
``mcp_{server}_{tool}``, follows ``tools/list_changed``, and restarts a server
that dies, with backoff. See specs/mcp.md.
"""

from dispatcher.mcp.config import McpServerConfig, McpToolConfig
from dispatcher.mcp.manager import McpManager, McpServerState
from dispatcher.mcp.schema import SchemaNotExpressible, translate_schema

__all__ = [
    "McpManager",
    "McpServerConfig",
    "McpServerState",
    "McpToolConfig",
    "SchemaNotExpressible",
    "translate_schema",
]
