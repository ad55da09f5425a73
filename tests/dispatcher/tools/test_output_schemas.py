"""Every built-in tool with structured results declares an output schema in
the dispatcher's subset, and what it returns as ``data`` on a real workspace
(a copy of tests/fixtures/sample_repo made a git repository) matches it:
checked with jsonschema's Draft7Validator and with the validator the
dispatcher compiles at registration. No provider ever sees an output schema.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator

from adapters import anthropic_wire, openai_wire
from dispatcher import ToolOutput, WorkspaceFileAPI
from dispatcher.errors import ToolRegistrationError
from dispatcher.memory import MemoryScope, MemoryStore
from dispatcher.schema_subset import CompiledValidator, check_subset
from dispatcher.tool import ToolFactory
from dispatcher.tools import builtin_tool_factories, knowledge_tool_factories
from dispatcher.tools.code import (
    DependencyGraphTool,
    FindReferencesTool,
    FindSymbolTool,
    ListSymbolsTool,
)
from dispatcher.tools.code.index import forget
from dispatcher.tools.files.listing import FindFilesTool, ListDirTool
from dispatcher.tools.git.tools import (
    GitBranchTool,
    GitCommitTool,
    GitDiffTool,
    GitLogTool,
    GitStatusTool,
)
from dispatcher.tools.knowledge.memory import (
    MemoryAddTool,
    MemoryConsolidateTool,
    MemoryDeleteTool,
    MemoryReplaceTool,
    MemorySearchTool,
)
from dispatcher.tools.knowledge.retrieve_doc import RetrieveDocTool
from dispatcher.tools.search.grep import GrepTool
from dispatcher.tools.search.search_code import SearchCodeTool
from dispatcher.tools.shapes import record
from protocol.canonical import SideEffects, ToolDefinition
from tests.dispatcher.tools.support import git, run_tool

SAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "sample_repo"

# The tools each test below runs; together, every built-in tool with an output schema.
GIT = {"git_status", "git_diff", "git_log", "git_commit", "git_branch"}
FILES_AND_SEARCH = {"list_dir", "find_files", "grep", "search_code", "retrieve_doc"}
CODE = {"list_symbols", "find_symbol", "find_references", "dependency_graph"}
MEMORY = {"memory_add", "memory_replace", "memory_search", "memory_consolidate", "memory_delete"}


def _all_builtins() -> list[ToolFactory]:
    return builtin_tool_factories(shell_enabled=True, delete_enabled=True) + (
        knowledge_tool_factories(memory_enabled=True)
    )


def _schema(factory: ToolFactory) -> dict[str, Any]:
    schema = factory().definition.output_schema
    assert schema is not None, factory
    return schema


class Checker:
    """Validates outputs against their tool's schema, two ways, and notes which tools it saw."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def __call__(self, factory: ToolFactory, out: ToolOutput) -> dict[str, Any]:
        schema = _schema(factory)
        name = factory().definition.name
        assert out.data is not None, f"{name} returned no data"
        errors = [
            f"{list(e.absolute_path)}: {e.message}"
            for e in Draft7Validator(schema).iter_errors(out.data)
        ]
        assert errors == [], (name, errors)
        # What the dispatcher runs after execution must agree.
        assert CompiledValidator(schema, "output_schema").errors(out.data) == [], name
        self.seen.add(name)
        return out.data


@pytest.fixture
def check() -> Checker:
    return Checker()


@pytest.fixture
def sample(tmp_path: Path) -> Iterator[WorkspaceFileAPI]:
    root = tmp_path / "sample"
    shutil.copytree(SAMPLE, root)
    ws = WorkspaceFileAPI(root)
    try:
        yield ws
    finally:
        forget(ws.workspace_root)
        ws.close()


# -- the declarations ---------------------------------------------------------


def test_every_output_schema_is_in_the_subset_and_every_one_is_exercised() -> None:
    declared: set[str] = set()
    for factory in _all_builtins():
        definition = factory().definition
        if definition.output_schema is None:
            continue
        declared.add(definition.name)
        # The check the registry applies to input schemas, and to output schemas.
        check_subset(definition.output_schema, "output_schema")
        # Not vacuous: every schema requires something, so {} is refused.
        assert not Draft7Validator(definition.output_schema).is_valid({}), definition.name
    assert declared == GIT | FILES_AND_SEARCH | CODE | MEMORY


