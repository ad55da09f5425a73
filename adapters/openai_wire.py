"""Canonical messages to and from the OpenAI Chat Completions wire format.

Pure functions over JSON-shaped dicts. The same mapping serves OpenAI itself
and OpenAI-compatible servers (vLLM, Ollama, LM Studio), so it sticks to the
widely implemented subset: string content wherever possible.

Mapping (canonical -> wire):

* the request's system prompt and the text of every ``system`` role message
  (lifted out of the conversation, in order) become one leading ``system``
  message;
* a user message of one text block is a plain string; with images it is a
  list of ``text`` and ``image_url`` parts (images as ``data:`` URLs);
* an assistant message's text blocks join into ``content`` (null when there
  is none); its tool_use blocks become ``tool_calls`` with the input as a
  JSON string in ``function.arguments``;
* each tool_result (in a ``tool`` message, or a user message) becomes one
  ``tool`` message with ``tool_call_id``. The API has no error flag, so an
  error result's text starts with ``ERROR: ``. Tool messages cannot carry
  images: each image leaves a placeholder line, and the images follow in one
  ``user`` message after the tool messages (the API wants every tool message
  right after the assistant message that made the calls);
* any other blocks of such a message follow as a ``user`` message.

Lossy on the way back (documented, tested): several text blocks in one
assistant message or tool result come back as one; images from tool results
come back as a separate user message.
"""

from __future__ import annotations

import json
from typing import Any

from adapters.base import ModelRequest
from adapters.errors import RequestNotConvertible
from adapters.schema_check import check_tool_definition
from adapters.tool_args import parse_tool_arguments
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

ERROR_PREFIX = "ERROR: "


def build_request(
    request: ModelRequest,
    model: str,
    *,
    max_tokens_field: str = "max_completion_tokens",
    include_usage: bool = True,
) -> JSON:
    """The keyword arguments of ``chat.completions.create`` (without ``stream``).

    ``max_tokens_field`` is ``max_completion_tokens`` for OpenAI and
    ``max_tokens`` for compatible servers that predate the new name.
    """
    system_parts = [request.system] if request.system else []
    conversation: list[Message] = []
    for index, message in enumerate(request.messages):
        if message.role == "system":
            system_parts.append(_text_only(message, index))
        else:
            conversation.append(message)
    wire: list[JSON] = []
    system = "\n\n".join(part for part in system_parts if part)
    if system:
        wire.append({"role": "system", "content": system})
    wire.extend(messages_to_wire(conversation))
    body: JSON = {"model": model, "messages": wire, max_tokens_field: request.settings.max_tokens}
    if request.tools:
        body["tools"] = [tool_to_wire(tool) for tool in request.tools]
    settings = request.settings
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if settings.top_p is not None:
        body["top_p"] = settings.top_p
    if settings.stop_sequences:
        body["stop"] = list(settings.stop_sequences)
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    return body


def tool_to_wire(tool: ToolDefinition) -> JSON:
    """An OpenAI function tool (the schema checked against the subset first)."""
    check_tool_definition(tool)
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.input_schema,
        },
    }


def messages_to_wire(messages: list[Message]) -> list[JSON]:
    """Canonical messages as Chat Completions ``messages``."""
    wire: list[JSON] = []
    for index, message in enumerate(messages):
        if message.role == "system":
            wire.append({"role": "system", "content": _text_only(message, index)})
        elif message.role == "assistant":
            wire.append(_assistant_to_wire(message, index))
        else:
            wire.extend(_user_or_tool_to_wire(message, index))
    return wire


def _text_only(message: Message, index: int) -> str:
    for block in message.content:
        if not isinstance(block, TextBlock):
            raise RequestNotConvertible(
                f"messages[{index}] ({message.role}): only text is allowed, found {block.type}"
            )
    return message.text()


def _assistant_to_wire(message: Message, index: int) -> JSON:
    texts: list[str] = []
    calls: list[JSON] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            calls.append(
                {
                    "id": block.id,
                    "type": "function",
                    "function": {"name": block.name, "arguments": json.dumps(block.input)},
                }
            )
        else:
            raise RequestNotConvertible(
                f"messages[{index}] (assistant): an assistant message cannot hold {block.type}"
            )
    text = "".join(texts)
    item: JSON = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        item["tool_calls"] = calls
    return item


