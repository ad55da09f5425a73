"""Valid-path cost of a tool-input check: the hand-compiled subset checker
(dispatcher.schema_subset's former fast path, kept here as the baseline)
against jsonschema-rs, over every built-in tool's input schema.

Run: ``.venv/bin/python benchmarks/schema_validators.py [--calls N]``

For each tool it builds one input that uses every declared property (the
worst valid case), checks that both validators accept it, and prints the
median per-call time of ``is_valid`` in microseconds and the ratio. It is a
script, not a test: it asserts nothing beyond both accepting the input.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jsonschema_rs

from benchmarks.handwritten_validator import compile_check
from dispatcher.tools import builtin_tool_factories, knowledge_tool_factories


def sample(node: dict[str, Any]) -> Any:
    """A valid value for ``node`` that exercises each of its keywords."""
    if "enum" in node:
        return node["enum"][0]
    kind = node.get("type", "string")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        return {name: sample(sub) for name, sub in node.get("properties", {}).items()}
    if kind == "array":
        return [sample(node.get("items", {})) for _ in range(max(2, node.get("minItems", 0)))][
            : node.get("maxItems", 2)
        ]
    if kind == "integer":
        return int(node.get("minimum", 3))
    if kind == "number":
        return float(node.get("minimum", 1.5))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return "x" * max(8, node.get("minLength", 0))


def per_call_us(check: Callable[[Any], bool], value: Any, calls: int) -> float:
    """Median over 7 rounds of the mean time per call, in microseconds."""
    rounds = []
    for _ in range(7):
        start = time.perf_counter_ns()
        for _ in range(calls):
            check(value)
        rounds.append((time.perf_counter_ns() - start) / calls / 1000)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    factories = [*builtin_tool_factories(delete_enabled=True), *knowledge_tool_factories()]
    print(f"{'tool':<20} {'handwritten us':>15} {'jsonschema-rs us':>17} {'ratio':>7}")
    hand_all: list[float] = []
    rs_all: list[float] = []
    for factory in factories:
        definition = factory().definition
        schema = definition.input_schema
        value = sample(schema)
        hand = compile_check(schema)
        rs = jsonschema_rs.validator_for(schema)
        assert hand(value) and rs.is_valid(value), definition.name
        h = per_call_us(hand, value, args.calls)
        r = per_call_us(rs.is_valid, value, args.calls)
        hand_all.append(h)
        rs_all.append(r)
        print(f"{definition.name:<20} {h:>15.2f} {r:>17.2f} {h / r:>7.1f}")
    hm, rm = statistics.median(hand_all), statistics.median(rs_all)
    print(f"{'median':<20} {hm:>15.2f} {rm:>17.2f} {hm / rm:>7.1f}")


if __name__ == "__main__":
    main()