def test_the_subset_check_refuses_what_the_shapes_must_not_produce() -> None:
    with pytest.raises(ToolRegistrationError, match="pattern"):
        check_subset(record({"sha": {"type": "string", "pattern": "^[0-9a-f]+$"}}))
    with pytest.raises(ValueError, match="undeclared"):
        record({"a": {"type": "string"}}, optional=["b"])


def test_the_schemas_are_closed_and_nullable_where_git_says_nothing() -> None:
    diff = Draft7Validator(_schema(GitDiffTool))
    file = {"path": "a", "old_path": None, "added": None, "removed": None, "binary": True}
    assert diff.is_valid({"files": [file], "staged": False, "ref": None})
    # A key the schema does not declare is a tool bug, not a silent extra.
    assert not diff.is_valid({"files": [{**file, "mode": "100644"}], "staged": False, "ref": None})
    assert not diff.is_valid({"files": [{**file, "added": "3"}], "staged": False, "ref": None})


def test_providers_never_receive_an_output_schema() -> None:
    definition = ToolDefinition(
        name="typed",
        description="A tool with an output schema.",
        input_schema={"type": "object", "properties": {}, "required": []},
        side_effects=SideEffects.READ,
        output_schema=_schema(GitLogTool),
    )
    for wire in (anthropic_wire.tool_to_wire(definition), openai_wire.tool_to_wire(definition)):
        assert "output_schema" not in repr(wire) and "commits" not in repr(wire), wire


# -- running them -------------------------------------------------------------


async def test_git_tools_data_matches_their_schemas(
    sample: WorkspaceFileAPI, check: Checker
) -> None:
    root = Path(sample.workspace_root)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial")
    # A local upstream, so status reports ahead/behind as numbers.
    git(root, "branch", "base")
    git(root, "branch", "-q", "--set-upstream-to=base", "main")
    (root / "python" / "main.py").write_text("print('changed')\n")
    git(root, "commit", "-q", "-am", "second\n\nwith a body")
    # Unstaged, staged (a rename and a binary file) and untracked changes.
    (root / "js" / "util.js").write_text("export const x = 1;\n")
    git(root, "mv", "docs/architecture.md", "docs/arch.md")
    (root / "blob.bin").write_bytes(b"\x00\x01\x02" * 10)
    git(root, "add", "blob.bin")
    (root / "new.txt").write_text("new\n")

    status = check(GitStatusTool, await run_tool(GitStatusTool, {}, sample))
    assert status["branch"]["upstream"] == "base" and status["branch"]["ahead"] == 1
    kinds = {e["kind"] for e in status["entries"]}
    assert {"changed", "renamed", "untracked"} <= kinds

    unstaged = check(GitDiffTool, await run_tool(GitDiffTool, {}, sample))
    assert [f["path"] for f in unstaged["files"]] == ["js/util.js"]
    staged = check(GitDiffTool, await run_tool(GitDiffTool, {"staged": True}, sample))
    binary = next(f for f in staged["files"] if f["path"] == "blob.bin")
    assert binary["binary"] is True and binary["added"] is None
    check(GitDiffTool, await run_tool(GitDiffTool, {"ref": "HEAD~1", "path": "python"}, sample))

    log = check(GitLogTool, await run_tool(GitLogTool, {}, sample))
    assert [c["subject"] for c in log["commits"]] == ["second", "initial"]

    committed = check(
        GitCommitTool, await run_tool(GitCommitTool, {"message": "third", "all": True}, sample)
    )
    assert len(committed["sha"]) == 40 and committed["branch"] == "main"

    listed = check(GitBranchTool, await run_tool(GitBranchTool, {}, sample))
    assert {b["name"] for b in listed["branches"]} == {"base", "main"}
    for action in ("create", "switch"):
        check(
            GitBranchTool,
            await run_tool(GitBranchTool, {"action": action, "name": "topic"}, sample),
        )
    git(root, "switch", "-q", "main")
    deleted = check(
        GitBranchTool, await run_tool(GitBranchTool, {"action": "delete", "name": "topic"}, sample)
    )
    assert deleted == {"action": "delete", "name": "topic"}
    assert check.seen == GIT


