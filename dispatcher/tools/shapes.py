"""Building blocks for the built-in tools' output schemas.

An output schema describes ``ToolOutput.data``, the structured result clients
receive in ``tool.completed.data.structured``; the dispatcher checks it
against the same JSON Schema subset as input schemas (schema_subset) at
registration and validates ``data`` against it after every call.

The built-in tools build their ``data`` from literal dicts, so their schemas
are closed (``additionalProperties: false``) and list every key as required
unless a key is present only sometimes: a key added to the data but not to
the schema then fails the tool's own tests instead of reaching clients
undeclared.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

STRING: dict[str, Any] = {"type": "string"}
INTEGER: dict[str, Any] = {"type": "integer"}
COUNT: dict[str, Any] = {"type": "integer", "minimum": 0}
NUMBER: dict[str, Any] = {"type": "number"}
BOOLEAN: dict[str, Any] = {"type": "boolean"}
LINE: dict[str, Any] = {"type": "integer", "minimum": 1, "description": "1-based line number."}
PATH: dict[str, Any] = {
    "type": "string",
    "format": "path",
    "description": "Workspace-relative path.",
}


def nullable(kind: str, description: str | None = None) -> dict[str, Any]:
    """A value of JSON type ``kind``, or null."""
    schema: dict[str, Any] = {"type": [kind, "null"]}
    if description is not None:
        schema["description"] = description
    return schema


def array(items: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    """A list whose every item matches ``items``."""
    schema: dict[str, Any] = {"type": "array", "items": items}
    if description is not None:
        schema["description"] = description
    return schema


def record(
    properties: dict[str, dict[str, Any]],
    *,
    optional: Iterable[str] = (),
    description: str | None = None,
) -> dict[str, Any]:
    """A closed object: every property is required except those in ``optional``."""
    skip = set(optional)
    unknown = skip - properties.keys()
    if unknown:
        # A typo here would silently make a key required; fail at import.
        raise ValueError(f"optional names undeclared properties: {sorted(unknown)}")
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": [name for name in properties if name not in skip],
        "additionalProperties": False,
    }
    if description is not None:
        schema["description"] = description
    return schema
