"""MCP tools publish full JSON Schema; the dispatcher takes a subset
(dispatcher/schema_subset.py). This module translates what the subset can
express *exactly* and refuses the rest, naming the construct and its JSON
pointer in the server's own schema:

- local ``$ref`` (``#/$defs/...``, ``#/definitions/...``) is inlined; a
  recursive one cannot be, and is refused;
- ``anyOf``/``oneOf`` of ``[T, {"type": "null"}]`` becomes ``T`` that also
  accepts null (``"type": [t, "null"]``), and the field stops being required:
  an optional field, as pydantic-made servers mean it;
- ``allOf`` with one member is merged into its parent (pydantic wraps a
  ``$ref`` that has a default that way);
- ``const`` becomes a one-value ``enum``; ``additionalProperties: {}`` is
  ``true``; annotations that never affect validation are dropped.

Everything else outside the subset (``pattern``, real unions, tuple items,
schema-valued ``additionalProperties``, remote references, ...) refuses the
tool. The result is then checked by ``check_subset`` as any tool's schema is.
Nothing here executes or compiles the outside schema.
"""

from __future__ import annotations

import copy
from typing import Any

from dispatcher.errors import ToolRegistrationError
from dispatcher.schema_subset import (
    ALLOWED_KEYWORDS,
    REFUSED_KEYWORDS,
    ROOT_ONLY_KEYWORDS,
    check_subset,
)

# Keywords that only annotate: dropping them changes no validation outcome.
ANNOTATIONS = frozenset(
    {"$comment", "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding"}
)
MAX_DEPTH = 64  # a schema nesting deeper than this (after inlining) is refused


class SchemaNotExpressible(ToolRegistrationError):
    """The schema uses ``construct`` at ``pointer`` (in the server's schema),
    which the subset cannot express exactly."""

    def __init__(self, construct: str, pointer: str, reason: str) -> None:
        super().__init__(f"{construct} at '{pointer}': {reason}")
        self.construct = construct
        self.pointer = pointer
        self.reason = reason


def translate_schema(schema: Any, what: str = "input schema") -> dict[str, Any]:
    """The subset schema equivalent to ``schema``; SchemaNotExpressible otherwise.
    ``what`` names the schema in messages (``input schema``, ``output schema``):
    an MCP tool's ``outputSchema`` is translated by the same rules."""
    if not isinstance(schema, dict):
        raise SchemaNotExpressible("schema", "", f"an {what} must be a JSON object")
    translator = _Translator(schema)
    result = translator.node(schema, "", refs=(), depth=0, root=True)
    if result.get("type") != "object":
        raise SchemaNotExpressible("type", "/type", f'the {what} must be "type": "object"')
    try:
        check_subset(result, what.replace(" ", "_"))
    except ToolRegistrationError as exc:
        # A safety net: the translator should have refused it with a pointer first.
        raise SchemaNotExpressible("schema", "", str(exc)) from None
    return result


def _pointer(parent: str, *parts: str) -> str:
    escaped = (p.replace("~", "~0").replace("/", "~1") for p in parts)
    return parent + "".join("/" + p for p in escaped)


