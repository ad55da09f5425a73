"""Tool output as events carry it: cut to a size, marked, the full size told.

Every event is queued for every subscriber and kept in the durable log, so a
tool that returns a megabyte would cost a megabyte per event (``tool.completed``
and the tool message's ``message.completed``) in every socket's queue. Events
carry at most ``max_event_output_bytes`` of it instead; the full result goes to
the conversation and the turn record, where the model and ``GET`` routes read
it. Sizes are UTF-8 bytes for text and the base64 data for images.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_MAX_EVENT_OUTPUT_BYTES = 64 * 1024
# Each tool result of a message.completed event gets an equal share of the
# limit, but never less than this.
MIN_RESULT_SHARE = 1024


def utf8_size(text: str) -> int:
    """UTF-8 bytes of ``text``; lone surrogates (undecodable file names) count 3."""
    return len(text.encode("utf-8", "surrogatepass"))


def cut_text(text: str, limit: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 form fits in ``limit`` bytes."""
    cut = text[:limit]
    size = utf8_size(cut)
    # Each pass shrinks by the ratio of the overshoot: a few passes at most.
    while size > limit:
        cut = cut[: max(0, len(cut) * limit // size - 1)]
        size = utf8_size(cut)
    return cut


def marker(shown: int, total: int) -> str:
    """The note that ends a cut output."""
    return (
        f"\n[output truncated in this event: {shown} of {total} bytes; "
        "the full result is in the conversation and the turn record]"
    )


def bounded_text(text: str, limit: int) -> tuple[str, int | None]:
    """``(text as an event carries it, its full size if it was cut else None)``."""
    if len(text) * 4 <= limit:  # no str of this length can exceed the limit
        return text, None
    size = utf8_size(text)
    if size <= limit:
        return text, None
    return cut_text(text, limit) + marker(limit, size), size


def bounded_blocks(
    blocks: Sequence[Mapping[str, Any]], limit: int
) -> tuple[list[dict[str, Any]], int, bool]:
    """Text/image blocks (as JSON) cut to ``limit``: ``(blocks, full size, truncated)``.

    Past the limit, text is cut and images that do not fit are left out, and a
    last text block says so.
    """
    sizes = [_block_size(b) for b in blocks]
    total = sum(sizes)
    if total <= limit:
        return [dict(b) for b in blocks], total, False
    out: list[dict[str, Any]] = []
    budget = limit
    omitted_images = 0
    for block, size in zip(blocks, sizes, strict=True):
        if block.get("type") == "text":
            if budget > 0:
                text = str(block.get("text", ""))
                kept = text if size <= budget else cut_text(text, budget)
                out.append({**block, "text": kept})
                budget -= min(size, budget)
        elif size <= budget:
            out.append(dict(block))
            budget -= size
        else:
            omitted_images += 1
    note = marker(limit - budget, total).lstrip("\n")
    if omitted_images:
        note = note[:-1] + f"; {omitted_images} image(s) left out]"
    out.append({"type": "text", "text": note})
    return out, total, True


def event_message(message: Mapping[str, Any], limit: int) -> dict[str, Any]:
    """A canonical message (as JSON) for a ``message.completed`` event.

    The content of its tool_result blocks shares ``limit`` (each gets an equal
    part, at least MIN_RESULT_SHARE); a cut result gets ``truncated: true`` and
    ``output_bytes``. Other blocks are left as they are.
    """
    content = message.get("content")
    if not isinstance(content, list):
        return dict(message)
    results = sum(1 for b in content if isinstance(b, Mapping) and b.get("type") == "tool_result")
    if not results:
        return dict(message)
    share = max(limit // results, MIN_RESULT_SHARE)
    blocks: list[Any] = []
    for block in content:
        if isinstance(block, Mapping) and block.get("type") == "tool_result":
            inner = block.get("content")
            if isinstance(inner, list):
                cut, total, truncated = bounded_blocks(inner, share)
                if truncated:
                    block = {**block, "content": cut, "truncated": True, "output_bytes": total}
        blocks.append(block)
    return {**message, "content": blocks}


def _block_size(block: Mapping[str, Any]) -> int:
    if block.get("type") == "text":
        return utf8_size(str(block.get("text", "")))
    data = block.get("data")
    return len(data) if isinstance(data, str) else 0
