"""The hand-compiled subset checker dispatcher.schema_subset used before
jsonschema-rs replaced it; kept only as the baseline of
benchmarks/schema_validators.py. It checks the schema subset's keywords
with closures built once per schema.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[Any], bool]


def compile_check(node: dict[str, Any]) -> Check:
    """A closure answering "is this instance valid against ``node``?"."""
    return _compile(node)


def _compile(node: dict[str, Any]) -> Check:
    checks: list[Check] = []
    if "type" in node:
        types = node["type"] if isinstance(node["type"], list) else [node["type"]]
        checks.append(_type_check(types))
    if "enum" in node:
        options = list(node["enum"])
        checks.append(lambda v: any(_json_equal(v, o) for o in options))
    if "minimum" in node or "maximum" in node:
        checks.append(_range_check(node.get("minimum"), node.get("maximum")))
    if "minLength" in node or "maxLength" in node:
        checks.append(_len_check(str, node.get("minLength"), node.get("maxLength")))
    if "minItems" in node or "maxItems" in node:
        checks.append(_len_check(list, node.get("minItems"), node.get("maxItems")))
    if "items" in node:
        checks.append(_items_check(_compile(node["items"])))
    if "properties" in node or "required" in node or node.get("additionalProperties") is False:
        checks.append(_object_check(node))
    if not checks:
        return lambda v: True
    if len(checks) == 1:
        return checks[0]
    all_checks = tuple(checks)

    def check_all(v: Any) -> bool:
        # A plain loop: a generator inside all() costs more than the checks.
        for c in all_checks:  # noqa: SIM110 (measured: all() with a generator is slower)
            if not c(v):
                return False
        return True

    return check_all


def _is_integer(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    return isinstance(v, float) and math.isfinite(v) and v.is_integer()


_TYPE_TESTS: Mapping[str, Check] = {
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": _is_integer,
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def _type_check(types: list[str]) -> Check:
    if len(types) == 1:
        return _TYPE_TESTS[types[0]]
    tests = [_TYPE_TESTS[t] for t in types]
    return lambda v: any(t(v) for t in tests)


def _range_check(low: float | None, high: float | None) -> Check:
    def check(v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, int | float):
            return True  # range keywords only constrain numbers
        return (low is None or v >= low) and (high is None or v <= high)

    return check


def _len_check(kind: type, low: int | None, high: int | None) -> Check:
    def check(v: Any) -> bool:
        if not isinstance(v, kind):
            return True
        n = len(v)  # type: ignore[arg-type]
        return (low is None or n >= low) and (high is None or n <= high)

    return check


def _items_check(item: Check) -> Check:
    return lambda v: not isinstance(v, list) or all(item(x) for x in v)


def _object_check(node: dict[str, Any]) -> Check:
    props = {name: _compile(sub) for name, sub in node.get("properties", {}).items()}
    required = tuple(node.get("required", ()))
    closed = node.get("additionalProperties") is False
    allowed = frozenset(props)

    def check(v: Any) -> bool:
        if not isinstance(v, dict):
            return True
        for name in required:
            if name not in v:
                return False
        for key, value in v.items():
            sub = props.get(key)
            if sub is None:
                if closed:
                    return False
            elif not sub(value):
                return False
        return not closed or allowed.issuperset(v)

    return check


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON sees it: true is not 1, 1.0 is 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return bool(a == b) and (isinstance(a, int | float) == isinstance(b, int | float))
