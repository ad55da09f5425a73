"""Dependencies point one way: the import graph of our packages, checked.

``protocol`` (the shared vocabulary) imports nothing of ours; ``eventbus``
and ``adapters`` import only the vocabulary; the dispatcher imports the
vocabulary and never the adapters, the bus or the server; clients talk to the
server over HTTP and WebSocket, so they import only the vocabulary. Every
import counts, including those under ``TYPE_CHECKING`` and inside functions:
a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = frozenset({"protocol", "eventbus", "adapters", "dispatcher", "server", "clients"})

# package -> the other packages of ours it may import
ALLOWED: dict[str, frozenset[str]] = {
    "protocol": frozenset(),
    "eventbus": frozenset({"protocol"}),
    "adapters": frozenset({"protocol"}),
    "dispatcher": frozenset({"protocol"}),
    "clients": frozenset({"protocol"}),
    "server": frozenset({"protocol", "eventbus", "adapters", "dispatcher", "clients"}),
}


def _imports(path: Path) -> set[str]:
    """Top-level names of every absolute import in one module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_it_may(package: str) -> None:
    modules = sorted((ROOT / package).rglob("*.py"))
    assert modules, f"package {package!r} has no modules"
    wrong = {
        f"{module.relative_to(ROOT)} imports {name}"
        for module in modules
        for name in _imports(module) & OURS
        if name != package and name not in ALLOWED[package]
    }
    assert not wrong, "imports against the dependency direction:\n" + "\n".join(sorted(wrong))


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from server.app import create_app\n"
        "def f():\n    import dispatcher.tool\n"
        "from . import sibling\n"
    )
    assert _imports(module) & OURS == {"server", "dispatcher"}


# Inside the dispatcher, the pipeline reads what tools declare (their effects,
# dispatcher.tool) and never reaches into a tool family: module prefix -> the
# module prefixes of ours it must not import.
FORBIDDEN_INSIDE: dict[str, tuple[str, ...]] = {
    "dispatcher.pipeline": ("dispatcher.tools",),
}