async def test_listing_search_and_doc_data_match_their_schemas(
    sample: WorkspaceFileAPI, check: Checker
) -> None:
    root = Path(sample.workspace_root)
    (root / "link_to_file.py").symlink_to("python/main.py")
    (root / "link_to_dir").symlink_to("python")

    top = check(ListDirTool, await run_tool(ListDirTool, {}, sample))
    types = {e["name"]: (e["type"], "size" in e) for e in top["entries"]}
    assert types["link_to_file.py"] == ("symlink", True)
    assert types["link_to_dir"] == ("symlink", False)
    assert types["python"] == ("dir", False)
    check(ListDirTool, await run_tool(ListDirTool, {"recursive": True, "max_entries": 3}, sample))

    found = check(
        FindFilesTool, await run_tool(FindFilesTool, {"pattern": "*.py", "max_results": 1}, sample)
    )
    assert found["count"] == 1 and found["truncated"] is True

    grep = check(GrepTool, await run_tool(GrepTool, {"pattern": "make_user"}, sample))
    assert grep["count"] > 0 and grep["matches"][0]["line"] >= 1
    check(GrepTool, await run_tool(GrepTool, {"pattern": "no such text anywhere"}, sample))

    code = check(
        SearchCodeTool,
        await run_tool(SearchCodeTool, {"pattern": r"def \w+", "context_lines": 1}, sample),
    )
    assert code["matches"] and all(m["column"] >= 1 for m in code["matches"])

    docs = check(
        RetrieveDocTool, await run_tool(RetrieveDocTool, {"query": "Go store memory"}, sample)
    )
    assert docs["passages"][0]["heading"] == "Storage"
    assert check.seen == FILES_AND_SEARCH


async def test_code_tools_data_match_their_schemas(
    sample: WorkspaceFileAPI, check: Checker
) -> None:
    outline = check(
        ListSymbolsTool, await run_tool(ListSymbolsTool, {"path": "python/app/service.py"}, sample)
    )
    assert any(s["container"] for s in outline["symbols"])  # methods name their class
    defs = check(FindSymbolTool, await run_tool(FindSymbolTool, {"name": "make_user"}, sample))
    assert defs["definitions"]
    refs = check(
        FindReferencesTool,
        await run_tool(FindReferencesTool, {"name": "make_user", "max_results": 1}, sample),
    )
    assert refs["truncated"] is (refs["total"] > 1)
    graph = check(DependencyGraphTool, await run_tool(DependencyGraphTool, {}, sample))
    assert any(e["to"] is None for e in graph["edges"])  # external modules are null
    assert check.seen == CODE


async def test_memory_tools_data_match_their_schemas(
    sample: WorkspaceFileAPI, tmp_path: Path, check: Checker
) -> None:
    store = MemoryStore.open(tmp_path / "memory.sqlite3")
    try:
        scope = MemoryScope(store, sample.workspace_root, "alice", "sess_1", lambda *_: None)
        options = {"memory": scope}

        async def call(factory: ToolFactory, **input: Any) -> dict[str, Any]:
            return check(factory, await run_tool(factory, input, sample, options=options))

        first = await call(MemoryAddTool, content="Run the tests with pytest -q", tags=["testing"])
        await call(MemoryAddTool, content="run the tests with pytest -q!")
        await call(MemoryReplaceTool, id=first["id"], content="Run the tests with pytest -q.")
        assert (await call(MemorySearchTool, query="pytest"))["results"]
        merged = await call(MemoryConsolidateTool)
        assert merged["removed"] == 1
        kept = merged["merges"][0]["kept"]["id"]
        assert await call(MemoryDeleteTool, id=kept) == {"id": kept}
    finally:
        store.close()
    assert check.seen == MEMORY
