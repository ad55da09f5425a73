"""One ``mcp_servers:`` entry of the configuration (the admin's, so trusted)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from protocol.canonical import SideEffects

# Server names become part of tool names (mcp_{server}_{tool}).
SERVER_NAME = r"^[A-Za-z0-9][A-Za-z0-9-]{0,30}$"
# The shell's default output cap (dispatcher/tools/shell/tool.py).
DEFAULT_RESULT_BYTES = 64 * 1024
DEFAULT_MESSAGE_BYTES = 32 * 1024 * 1024


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
    # What one result keeps, in bytes of text, like the shell's
    # max_output_bytes: past it the head and the tail are kept around a note,
    # so a huge result is neither stored nor sent to the model whole.
    max_result_bytes: int = Field(default=DEFAULT_RESULT_BYTES, ge=1024, le=64 * 1024 * 1024)
    # The largest message (one JSON-RPC line) read from a stdio server; a
    # longer one is dropped unread and the call it answers fails naming this
    # key. It bounds the memory and the parsing time one message can cost.
    max_message_bytes: int = Field(
        default=DEFAULT_MESSAGE_BYTES, ge=64 * 1024, le=1024 * 1024 * 1024
    )
    # notifications/tools/list_changed re-lists the tools at most once per
    # this many seconds (the last change is always seen): a server flipping
    # its list cannot flood the sessions with tools.changed events.
    list_changed_interval: float = Field(default=1.0, ge=0.05, le=3600)

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
