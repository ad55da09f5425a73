"""Canonical messages to and from the Anthropic Messages API wire format.

Pure functions over JSON-shaped dicts, so they can be tested without a network
and reused by anything that stores or replays Anthropic conversations.

Mapping (canonical -> wire):

* ``system`` role messages join the request's system prompt (the API takes the
  system prompt as a separate top-level field), separated by blank lines;
* ``tool`` role messages become ``user`` messages of ``tool_result`` blocks;
* consecutive messages with the same wire role merge into one, tool results
  first (the API wants the results to open the user message that follows
  the assistant's tool calls);
* empty text blocks and messages left empty are dropped (the API rejects them);
* images become base64 ``source`` objects; they may appear in user content and
  in tool results, never in assistant content;
* ``temperature`` and ``top_p`` are left out: the API version the SDK speaks
  (2026-10-21) refuses sampling parameters (the adapter logs that it dropped them).

The inverse splits a user message back into a ``tool`` message (its tool
results) followed by a ``user`` message (everything else).
"""

from __future__ import annotations

from typing import Any

from adapters.base import ModelRequest
from adapters.errors import RequestNotConvertible
from adapters.schema_check import check_tool_definition
from protocol.canonical import (
    ContentBlock,
    ImageBlock,
    Message,
    ResultContent,
    TextBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
)

JSON = dict[str, Any]


def build_request(request: ModelRequest, model: str) -> JSON:
    """The keyword arguments of ``messages.create`` for ``request`` (without ``stream``)."""
    system_parts = [request.system] if request.system else []
    conversation: list[Message] = []
    for message in request.messages:
        if message.role == "system":
            system_parts.append(message.text())
        else:
            conversation.append(message)
    body: JSON = {
        "model": model,
        "max_tokens": request.settings.max_tokens,
        "messages": messages_to_wire(conversation),
    }
    system = "\n\n".join(part for part in system_parts if part)
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [tool_to_wire(tool) for tool in request.tools]
    # temperature and top_p are not sent: API version 2026-10-21, which the SDK
    # speaks, rejects every sampling parameter with a 400, even at its default.
    if request.settings.stop_sequences:
        body["stop_sequences"] = list(request.settings.stop_sequences)
    return body


def tool_to_wire(tool: ToolDefinition) -> JSON:
    """An Anthropic tool: name, description, input_schema (checked against the subset)."""
    check_tool_definition(tool)
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}


def messages_to_wire(messages: list[Message]) -> list[JSON]:
    """Canonical user/assistant/tool messages as Anthropic ``messages``."""
    wire: list[JSON] = []
    for index, message in enumerate(messages):
        if message.role == "system":
            raise RequestNotConvertible(
                f"messages[{index}]: system messages belong in the system prompt"
            )
        role = "assistant" if message.role == "assistant" else "user"
        blocks = [
            converted
            for block in message.content
            if (converted := _block_to_wire(block, message.role, index)) is not None
        ]
        if not blocks:
            continue
        if wire and wire[-1]["role"] == role:
            merged = wire[-1]["content"] + blocks
            # Tool results lead a user message; a stable sort keeps each group's order.
            merged.sort(key=lambda b: 0 if b["type"] == "tool_result" else 1)
            wire[-1]["content"] = merged
        else:
            wire.append({"role": role, "content": blocks})
    return wire


def _block_to_wire(block: ContentBlock, role: str, index: int) -> JSON | None:
    where = f"messages[{index}] ({role})"
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text} if block.text else None
    if isinstance(block, ImageBlock):
        if role == "assistant":
            raise RequestNotConvertible(f"{where}: an assistant message cannot hold an image")
        return _image_to_wire(block)
    if isinstance(block, ToolUseBlock):
        if role != "assistant":
            raise RequestNotConvertible(
                f"{where}: tool_use {block.id!r} must be in an assistant message"
            )
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if role == "assistant":
        raise RequestNotConvertible(
            f"{where}: tool_result {block.tool_use_id!r} cannot be in an assistant message"
        )
    result: JSON = {"type": "tool_result", "tool_use_id": block.tool_use_id}
    content = [_result_item_to_wire(item) for item in block.content]
    content = [item for item in content if item is not None]
    if content:
        result["content"] = content
    if block.is_error:
        result["is_error"] = True
    return result


def _result_item_to_wire(item: ResultContent) -> JSON | None:
    if isinstance(item, TextBlock):
        return {"type": "text", "text": item.text} if item.text else None
    return _image_to_wire(item)


def _image_to_wire(image: ImageBlock) -> JSON:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": image.media_type, "data": image.data},
    }


def messages_from_wire(wire: list[JSON]) -> list[Message]:
    """Anthropic ``messages`` back to canonical ones (the inverse of messages_to_wire)."""
    messages: list[Message] = []
    for index, item in enumerate(wire):
        role = item.get("role")
        content = item.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if role not in ("user", "assistant") or not isinstance(content, list):
            raise RequestNotConvertible(f"wire messages[{index}] is not a user/assistant message")
        blocks = [block_from_wire(block) for block in content]
        if role == "assistant":
            messages.append(Message(role="assistant", content=blocks))
            continue
        results: list[ContentBlock] = [b for b in blocks if isinstance(b, ToolResultBlock)]
        others: list[ContentBlock] = [b for b in blocks if not isinstance(b, ToolResultBlock)]
        if results:
            messages.append(Message(role="tool", content=results))
        if others:
            messages.append(Message(role="user", content=others))
    return messages


def block_from_wire(block: JSON) -> ContentBlock:
    """One Anthropic content block as a canonical block."""
    kind = block.get("type")
    if kind == "text":
        return TextBlock(text=block["text"])
    if kind == "image":
        source = block["source"]
        if source.get("type") != "base64":
            raise RequestNotConvertible(f"image source type {source.get('type')!r} unsupported")
        return ImageBlock(media_type=source["media_type"], data=source["data"])
    if kind == "tool_use":
        return ToolUseBlock(id=block["id"], name=block["name"], input=block.get("input", {}))
    if kind == "tool_result":
        raw = block.get("content", [])
        if isinstance(raw, str):
            raw = [{"type": "text", "text": raw}]
        items: list[ResultContent] = []
        for entry in raw:
            converted = block_from_wire(entry)
            if not isinstance(converted, TextBlock | ImageBlock):
                raise RequestNotConvertible("a tool_result may hold only text and images")
            items.append(converted)
        return ToolResultBlock(
            tool_use_id=block["tool_use_id"],
            content=items,
            is_error=bool(block.get("is_error", False)),
        )
    raise RequestNotConvertible(f"Anthropic block type {kind!r} has no canonical form")