def _user_or_tool_to_wire(message: Message, index: int) -> list[JSON]:
    tool_messages: list[JSON] = []
    result_images: list[JSON] = []
    rest: list[ContentBlock] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            text, images = _result_to_text(block)
            tool_messages.append(
                {"role": "tool", "tool_call_id": block.tool_use_id, "content": text}
            )
            if images:
                result_images.append(
                    {"type": "text", "text": f"Images from tool result {block.tool_use_id}:"}
                )
                result_images.extend(_image_part(image) for image in images)
        elif isinstance(block, ToolUseBlock):
            raise RequestNotConvertible(
                f"messages[{index}] ({message.role}): tool_use {block.id!r} "
                "must be in an assistant message"
            )
        else:
            rest.append(block)
    wire = tool_messages
    if result_images:
        wire.append({"role": "user", "content": result_images})
    if rest:
        wire.append({"role": "user", "content": _user_content(rest)})
    return wire


def _result_to_text(block: ToolResultBlock) -> tuple[str, list[ImageBlock]]:
    lines: list[str] = []
    images: list[ImageBlock] = []
    for item in block.content:
        if isinstance(item, TextBlock):
            lines.append(item.text)
        else:
            images.append(item)
            lines.append(f"[image {len(images)} ({item.media_type}) follows in the next message]")
    text = "\n".join(lines)
    if block.is_error and not text.startswith(ERROR_PREFIX):
        text = ERROR_PREFIX + text
    return text, images


def _user_content(blocks: list[ContentBlock]) -> str | list[JSON]:
    if len(blocks) == 1 and isinstance(blocks[0], TextBlock):
        return blocks[0].text
    parts: list[JSON] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append(_image_part(block))
    return parts


def _image_part(image: ImageBlock) -> JSON:
    return {
        "type": "image_url",
        "image_url": {"url": f"data:{image.media_type};base64,{image.data}"},
    }


def messages_from_wire(wire: list[JSON]) -> list[Message]:
    """Chat Completions ``messages`` back to canonical ones.

    Consecutive ``tool`` messages become one canonical ``tool`` message; a text
    starting with ``ERROR: `` marks an error result.
    """
    messages: list[Message] = []
    for index, item in enumerate(wire):
        role = item.get("role")
        content = item.get("content")
        if role in ("system", "developer"):
            messages.append(Message(role="system", content=[TextBlock(text=_plain(content))]))
        elif role == "user":
            messages.append(Message(role="user", content=_user_blocks(content, index)))
        elif role == "assistant":
            messages.append(_assistant_from_wire(item))
        elif role == "tool":
            result = _result_from_wire(item)
            if messages and messages[-1].role == "tool":
                previous = messages.pop()
                messages.append(Message(role="tool", content=[*previous.content, result]))
            else:
                messages.append(Message(role="tool", content=[result]))
        else:
            raise RequestNotConvertible(f"wire messages[{index}] has unknown role {role!r}")
    return messages


def _plain(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")


def _user_blocks(content: Any, index: int) -> list[ContentBlock]:
    if isinstance(content, str):
        return [TextBlock(text=content)]
    blocks: list[ContentBlock] = []
    for part in content or []:
        if part.get("type") == "text":
            blocks.append(TextBlock(text=part["text"]))
        elif part.get("type") == "image_url":
            blocks.append(_image_from_url(part["image_url"]["url"], index))
        else:
            raise RequestNotConvertible(
                f"wire messages[{index}]: part type {part.get('type')!r} has no canonical form"
            )
    return blocks


def _image_from_url(url: str, index: int) -> ImageBlock:
    head, sep, data = url.partition(",")
    if not (url.startswith("data:") and sep and head.endswith(";base64")):
        raise RequestNotConvertible(f"wire messages[{index}]: only base64 data URLs are images")
    return ImageBlock(media_type=head[len("data:") : -len(";base64")], data=data)


def _assistant_from_wire(item: JSON) -> Message:
    blocks: list[ContentBlock] = []
    text = _plain(item.get("content"))
    if text:
        blocks.append(TextBlock(text=text))
    for call in item.get("tool_calls") or []:
        arguments, problem = parse_tool_arguments(call["function"].get("arguments") or "")
        if problem is not None:
            raise RequestNotConvertible(f"tool call {call['id']!r}: {problem}")
        blocks.append(ToolUseBlock(id=call["id"], name=call["function"]["name"], input=arguments))
    return Message(role="assistant", content=blocks)


def _result_from_wire(item: JSON) -> ToolResultBlock:
    text = _plain(item.get("content"))
    is_error = text.startswith(ERROR_PREFIX)
    if is_error:
        text = text[len(ERROR_PREFIX) :]
    content: list[ResultContent] = [TextBlock(text=text)] if text else []
    return ToolResultBlock(tool_use_id=item["tool_call_id"], content=content, is_error=is_error)
