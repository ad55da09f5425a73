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
