"""Parsing the argument text a model streamed for one tool call."""

from __future__ import annotations

import json
from typing import Any

_SNIPPET = 200


def parse_tool_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """Return (input, None) for a JSON object, or ({}, why) for anything else.

    Empty text means a call without arguments: ``{}``. The reason quotes the
    start of the text so the model can see what it sent and correct itself.
    """
    if raw.strip() == "":
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, (
            f"tool arguments are not valid JSON ({exc.msg} at position {exc.pos}): {_snippet(raw)}"
        )
    except RecursionError:
        # Thousands of nested brackets: more than the parser (or any tool) takes.
        return {}, (
            "tool arguments nest too deeply to be read (they break the nesting depth "
            f"limit of tool input): {_snippet(raw)}"
        )
    if not isinstance(value, dict):
        return {}, (
            f"tool arguments must be a JSON object, got {_json_type(value)}: {_snippet(raw)}"
        )
    return value, None


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null"


def _snippet(raw: str) -> str:
    return raw if len(raw) <= _SNIPPET else raw[:_SNIPPET] + "..."
