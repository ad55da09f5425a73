"""One ``mcp_servers:`` entry of the configuration (the admin's, so trusted)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from protocol.canonical import SideEffects

# Server names become part of tool names (mcp_{server}_{tool}).
SERVER_NAME = r"^[A-Za-z0-9][A-Za-z0-9-]{0,30}$"


class McpToolConfig(BaseModel):
    """Per-tool settings of one MCP server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    side_effects: SideEffects | None = None
    # Seconds one call may take; None: the dispatcher's default for its class.
    timeout: float | None = Field(default=None, gt=0, le=86400)


class McpServerConfig(BaseModel):
    """How to reach one MCP server: stdio (``command``) or streamable HTTP (``url``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # Working directory of a stdio server; it is also the one place the
    # sandbox lets it write. None: an empty private directory.
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    # The side-effect class of every tool of this server unless ``tools`` says
    # otherwise. Undeclared: ``network`` ("all MCP tools are sensitive").
    side_effects: SideEffects = SideEffects.NETWORK
    # A stdio server keeps the host's network only when this says so.
    network: bool = False
    tools: dict[str, McpToolConfig] = Field(default_factory=dict)
    # Seconds allowed for connecting and listing tools.
    connect_timeout: float = Field(default=30.0, gt=0, le=600)

    @field_validator("cwd")
    @classmethod
    def _absolute_cwd(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("/", "~")):
            raise ValueError(f"cwd {value!r} must be an absolute path")
        return value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://", value):
            raise ValueError(f"url {value!r} must start with http:// or https://")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("set exactly one of command (stdio) or url (streamable HTTP)")
        if self.url is not None and (self.args or self.env or self.cwd or self.network):
            raise ValueError("args, env, cwd and network apply to stdio servers (command) only")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def side_effects_of(self, tool: str) -> SideEffects:
        entry = self.tools.get(tool)
        if entry is not None and entry.side_effects is not None:
            return entry.side_effects
        return self.side_effects


def check_server_name(name: str) -> str:
    if not re.match(SERVER_NAME, name):
        raise ValueError(
            f"MCP server name {name!r} must be letters, digits and '-' (at most 31), "
            "since it becomes part of tool names"
        )
    return name
