"""The code tools on the checked-in sample repository (tests/fixtures/sample_repo):
definitions, references, outlines and imports per language, checked by hand
against the fixture's source."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dispatcher import WorkspaceFileAPI
from dispatcher.errors import ToolError
from dispatcher.schema_subset import check_subset
from dispatcher.tools import knowledge_tool_factories
from dispatcher.tools.code import (
    DependencyGraphTool,
    FindReferencesTool,
    FindSymbolTool,
    ListSymbolsTool,
)
from dispatcher.tools.code.index import forget
from tests.dispatcher.tools.support import OutputLog, run_tool

SAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "sample_repo"


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[WorkspaceFileAPI]:
    """A copy of the sample repository, plus a file its .gitignore ignores."""
    root = tmp_path / "sample"
    shutil.copytree(SAMPLE, root)
    (root / "build").mkdir()
    (root / "build" / "out.py").write_text("def make_user():\n    return ignored_helper()\n")
    (root / "python" / "schema.generated.py").write_text("class User:\n    pass\n")
    ws = WorkspaceFileAPI(root)
    try:
        yield ws
    finally:
        forget(ws.workspace_root)
        ws.close()


async def _defs(ws: WorkspaceFileAPI, name: str, **extra: Any) -> list[tuple[str, int, str]]:
    out = await run_tool(FindSymbolTool, {"name": name, **extra}, ws)
    return [(d["file"], d["line"], d["kind"]) for d in out.data["definitions"]]


async def _refs(ws: WorkspaceFileAPI, name: str, **extra: Any) -> list[tuple[str, int]]:
    out = await run_tool(FindReferencesTool, {"name": name, **extra}, ws)
    return [(r["file"], r["line"]) for r in out.data["references"]]


# name -> (definitions as (file, line, kind), references as (file, line)), from the fixture.
EXPECTED: dict[str, tuple[list[tuple[str, int, str]], list[tuple[str, int]]]] = {
    # Python: the comment on models.py:13 and the string on main.py:7 are not uses;
    # the gitignored build/out.py defines make_user but is not indexed.
    "make_user": (
        [("python/app/models.py", 12, "function")],
        [("python/app/service.py", 1), ("python/app/service.py", 9)],
    ),
    "User": (
        [("python/app/models.py", 4, "class")],
        [
            ("python/app/models.py", 12),
            ("python/app/models.py", 14),
            ("python/app/service.py", 1),
            ("python/app/service.py", 6),
            ("python/app/service.py", 8),
        ],
    ),
    "display_name": ([("python/app/models.py", 8, "method")], [("python/main.py", 7)]),
    "UserService": (
        [("python/app/service.py", 4, "class")],
        [("python/main.py", 1), ("python/main.py", 5)],
    ),
    # JavaScript
    "formatName": (
        [("js/util.js", 1, "function")],
        [("js/index.js", 1), ("js/index.js", 5), ("js/util.js", 7), ("js/util.js", 11)],
    ),
    "greet": ([("js/util.js", 6, "method")], [("js/index.js", 4)]),
    # TypeScript and TSX
    "Shape": (
        [("ts/shapes.ts", 1, "interface")],
        [("ts/shapes.ts", 5), ("ts/shapes.ts", 12)],
    ),
    "ShapeList": ([("ts/shapes.ts", 5, "type")], [("ts/shapes.ts", 20)]),
    "Color": ([("ts/shapes.ts", 7, "enum")], []),
    "totalArea": (
        [("ts/shapes.ts", 20, "function")],
        [("ts/app.tsx", 1), ("ts/app.tsx", 5)],
    ),
    "App": ([("ts/app.tsx", 3, "function")], []),
    # Go
    "Store": (
        [("go/store/store.go", 4, "struct")],
        [
            ("go/store/store.go", 12),
            ("go/store/store.go", 13),
            ("go/store/store.go", 16),
            ("go/store/store.go", 20),
        ],
    ),
    "Getter": ([("go/store/store.go", 8, "interface")], []),
    "NewStore": ([("go/store/store.go", 12, "function")], [("go/main.go", 10)]),
    # Rust
    "Point": (
        [("rust/src/geometry.rs", 1, "struct")],
        [
            ("rust/src/geometry.rs", 6),
            ("rust/src/geometry.rs", 7),
            ("rust/src/geometry.rs", 8),
            ("rust/src/main.rs", 3),
            ("rust/src/main.rs", 6),
        ],
    ),
    "norm_squared": ([("rust/src/geometry.rs", 11, "method")], [("rust/src/main.rs", 7)]),
    "Area": ([("rust/src/geometry.rs", 16, "trait")], []),
    "Quadrant": ([("rust/src/geometry.rs", 20, "enum")], []),
    # Java: the constructor is a definition of its own
    "Item": (
        [
            ("java/src/com/example/model/Item.java", 3, "class"),
            ("java/src/com/example/model/Item.java", 6, "constructor"),
        ],
        [
            ("java/src/com/example/Inventory.java", 3),
            ("java/src/com/example/Inventory.java", 8),
            ("java/src/com/example/Inventory.java", 12),
        ],
    ),
    "getName": ([("java/src/com/example/model/Item.java", 10, "method")], []),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_definitions_and_references_match_the_hand_checked_expectations(
    repo: WorkspaceFileAPI, name: str
) -> None:
    defs, refs = EXPECTED[name]
    assert await _defs(repo, name) == defs
    assert await _refs(repo, name) == refs


async def test_signatures_containers_and_filters(repo: WorkspaceFileAPI) -> None:
    out = await run_tool(FindSymbolTool, {"name": "Put"}, repo)
    (put,) = out.data["definitions"]
    assert put["signature"] == "func (s *Store) Put(key, value string)"
    assert put["container"] == "Store" and put["kind"] == "method"
    out = await run_tool(FindSymbolTool, {"name": "make_user"}, repo)
    assert out.data["definitions"][0]["signature"] == "def make_user(name: str) -> User"
    assert await _defs(repo, "Item", kind="constructor") == [
        ("java/src/com/example/model/Item.java", 6, "constructor")
    ]
    assert await _defs(repo, "area", path="rust") == []
    assert await _defs(repo, "area", path="ts") == [("ts/shapes.ts", 15, "method")]
    assert await _refs(repo, "Point", path="rust/src/main.rs") == [
        ("rust/src/main.rs", 3),
        ("rust/src/main.rs", 6),
    ]


async def test_references_carry_their_context_lines(repo: WorkspaceFileAPI) -> None:
    out = await run_tool(FindReferencesTool, {"name": "NewStore", "context_lines": 1}, repo)
    (ref,) = out.data["references"]
    assert ref["text"].strip() == "s := store.NewStore()"
    assert [line.strip() for line in ref["context"]] == [
        "func main() {",
        "s := store.NewStore()",
        's.Put("a", "b")',
    ]
    assert ref["context_start"] == 9
    assert out.metadata["total"] == 1 and out.metadata["truncated"] is False


async def test_list_symbols_outlines_one_file_per_language(repo: WorkspaceFileAPI) -> None:
    outlines = {
        "python/app/models.py": [
            ("User", "class", 4, None),
            ("__init__", "method", 5, "User"),
            ("display_name", "method", 8, "User"),
            ("make_user", "function", 12, None),
        ],
        "js/util.js": [("formatName", "function", 1, None), ("Greeter", "class", 5, None),
                       ("greet", "method", 6, "Greeter")],
        "ts/shapes.ts": [
            ("Shape", "interface", 1, None),
            ("ShapeList", "type", 5, None),
            ("Color", "enum", 7, None),
            ("Circle", "class", 12, None),
            ("constructor", "method", 13, "Circle"),
            ("area", "method", 15, "Circle"),
            ("totalArea", "function", 20, None),
        ],
        "ts/app.tsx": [("App", "function", 3, None)],
        "go/store/store.go": [
            ("Store", "struct", 4, None),
            ("Getter", "interface", 8, None),
            ("NewStore", "function", 12, None),
            ("Put", "method", 16, "Store"),
            ("Get", "method", 20, "Store"),
        ],
        "rust/src/geometry.rs": [
            ("Point", "struct", 1, None),
            ("new", "method", 7, "Point"),
            ("norm_squared", "method", 11, "Point"),
            ("Area", "trait", 16, None),
            ("Quadrant", "enum", 20, None),
        ],
        "java/src/com/example/Inventory.java": [
            ("Inventory", "class", 7, None),
            ("Inventory", "constructor", 10, "Inventory"),
            ("add", "method", 12, "Inventory"),
            ("count", "method", 16, "Inventory"),
        ],
    }  # fmt: skip
    for path, expected in outlines.items():
        out = await run_tool(ListSymbolsTool, {"path": path}, repo)
        got = [(s["name"], s["kind"], s["line"], s["container"]) for s in out.data["symbols"]]
        assert got == expected, path


async def test_list_symbols_refuses_what_it_cannot_parse(repo: WorkspaceFileAPI) -> None:
    with pytest.raises(ToolError, match="not a source file"):
        await run_tool(ListSymbolsTool, {"path": "docs/architecture.md"}, repo)
    with pytest.raises(ToolError, match="does not exist"):
        await run_tool(ListSymbolsTool, {"path": "nope.py"}, repo)
    with pytest.raises(ToolError, match=r"outside|escape"):
        await run_tool(ListSymbolsTool, {"path": "../../etc/passwd"}, repo)


async def test_dependency_graph_resolves_imports_per_language(repo: WorkspaceFileAPI) -> None:
    out = await run_tool(DependencyGraphTool, {}, repo)
    edges = {(e["from"], e["to"] or "external:" + e["module"]) for e in out.data["edges"]}
    assert edges == {
        ("python/main.py", "python/app/service.py"),
        ("python/app/service.py", "python/app/models.py"),
        ("js/index.js", "js/util.js"),
        ("ts/app.tsx", "ts/shapes.ts"),
        ("go/main.go", "external:fmt"),
        ("go/main.go", "go/store"),  # the package folder, through go.mod's module path
        ("rust/src/main.rs", "rust/src/geometry.rs"),  # `mod geometry;` and the `use`
        ("java/src/com/example/Inventory.java", "java/src/com/example/model/Item.java"),
        ("java/src/com/example/Inventory.java", "external:java.util.ArrayList"),
        ("java/src/com/example/Inventory.java", "external:java.util.List"),
    }
    internal = await run_tool(
        DependencyGraphTool,
        {"path": "python/main.py", "depth": 2, "include_external": False},
        repo,
    )
    assert [(e["from"], e["to"]) for e in internal.data["edges"]] == [
        ("python/main.py", "python/app/service.py"),
        ("python/app/service.py", "python/app/models.py"),
    ]
    one = await run_tool(DependencyGraphTool, {"path": "python/main.py"}, repo)
    assert len(one.data["edges"]) == 1
    assert one.data["nodes"] == ["python/app/service.py", "python/main.py"]


async def test_first_call_reports_indexing_progress(repo: WorkspaceFileAPI) -> None:
    log = OutputLog()
    await run_tool(FindSymbolTool, {"name": "User"}, repo, emit=log)
    assert log.chunks and all(stream == "progress" for stream, _ in log.chunks)
    assert "indexed 14 source files" in log.text("progress")
    later = OutputLog()
    await run_tool(FindSymbolTool, {"name": "User"}, repo, emit=later)
    assert later.chunks == []  # answered from the index


def test_definitions_are_read_only_and_in_the_schema_subset() -> None:
    for factory in knowledge_tool_factories():
        definition = factory().definition
        check_subset(definition.input_schema)
        assert definition.input_schema["additionalProperties"] is False
        expected = "none" if definition.name.startswith("memory_") else "read"
        assert definition.side_effects.value == expected, definition.name
        assert isinstance(definition.output_schema, dict), definition.name
