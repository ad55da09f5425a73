"""Every event type in the catalog is published from exactly one place.

The scanner reads our packages' source (not tests, not benchmarks) and finds,
for each ``protocol.catalog.EventType``, where it is published:

- a construction of its payload class (``ToolCalled(...)``,
  ``ToolCalled.model_construct(...)``), the class
  named through ``from protocol.payloads import ...`` or
  ``protocol.payloads``;
- a call of something named ``publish``/``emit`` with the type as a string
  literal or an ``EventType`` member as its first argument (the untyped API).

A place is a module and the function (its qualified name) holding the
construction or call. Relays that pass on events whatever their type (the
sub-agent mirror, the cluster bus) construct nothing and name no type, so
they are not publishers. specs/event-bus-and-trace-catalog.md lists the places;
a test keeps that table equal to what the scanner finds.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.catalog import EventType
from protocol.payloads import PAYLOAD_CLASSES

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("adapters", "clients", "dispatcher", "eventbus", "protocol", "server")
SPEC = ROOT / "specs" / "event-bus-and-trace-catalog.md"

CLASS_TYPES: dict[str, EventType] = {cls.__name__: cls.event_type for cls in PAYLOAD_CLASSES}
TYPE_NAMES: dict[str, EventType] = {t.value: t for t in EventType}
MEMBER_NAMES: dict[str, EventType] = {t.name: t for t in EventType}
# Class methods that build a payload (model_validate parses one: the SDK's side).
BUILDERS = frozenset({"model_construct"})


class _Scanner(ast.NodeVisitor):
    """Collects (event type, qualified function name) of one module."""

    def __init__(self) -> None:
        self.classes: dict[str, str] = {}  # local name -> payload class name
        self.modules: set[str] = set()  # local names of protocol.payloads
        self.scope: list[str] = []
        self.found: list[tuple[EventType, str]] = []

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            local = alias.asname or alias.name
            if node.module == "protocol.payloads" and alias.name in CLASS_TYPES:
                self.classes[local] = alias.name
            elif node.module == "protocol" and alias.name == "payloads":
                self.modules.add(local)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "protocol.payloads" and alias.asname:
                self.modules.add(alias.asname)

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = _scoped
    visit_AsyncFunctionDef = _scoped
    visit_ClassDef = _scoped

    def _payload_class(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return self.classes.get(node.id)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in self.modules
            and node.attr in CLASS_TYPES
        ):
            return node.attr
        return None

    def _literal_type(self, node: ast.expr) -> EventType | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return TYPE_NAMES.get(node.value)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "EventType"
        ):
            return MEMBER_NAMES.get(node.attr)
        return None

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        built = self._payload_class(func)
        if built is None and isinstance(func, ast.Attribute) and func.attr in BUILDERS:
            built = self._payload_class(func.value)
        where = ".".join(self.scope) or "<module>"
        if built is not None:
            self.found.append((CLASS_TYPES[built], where))
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        # ``Checked``: a tool call's hot events, published as their data dict.
        if node.args and ("publish" in name or "emit" in name or name == "Checked"):
            literal = self._literal_type(node.args[0])
            if literal is not None:
                self.found.append((literal, where))
        self.generic_visit(node)


def scan_source(source: str, module: str) -> Iterator[tuple[EventType, str]]:
    """(event type, ``module:function``) for each publishing site in ``source``."""
    scanner = _Scanner()
    scanner.visit(ast.parse(source))
    for event_type, where in scanner.found:
        yield event_type, f"{module}:{where}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def find_publishers() -> dict[EventType, set[str]]:
    """Every catalog type and the places that publish it (empty: none)."""
    places: dict[EventType, set[str]] = {t: set() for t in EventType}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = _module_name(path)
            if module == "protocol.payloads":
                continue  # where the classes are defined
            source = path.read_text(encoding="utf-8")
            for event_type, where in scan_source(source, module):
                places[event_type].add(where)
    return places


def test_every_event_type_is_published_from_exactly_one_place() -> None:
    problems = []
    for event_type, places in find_publishers().items():
        if not places:
            problems.append(f"{event_type}: no publisher found")
        elif len(places) > 1:
            problems.append(f"{event_type}: published from {len(places)} places: {sorted(places)}")
    assert not problems, "\n".join(problems)


def test_the_scanner_finds_constructions_and_literal_types() -> None:
    """The scanner itself: without this, a scanner that finds nothing would
    fail only as "no publisher", and one that misses an alias not at all."""
    source = """
from protocol.payloads import MessageDelta as Delta, ToolCalled
from protocol import payloads as p
from protocol.catalog import EventType

class Loop:
    def stream(self, bus):
        bus.emit(Delta(text="x"), session_id="s")
        bus.emit(ToolCalled.model_construct(tool_use_id="t"), session_id="s")

def old_style(bus):
    bus.publish("turn.started", {}, session_id="s")
    bus.publish(EventType.TOOL_FAILED, {}, session_id="s")
    bus.publish("not.a.type", {}, session_id="s")
    return p.SessionCreated(workspace="/w")

def parse(data):
    return ToolCalled.model_validate(data)  # parsing, not publishing
"""
    found = sorted(scan_source(source, "m"))
    assert found == sorted(
        [
            (EventType.MESSAGE_DELTA, "m:Loop.stream"),
            (EventType.TOOL_CALLED, "m:Loop.stream"),
            (EventType.TURN_STARTED, "m:old_style"),
            (EventType.TOOL_FAILED, "m:old_style"),
            (EventType.SESSION_CREATED, "m:old_style"),
        ]
    )


_ROW = re.compile(r"^\|\s*`([a-z_]+\.[a-z_]+)`\s*\|\s*`([\w.]+:[\w.<>]+)`\s*\|", re.MULTILINE)


def test_the_spec_lists_each_types_publisher() -> None:
    """specs/event-bus-and-trace-catalog.md's publisher table is what the
    scanner finds (for each type with exactly one publisher)."""
    text = SPEC.read_text(encoding="utf-8")
    table = {name: where for name, where in _ROW.findall(text)}
    if not table:
        pytest.fail("the spec has no publisher table (| `type` | `module:function` |)")
    expected = {
        str(t): next(iter(places)) for t, places in find_publishers().items() if len(places) == 1
    }
    wrong = {t: (table.get(t), where) for t, where in expected.items() if table.get(t) != where}
    assert not wrong, f"spec row differs from the code (spec, code): {wrong}"
    assert set(table) <= set(TYPE_NAMES), (
        f"unknown types in the spec: {set(table) - set(TYPE_NAMES)}"
    )
