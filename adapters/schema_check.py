"""A last defensive check that a tool schema stays inside the JSON-Schema subset.

The dispatcher refuses such schemas when a tool registers; this check makes
sure that, whatever path a definition took, none outside the subset is ever
serialised for a provider. It looks only for the constructs the subset leaves
out (some providers reject them, and ``pattern`` could stall a validator with
a catastrophic regex), so anything the dispatcher accepts passes here too.
"""

from __future__ import annotations

from typing import Any

from adapters.errors import RequestNotConvertible
from protocol.canonical import ToolDefinition

# Keywords outside the subset, wherever they appear in a schema.
FORBIDDEN_KEYWORDS = frozenset(
    {
        "$ref",
        "$defs",
        "definitions",
        "$dynamicRef",
        "oneOf",
        "anyOf",
        "allOf",
        "not",
        "if",
        "then",
        "else",
        "patternProperties",
        "pattern",
        "dependencies",
        "dependentSchemas",
        "unevaluatedProperties",
        "const",
    }
)


def check_tool_definition(tool: ToolDefinition) -> None:
    """Raise RequestNotConvertible naming the first construct outside the subset."""
    schema = tool.input_schema
    if schema.get("type") != "object":
        raise RequestNotConvertible(
            f'tool {tool.name!r}: input_schema must have "type": "object", '
            f"got {schema.get('type')!r}"
        )
    problem = _first_problem(schema, "input_schema")
    if problem is not None:
        raise RequestNotConvertible(
            f"tool {tool.name!r}: {problem}; it is outside the JSON-Schema subset "
            "and is never sent to a provider"
        )


def _first_problem(schema: Any, where: str) -> str | None:
    if not isinstance(schema, dict):
        return f"{where} must be an object, got {type(schema).__name__}"
    for key in schema:
        if key in FORBIDDEN_KEYWORDS:
            return f"{where} uses {key!r}"
    extra = schema.get("additionalProperties")
    if extra is not None and not isinstance(extra, bool):
        return f"{where}.additionalProperties must be true or false, not a schema"
    properties = schema.get("properties")
    if properties is not None:
        if not isinstance(properties, dict):
            return f"{where}.properties must be an object"
        for name, sub in properties.items():
            problem = _first_problem(sub, f"{where}.properties.{name}")
            if problem is not None:
                return problem
    items = schema.get("items")
    if items is not None:
        return _first_problem(items, f"{where}.items")
    return None
