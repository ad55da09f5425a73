"""The docs name things that exist.

- Every repository path ending in ``.py`` that README.md, benchmarks/README.md
  or a spec cites (``dispatcher/call.py``) is a file of the repository.
- Every spec that README.md's "Specs" index links exists, and every spec in
  ``specs/`` is in the index.
- Every ``module:function`` of the publisher table in
  specs/event-bus-and-trace-catalog.md names a module of ours that defines
  that function (or class method). Cheap: the source is parsed, not imported.
  Whether the table matches the publishers the code really has is
  tests/test_event_publishers.py's job.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SPECS = sorted((ROOT / "specs").glob("*.md"))
CATALOG = ROOT / "specs" / "event-bus-and-trace-catalog.md"

# A relative path of one or more folders ending in a .py file, inside
# backticks or a markdown link target, e.g. `server/turn_state.py`.
PY_PATH = re.compile(r"(?<![\w./-])((?:[A-Za-z_][\w-]*/)+[A-Za-z_]\w*\.py)\b")
# Our top-level folders: other paths in the docs (a user's mypkg/tools.py,
# /etc/...) are examples, not citations.
OURS = (
    "adapters",
    "benchmarks",
    "clients",
    "dispatcher",
    "eventbus",
    "protocol",
    "scripts",
    "server",
    "tests",
)
PLACE = re.compile(r"`([a-z_][\w.]*):([A-Za-z_][\w.]*)`")


def _docs() -> list[Path]:
    return [README, ROOT / "benchmarks" / "README.md", *SPECS]


def _cited_paths(text: str) -> set[str]:
    cited = set()
    for match in PY_PATH.finditer(text):
        path = match.group(1)
        if path.split("/", 1)[0] in OURS:
            cited.add(path)
    return cited


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: p.name)
def test_every_cited_python_path_exists(doc: Path) -> None:
    missing = sorted(
        p for p in _cited_paths(doc.read_text(encoding="utf-8")) if not (ROOT / p).is_file()
    )
    assert missing == [], f"{doc.name} cites files that do not exist: {missing}"


def test_the_path_pattern_finds_citations() -> None:
    text = "see `dispatcher/call.py` and [x](server/cluster.py), not mypkg/tools.py or /etc/a.py"
    assert _cited_paths(text) == {"dispatcher/call.py", "server/cluster.py"}


def _readme_spec_index() -> set[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Specs\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"\]\((specs/[\w.-]+\.md)\)", section))


def test_the_readme_indexes_every_spec_and_nothing_else() -> None:
    listed = _readme_spec_index()
    present = {f"specs/{p.name}" for p in SPECS}
    assert sorted(listed - present) == [], "the index links specs that do not exist"
    assert sorted(present - listed) == [], "specs missing from README's index"


@cache
def _definitions(module: str) -> set[str] | None:
    """Qualified names of the functions and classes a module defines, or
    None when the module is not a file of ours."""
    base = ROOT.joinpath(*module.split("."))
    source = base.with_suffix(".py")
    if not source.is_file():
        source = base / "__init__.py"
        if not source.is_file():
            return None
    names: set[str] = set()

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                names.add(name)
                walk(child, f"{name}.")

    walk(ast.parse(source.read_text(encoding="utf-8")), "")
    return names


def _publisher_places() -> list[tuple[str, str]]:
    text = CATALOG.read_text(encoding="utf-8")
    section = text.split("### Publishers", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    places = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        places.extend(PLACE.findall(cells[1]))
    return places


def test_the_publisher_table_has_rows() -> None:
    assert len(_publisher_places()) >= 20


@pytest.mark.parametrize("module,function", _publisher_places(), ids=lambda v: str(v))
def test_each_publisher_place_resolves(module: str, function: str) -> None:
    names = _definitions(module)
    assert names is not None, f"{module} is not a module of ours"
    assert function in names, f"{module} defines no {function}"
