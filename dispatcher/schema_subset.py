"""The JSON Schema subset tool inputs may use, and validators compiled from it.

Every provider accepts this subset, so a tool authored once works everywhere.
Constructs outside it are refused at registration with the construct's name
and its JSON pointer. ``pattern`` is refused too: a catastrophic regex in a
plugin's schema would stall the event loop on every call.

Validation has two paths, both built once per tool:

- jsonschema-rs answers "valid?" (about 0.2 us per built-in tool's input
  against 1.7 us for the hand-compiled closures it replaced; measured by
  benchmarks/schema_validators.py);
- only when it says no does the (also pre-built) jsonschema Draft7Validator run
  to list every error with its path. A property test keeps the two in step.

The subset check stays ours: which keywords a tool may use is policy, not
validation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema_rs
from jsonschema import Draft7Validator
from referencing import Registry

from dispatcher.errors import ToolRegistrationError

SUBSET_TYPES = frozenset({"string", "number", "integer", "boolean", "null", "object", "array"})

# Refused by name, each with the reason given to the tool author.
REFUSED_KEYWORDS: Mapping[str, str] = {
    "$ref": "references are not in the subset; inline the schema",
    "$defs": "definitions are not in the subset; inline the schema",
    "definitions": "definitions are not in the subset; inline the schema",
    "oneOf": "oneOf is not in the subset",
    "anyOf": "anyOf is not in the subset",
    "allOf": "allOf is not in the subset",
    "not": "not is not in the subset",
    "if": "if/then/else is not in the subset",
    "then": "if/then/else is not in the subset",
    "else": "if/then/else is not in the subset",
    "patternProperties": "patternProperties is not in the subset",
    "pattern": "pattern is not in the subset (a regex could stall the server)",
    "dependencies": "dependencies is not in the subset",
    "const": "const is not in the subset; use a one-value enum",
}

# Keywords a subset schema may use. Constraints beyond the core list are the
# ones every provider passes through unchanged.
ALLOWED_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "items",
        "enum",
        "description",
        "format",
        "additionalProperties",
        "title",
        "default",
        "examples",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
    }
)
ROOT_ONLY_KEYWORDS = frozenset({"$schema", "$id"})

BASIC_FORMATS = frozenset(
    {"date-time", "date", "time", "email", "uri", "uuid", "ipv4", "ipv6", "hostname", "path"}
)


def check_subset(schema: Any, what: str = "input_schema") -> None:
    """Raise ToolRegistrationError unless ``schema`` is an object schema in the
    subset; ``what`` names the schema in the message (``output_schema``)."""
    if not isinstance(schema, dict):
        raise ToolRegistrationError(f"{what} must be a JSON object (at '')")
    if schema.get("type") != "object":
        raise ToolRegistrationError(f'{what} must have "type": "object" (at \'/type\')')
    _check_node(schema, "", is_root=True)


def _pointer(parent: str, *parts: str) -> str:
    escaped = (p.replace("~", "~0").replace("/", "~1") for p in parts)
    return parent + "".join("/" + p for p in escaped)


def _check_node(node: Any, at: str, *, is_root: bool = False) -> None:
    if not isinstance(node, dict):
        raise ToolRegistrationError(f"schema at '{at}' must be an object, got {node!r:.60}")
    for key, value in node.items():
        where = _pointer(at, key)
        if key in REFUSED_KEYWORDS:
            raise ToolRegistrationError(f"{key} at '{where}': {REFUSED_KEYWORDS[key]}")
        if key in ROOT_ONLY_KEYWORDS and is_root:
            continue
        if key not in ALLOWED_KEYWORDS:
            raise ToolRegistrationError(f"keyword {key!r} at '{where}' is not in the schema subset")
        _check_keyword(key, value, where)
    props = node.get("properties", {})
    for name in node.get("required", []):
        if name not in props:
            raise ToolRegistrationError(
                f"required property {name!r} at '{_pointer(at, 'required')}' is not "
                "declared in properties"
            )


def _check_keyword(key: str, value: Any, where: str) -> None:
    if key == "type":
        types = value if isinstance(value, list) else [value]
        if not types or any(t not in SUBSET_TYPES for t in types):
            raise ToolRegistrationError(f"type {value!r} at '{where}' is not a subset type")
    elif key == "properties":
        if not isinstance(value, dict):
            raise ToolRegistrationError(f"properties at '{where}' must be an object")
        for name, sub in value.items():
            _check_node(sub, _pointer(where, name))
    elif key == "items":
        if isinstance(value, list):
            raise ToolRegistrationError(f"tuple items at '{where}' are not in the subset")
        _check_node(value, where)
    elif key == "additionalProperties":
        if not isinstance(value, bool):
            raise ToolRegistrationError(
                f"additionalProperties at '{where}' must be true or false, not a schema"
            )
    elif key == "required":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ToolRegistrationError(f"required at '{where}' must be a list of names")
    elif key == "enum":
        if not isinstance(value, list) or not value:
            raise ToolRegistrationError(f"enum at '{where}' must be a non-empty list")
    elif key == "format":
        if value not in BASIC_FORMATS:
            raise ToolRegistrationError(
                f"format {value!r} at '{where}' is not one of {sorted(BASIC_FORMATS)}"
            )
    elif key in ("minimum", "maximum"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ToolRegistrationError(f"{key} at '{where}' must be a number")
    elif key in ("minLength", "maxLength", "minItems", "maxItems") and (
        isinstance(value, bool) or not isinstance(value, int) or value < 0
    ):
        raise ToolRegistrationError(f"{key} at '{where}' must be a non-negative integer")


# -- compiled validation ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class InputError:
    """One validation failure: where in the input, and what was wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {self.message}"


class CompiledValidator:
    """Validates one tool's input; build once at registration, reuse per call."""

    __slots__ = ("_detail", "_fast")

    def __init__(self, schema: dict[str, Any], what: str = "input_schema") -> None:
        check_subset(schema, what)
        # Draft 7 on both paths so they judge alike; formats are annotations
        # (as in Draft7Validator without a format checker), and offline: the
        # subset has no $ref, but nothing is ever fetched either way.
        self._fast = jsonschema_rs.Draft7Validator(schema, validate_formats=False, offline=True)
        # An empty registry: nothing is ever fetched, even if a $schema names a URL.
        self._detail = Draft7Validator(schema, registry=Registry())

    def is_valid(self, instance: Any) -> bool:
        try:
            return bool(self._fast.is_valid(instance))
        except (ValueError, OverflowError, TypeError):
            # A value jsonschema-rs cannot take in (not JSON: a set, a
            # non-string key): the pure-Python validator decides.
            return bool(self._detail.is_valid(instance))

    def errors(self, instance: Any) -> list[InputError]:
        """Every error with its JSON pointer; empty when the input is valid."""
        if self.is_valid(instance):
            return []
        found = [
            InputError(path=_pointer("", *(str(p) for p in err.absolute_path)), message=err.message)
            for err in self._detail.iter_errors(instance)
        ]
        found.sort(key=lambda e: e.path)
        if not found:  # the fast path is stricter than jsonschema somewhere: a bug
            found.append(InputError(path="", message="input does not match the schema"))
        return found
