"""The schema subset: refused constructs at any depth, and a fast validator that
agrees with jsonschema."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator

from dispatcher import CompiledValidator, ToolRegistrationError, check_subset

REFUSED = [
    ({"$ref": "#/definitions/x"}, "$ref"),
    ({"oneOf": [{"type": "string"}]}, "oneOf"),
    ({"anyOf": [{"type": "string"}]}, "anyOf"),
    ({"allOf": [{"type": "string"}]}, "allOf"),
    ({"not": {"type": "string"}}, "not"),
    ({"if": {"type": "string"}, "then": {}}, "if"),
    ({"patternProperties": {"^x": {"type": "string"}}}, "patternProperties"),
    ({"type": "object", "additionalProperties": {"type": "string"}}, "additionalProperties"),
    ({"type": "string", "pattern": "^(a+)+$"}, "pattern"),
]

# Where a nested construct may hide: inside a property, inside array items,
# and inside an object nested in array items.
PLACES = [
    ("/properties/p", lambda s: {"type": "object", "properties": {"p": s}}),
    (
        "/properties/p/items",
        lambda s: {"type": "object", "properties": {"p": {"type": "array", "items": s}}},
    ),
    (
        "/properties/p/items/properties/q",
        lambda s: {
            "type": "object",
            "properties": {
                "p": {"type": "array", "items": {"type": "object", "properties": {"q": s}}}
            },
        },
    ),
]


@pytest.mark.parametrize(("construct", "keyword"), REFUSED)
@pytest.mark.parametrize(("pointer", "wrap"), PLACES)
def test_refused_constructs_name_keyword_and_pointer(
    construct: dict[str, Any], keyword: str, pointer: str, wrap: Any
) -> None:
    with pytest.raises(ToolRegistrationError) as info:
        check_subset(wrap(construct))
    message = str(info.value)
    assert keyword in message
    assert f"{pointer}/{keyword}" in message


def test_root_must_be_an_object_schema() -> None:
    with pytest.raises(ToolRegistrationError, match="type"):
        check_subset({"type": "string"})
    with pytest.raises(ToolRegistrationError):
        check_subset(["not", "a", "schema"])


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ({"type": "object", "properties": {"a": {"type": "date"}}}, "not a subset type"),
        ({"type": "object", "properties": {"a": {"type": "string", "format": "regex"}}}, "format"),
        ({"type": "object", "required": ["ghost"], "properties": {}}, "ghost"),
        ({"type": "object", "properties": {"a": {"type": "array", "items": [{}]}}}, "tuple"),
        ({"type": "object", "properties": {"a": {"uniqueItems": True}}}, "uniqueItems"),
        ({"type": "object", "properties": {"a": {"type": "string", "enum": []}}}, "enum"),
    ],
)
def test_other_mistakes_are_named(schema: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ToolRegistrationError, match=fragment):
        check_subset(schema)


def test_json_pointer_escapes_slashes_in_property_names() -> None:
    schema = {"type": "object", "properties": {"a/b": {"oneOf": []}}}
    with pytest.raises(ToolRegistrationError, match="/properties/a~1b/oneOf"):
        check_subset(schema)


def test_accepts_the_whole_subset() -> None:
    check_subset(
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "description": "all of it",
            "properties": {
                "s": {"type": "string", "format": "uri", "minLength": 1, "maxLength": 9},
                "n": {"type": "number", "minimum": 0, "maximum": 1.5},
                "i": {"type": "integer"},
                "b": {"type": "boolean", "default": False},
                "z": {"type": "null"},
                "e": {"enum": ["a", 1, None]},
                "u": {"type": ["string", "null"]},
                "a": {
                    "type": "array",
                    "items": {"type": "object", "properties": {}},
                    "maxItems": 3,
                },
                "o": {"type": "object", "additionalProperties": True},
            },
            "required": ["s"],
            "additionalProperties": False,
        }
    )


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 5},
        "count": {"type": "integer", "minimum": 0, "maximum": 10},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "mode": {"enum": ["a", "b", 1, True, None]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "maybe": {"type": ["string", "null"]},
        "nested": {
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "required": ["x"],
            "additionalProperties": False,
        },
    },
    "required": ["name"],
    "additionalProperties": False,
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-20, 20) | st.floats(-20, 20) | st.text(max_size=7),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(["x", "y", "name"]), children, max_size=3)
    ),
    max_leaves=8,
)
candidate = st.dictionaries(
    st.sampled_from(["name", "count", "ratio", "flag", "mode", "tags", "maybe", "nested", "extra"]),
    json_values,
    max_size=6,
)


@settings(max_examples=600, deadline=None)
@given(candidate)
def test_fast_path_agrees_with_jsonschema(instance: dict[str, Any]) -> None:
    compiled = CompiledValidator(SCHEMA)
    reference = Draft7Validator(SCHEMA).is_valid(instance)
    assert compiled.is_valid(instance) == reference
    assert (compiled.errors(instance) == []) == reference


def test_errors_carry_paths() -> None:
    compiled = CompiledValidator(SCHEMA)
    errors = compiled.errors({"name": "", "count": 99, "tags": ["a", 2], "nested": {}})
    paths = {e.path for e in errors}
    assert {"/name", "/count", "/tags/1", "/nested"} <= paths
    assert all(e.message for e in errors)


def test_bool_is_not_an_integer_and_one_point_zero_is() -> None:
    compiled = CompiledValidator(SCHEMA)
    assert not compiled.is_valid({"name": "a", "count": True})
    assert compiled.is_valid({"name": "a", "count": 1.0})
    assert compiled.is_valid({"name": "a", "mode": True})
    assert not compiled.is_valid({"name": "a", "mode": 0})