def _modules_imported(path: Path) -> set[str]:
    """Full dotted names of every absolute import in one module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


@pytest.mark.parametrize("package", sorted(FORBIDDEN_INSIDE))
def test_the_pipeline_imports_no_tool_family(package: str) -> None:
    folder = ROOT.joinpath(*package.split("."))
    modules = sorted(folder.rglob("*.py"))
    assert modules, f"package {package!r} has no modules"
    wrong = {
        f"{_module_name(module)} imports {name}"
        for module in modules
        for name in _modules_imported(module)
        for banned in FORBIDDEN_INSIDE[package]
        if name == banned or name.startswith(banned + ".")
    }
    assert not wrong, "the pipeline reaches into a tool family:\n" + "\n".join(sorted(wrong))


def test_the_inner_checker_sees_a_tool_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from dispatcher.tools.shell import lexer\n")
    assert "dispatcher.tools.shell" in _modules_imported(module)
    module.write_text("from dispatcher import tools\n")
    assert "dispatcher.tools" in _modules_imported(module)


# No import cycles between our modules. An edge is an import a module runs
# when it is loaded: statements at module level, in classes, and under module
# level ``if``/``try``; an import inside a function runs later and is not an
# edge, and one under ``if TYPE_CHECKING:`` never runs, so it is not one
# either (except in CYCLE_FREE_WITH_TYPES below). ``from pkg import sub`` with
# ``sub`` a module is an edge to ``pkg.sub``.
PACKAGES = tuple(sorted(ALLOWED))
# Packages whose modules form no cycle even counting TYPE_CHECKING imports:
# there a cycle in the types means a part reaches back into whatever built it
# (the services) instead of receiving the narrow things it uses.
CYCLE_FREE_WITH_TYPES = ("server",)
# Packages whose modules form no cycle even counting every import, inside
# functions too: a lazy import that closes a cycle hides it rather than
# removing it (server/config.py checks the configured roots with
# server/roots.py, which therefore reads no Config).
CYCLE_FREE_COUNTING_EVERY_IMPORT = ("server",)


def _module_map() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _load_time_imports(
    name: str,
    path: Path,
    modules: dict[str, Path],
    *,
    with_types: bool = False,
    every: bool = False,
) -> set[str]:
    """The modules of ours that loading ``name`` imports (see above); with
    ``every``, the modules any of its import statements names, wherever it is."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges: set[str] = set()

    def absolute(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        return ".".join([*base, *([node.module] if node.module else [])])

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                module = absolute(node)
                subs = {f"{module}.{a.name}" for a in node.names} & modules.keys()
                edges.update(subs)
                if len(subs) < len(node.names):
                    edges.add(module)
            elif isinstance(node, ast.If):
                if with_types or not _is_type_checking(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
                for handler in node.handlers:
                    visit(handler.body)
            elif isinstance(node, ast.ClassDef | ast.With):
                visit(node.body)

    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    if every:
        visit([n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)])
    else:
        visit(tree.body)
    return (edges & modules.keys()) - {name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan,
    iterative: no recursion limit to hit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(cycles: list[list[str]], graph: dict[str, set[str]]) -> str:
    lines = []
    for component in cycles:
        lines.append(" <-> ".join(component))
        lines.extend(
            f"    {m} imports {', '.join(sorted(graph[m] & set(component)))}" for m in component
        )
    return "\n".join(lines)


def test_no_import_cycles_between_our_modules() -> None:
    modules = _module_map()
    graph = {name: _load_time_imports(name, path, modules) for name, path in modules.items()}
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + _describe(cycles, graph)


@pytest.mark.parametrize("package", CYCLE_FREE_WITH_TYPES)
def test_no_cycles_even_in_type_hints(package: str) -> None:
    modules = {n: p for n, p in _module_map().items() if n.split(".")[0] == package}
    graph = {
        name: _load_time_imports(name, path, modules, with_types=True)
        for name, path in modules.items()
    }
    cycles = _cycles(graph)
    assert not cycles, "import cycles (TYPE_CHECKING imports counted):\n" + _describe(cycles, graph)


@pytest.mark.parametrize("package", CYCLE_FREE_COUNTING_EVERY_IMPORT)
def test_no_cycles_even_through_imports_inside_functions(package: str) -> None:
    modules = {n: p for n, p in _module_map().items() if n.split(".")[0] == package}
    graph = {
        name: _load_time_imports(name, path, modules, every=True) for name, path in modules.items()
    }
    cycles = _cycles(graph)
    assert not cycles, "import cycles (imports inside functions counted):\n" + _describe(
        cycles, graph
    )


def test_the_cycle_checker_sees_a_cycle(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import b\n")
    b.write_text("try:\n    from c import x\nexcept ImportError:\n    pass\n")
    c.write_text("def f():\n    import b\nclass K:\n    from a import y\n")
    modules = {"a": a, "b": b, "c": c}
    graph = {n: _load_time_imports(n, p, modules) for n, p in modules.items()}
    assert graph == {"a": set(), "b": {"c"}, "c": {"a"}}
    assert _cycles(graph) == []
    typed = {n: _load_time_imports(n, p, modules, with_types=True) for n, p in modules.items()}
    assert _cycles(typed) == [["a", "b", "c"]]
    every = {n: _load_time_imports(n, p, modules, every=True) for n, p in modules.items()}
    assert every == {"a": {"b"}, "b": {"c"}, "c": {"a", "b"}}


# The server uses a tool family (dispatcher/tools/<family>/) through the
# family's package, the interface it exports, never its modules: what the
# family keeps inside can move without touching the server.
# Module of the server -> family modules it still imports, and why.
FAMILY_INTERNALS_ALLOWED: dict[str, frozenset[str]] = {
    # A quality gate asks as a shell command of the session would: it rates
    # the gate's command with the shell's own rules (server/gate_consent.py).
    "server.gate_consent": frozenset(
        {"dispatcher.tools.shell.rules", "dispatcher.tools.shell.tool"}
    ),
}


def _family_module(name: str) -> str | None:
    """The module inside a tool family that ``name`` is or lies in
    (``dispatcher.tools.<family>.<module>``), or None."""
    parts = name.split(".")
    if len(parts) < 4 or parts[:2] != ["dispatcher", "tools"]:
        return None
    place = ROOT.joinpath(*parts[:4])
    if place.with_suffix(".py").is_file() or place.is_dir():
        return ".".join(parts[:4])
    return None


def test_the_server_uses_tool_families_through_their_packages() -> None:
    wrong = set()
    for path in sorted((ROOT / "server").rglob("*.py")):
        module = _module_name(path)
        allowed = FAMILY_INTERNALS_ALLOWED.get(module, frozenset())
        for name in _modules_imported(path):
            inner = _family_module(name)
            if inner is not None and inner not in allowed:
                wrong.add(f"{module} imports {inner}")
    assert not wrong, "the server reaches into a tool family:\n" + "\n".join(sorted(wrong))


def test_the_family_checker_tells_a_module_from_a_name() -> None:
    assert _family_module("dispatcher.tools.code.index.CodeIndex") == "dispatcher.tools.code.index"
    assert _family_module("dispatcher.tools.agents.SubagentStatus") is None  # the package's
    assert _family_module("dispatcher.tools.code") is None
