"""The canonical message format: the one shape every provider adapter, the
dispatcher, the server and the clients exchange.

Models are strict (unknown keys rejected) so that a round trip through JSON is
exact: ``Model.model_validate_json(m.model_dump_json()) == m`` for every model.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class SideEffects(StrEnum):
    """A tool's highest side-effect class, declared by capability, not by use."""

    NONE = "none"
    READ = "read"
    WRITE = "write"
    EXECUTE = "execute"
    NETWORK = "network"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TextBlock(_Strict):
    """Plain text."""

    type: Literal["text"] = "text"
    text: str


class ImageBlock(_Strict):
    """An image carried inline as base64."""

    type: Literal["image"] = "image"
    media_type: str
    data: str


class ToolUseBlock(_Strict):
    """A request from the model (or a client playing it) to call one tool."""

    type: Literal["tool_use"] = "tool_use"
    id: str = Field(min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=256)
    input: dict[str, Any]


ResultContent = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]


class ToolResultBlock(_Strict):
    """The answer to one ToolUseBlock; ``is_error`` marks every failure."""

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: list[ResultContent]
    is_error: bool = False

    def text(self) -> str:
        """The text blocks of the result joined, for logs and previews."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


ContentBlock = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock, Field(discriminator="type")
]

Role = Literal["user", "assistant", "tool", "system"]


class Message(_Strict):
    """One conversation message: a role and its blocks."""

    role: Role
    content: list[ContentBlock]

    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


class ToolDefinition(_Strict):
    """What a tool tells models and clients about itself."""

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str
    input_schema: dict[str, Any]
    side_effects: SideEffects
    # Clients read tool.completed.data.structured against this; never sent to providers.
    output_schema: dict[str, Any] | None = None


content_block_adapter: TypeAdapter[TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock] = (
    TypeAdapter(ContentBlock)
)


def text_result(tool_use_id: str, text: str, *, is_error: bool = False) -> ToolResultBlock:
    """A tool result holding one text block."""
    return ToolResultBlock(
        tool_use_id=tool_use_id, content=[TextBlock(text=text)], is_error=is_error
    )
