"""Request bodies of the HTTP API. Strict: unknown keys are refused (422 naming them)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from adapters.canonical import ToolUseBlock

MAX_TOOL_USES = 64


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateSession(_Body):
    """``POST /sessions``."""

    workspace: str = Field(min_length=1, max_length=4096, description="An existing directory")
    name: str | None = Field(default=None, max_length=200)
    policy: dict[str, Any] | None = Field(
        default=None, description="Overrides of the server's policy (same keys as `policy:`)"
    )
    model: str | None = Field(default=None, max_length=200)


class CreateTurn(_Body):
    """``POST /sessions/{id}/turns``: exactly one of ``tool_uses`` or ``message``."""

    tool_uses: list[ToolUseBlock] | None = Field(
        default=None, min_length=1, max_length=MAX_TOOL_USES
    )
    message: str | None = Field(default=None, min_length=1, max_length=200_000)

    @model_validator(mode="after")
    def _exactly_one(self) -> CreateTurn:
        if (self.tool_uses is None) == (self.message is None):
            raise ValueError('send exactly one of "tool_uses" or "message"')
        return self

    def stored(self) -> dict[str, Any]:
        """The request as the store keeps it."""
        if self.tool_uses is not None:
            return {"tool_uses": [b.model_dump(mode="json") for b in self.tool_uses]}
        return {"message": self.message}


class AnswerConfirmation(_Body):
    """``POST /sessions/{id}/turns/{turn_id}/confirmations/{request_id}``."""

    decision: Literal["allow", "deny"]
    scope: Literal["once", "session"] = "once"
    message: str | None = Field(
        default=None, max_length=4000, description="For a deny: told to the model"
    )