def _is_null_schema(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") == "null" and len(node) == 1


class _Translator:
    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root

    def resolve(self, ref: Any, at: str, refs: tuple[str, ...]) -> tuple[dict[str, Any], str]:
        if not isinstance(ref, str) or not ref.startswith("#/"):
            raise SchemaNotExpressible(
                "$ref", at, f"only local references (#/...) can be inlined, not {ref!r:.80}"
            )
        if ref in refs:
            raise SchemaNotExpressible("$ref", at, f"{ref} is recursive and cannot be inlined")
        node: Any = self.root
        for raw in ref[2:].split("/"):
            part = raw.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise SchemaNotExpressible("$ref", at, f"{ref} points at nothing")
            node = node[part]
        if not isinstance(node, dict):
            raise SchemaNotExpressible("$ref", at, f"{ref} does not point at a schema object")
        return node, ref[1:]

    def node(
        self, node: Any, at: str, *, refs: tuple[str, ...], depth: int, root: bool = False
    ) -> dict[str, Any]:
        """The subset schema for ``node`` (at ``at`` in the server's schema):
        references and one-member allOf folded in, a ``[T, null]`` union made
        nullable, then each keyword translated or refused."""
        if depth > MAX_DEPTH:
            raise SchemaNotExpressible("schema", at, f"nests deeper than {MAX_DEPTH} levels")
        if node is True or node == {}:
            return {}
        if not isinstance(node, dict):
            raise SchemaNotExpressible("schema", at, f"must be an object, got {node!r:.60}")
        node, at, refs = self._fold(dict(node), at, refs)
        node, nullable = self._nullable_union(node, at, refs, depth)
        out: dict[str, Any] = {}
        for key, value in node.items():
            self._keyword(out, node, key, value, at, refs=refs, depth=depth, root=root)
        if nullable:
            out = _with_null(out, at)
            out["x-optional"] = True  # read (and removed) by the parent's properties
        return out

    def _fold(
        self, node: dict[str, Any], at: str, refs: tuple[str, ...]
    ) -> tuple[dict[str, Any], str, tuple[str, ...]]:
        """``node`` with its references and one-member allOf folded in, the
        pointer it then stands at and the references followed to it."""
        for _ in range(MAX_DEPTH):
            if "$ref" in node:
                target, target_at = self.resolve(node.pop("$ref"), _pointer(at, "$ref"), refs)
                refs = (*refs, "#" + target_at)
                node = self.merge(target, node, _pointer(at, "$ref"))
                at = target_at if not node.keys() - target.keys() else at
                continue
            if "allOf" in node:
                members = node.pop("allOf")
                if not isinstance(members, list) or len(members) != 1:
                    raise SchemaNotExpressible(
                        "allOf",
                        _pointer(at, "allOf"),
                        "allOf of several schemas is not in the subset",
                    )
                node = self.merge(members[0], node, _pointer(at, "allOf"))
                continue
            break
        return node, at, refs

    def _nullable_union(
        self, node: dict[str, Any], at: str, refs: tuple[str, ...], depth: int
    ) -> tuple[dict[str, Any], bool]:
        """``node`` with an ``anyOf``/``oneOf`` of ``[T, null]`` replaced by
        ``T``'s keywords, and whether it was (the result then accepts null)."""
        nullable = False
        for union in ("anyOf", "oneOf"):
            if union not in node:
                continue
            options = node.pop(union)
            where = _pointer(at, union)
            if (
                isinstance(options, list)
                and len(options) == 2
                and sum(1 for o in options if _is_null_schema(o)) == 1
            ):
                other = next(o for o in options if not _is_null_schema(o))
                inner = self.node(
                    other, _pointer(where, str(options.index(other))), refs=refs, depth=depth + 1
                )
                node = {**inner, **node}
                nullable = True
            else:
                reason = REFUSED_KEYWORDS.get(union, f"{union} is not in the subset")
                raise SchemaNotExpressible(union, where, reason + " (only [T, null] is)")
        return node, nullable

    def _keyword(
        self,
        out: dict[str, Any],
        node: dict[str, Any],
        key: str,
        value: Any,
        at: str,
        *,
        refs: tuple[str, ...],
        depth: int,
        root: bool,
    ) -> None:
        """Translate one keyword of ``node`` into ``out``, or refuse it."""
        where = _pointer(at, key)
        if key in ("$defs", "definitions") or key in ANNOTATIONS:
            return  # referenced parts were inlined where they are used
        if key in ROOT_ONLY_KEYWORDS:
            if root:
                out[key] = value
            return  # an $id inside is an annotation here: no remote lookups
        if key == "const":
            out["enum"] = [value]
        elif key == "properties":
            self._properties(out, node, value, where, refs=refs, depth=depth)
        elif key == "required":
            out.setdefault("required", value)
        elif key == "items":
            if isinstance(value, list):
                raise SchemaNotExpressible(key, where, "tuple items are not in the subset")
            out["items"] = self.node(value, where, refs=refs, depth=depth + 1)
        elif key == "additionalProperties":
            out[key] = _additional_properties(value, where)
        elif key in REFUSED_KEYWORDS:
            raise SchemaNotExpressible(key, where, REFUSED_KEYWORDS[key])
        elif key in ALLOWED_KEYWORDS:
            out[key] = copy.deepcopy(value)
        else:
            raise SchemaNotExpressible(key, where, "this keyword is not in the schema subset")

    def _properties(
        self,
        out: dict[str, Any],
        node: dict[str, Any],
        value: Any,
        where: str,
        *,
        refs: tuple[str, ...],
        depth: int,
    ) -> None:
        """Each property translated; a nullable one leaves ``required``."""
        if not isinstance(value, dict):
            raise SchemaNotExpressible("properties", where, "properties must be an object")
        props: dict[str, Any] = {}
        optional: set[str] = set()
        for name, sub in value.items():
            props[name] = self.node(sub, _pointer(where, name), refs=refs, depth=depth + 1)
            if props[name].pop("x-optional", False):
                optional.add(name)
        out["properties"] = props
        if optional and "required" in node:
            out["required"] = [r for r in node["required"] if r not in optional]

    def merge(self, base: Any, extra: dict[str, Any], at: str) -> dict[str, Any]:
        """``base`` with ``extra``'s keywords added; a keyword both set differently
        would need allOf semantics, which the subset lacks."""
        if not isinstance(base, dict):
            raise SchemaNotExpressible("schema", at, "a referenced schema must be an object")
        merged = dict(base)
        for key, value in extra.items():
            if (
                key in merged
                and merged[key] != value
                and key not in ("description", "title", "default", "examples")
            ):
                raise SchemaNotExpressible(
                    key, at, f"{key} both beside and inside a reference is not in the subset"
                )
            merged[key] = value
        return merged


def _additional_properties(value: Any, where: str) -> bool:
    """``additionalProperties`` as the subset says it: a boolean (``{}`` is ``true``)."""
    if value == {}:
        return True
    if isinstance(value, bool):
        return value
    raise SchemaNotExpressible(
        "additionalProperties", where, "a schema as additionalProperties is not in the subset"
    )


def _with_null(node: dict[str, Any], at: str) -> dict[str, Any]:
    """``node`` that also accepts null, when the subset can say so exactly."""
    kind = node.get("type")
    if kind is None:
        return node  # no type constraint: null already passes (enum aside)
    types = kind if isinstance(kind, list) else [kind]
    out = dict(node)
    if "null" not in types:
        out["type"] = [*types, "null"]
    if "enum" in out and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    return out
