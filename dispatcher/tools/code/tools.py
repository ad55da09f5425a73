"""list_symbols, find_symbol, find_references, dependency_graph.

Read-only tools over the tree-sitter facts of the workspace's source files
(Python, JavaScript, TypeScript/TSX, Go, Rust, Java). ``list_symbols`` parses
the one file it is given; the other three answer from the workspace's shared
index (index.py), which the first call builds in the background while it
streams progress as ``tool.output_delta`` events on the ``progress`` stream;
later calls get it refreshed first (files our tools modified, reported by the
dispatcher to note_modified, and a periodic full check for everything else).

Each result is text for the model plus the same facts, structured, as the
output's ``data`` (clients receive it in ``tool.completed.data.structured``);
its shape is each tool's ``definition.output_schema``, which the dispatcher
validates it against.
"""

from __future__ import annotations

import asyncio
import contextlib
import stat
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from dispatcher.errors import ToolExecutionError
from dispatcher.tool import BaseTool, ToolContext, ToolOutput
from dispatcher.tools.capped import cap
from dispatcher.tools.code.extract import extract
from dispatcher.tools.code.index import CodeIndex, index_for, note_session
from dispatcher.tools.code.languages import EXTENSIONS, language_for, require_grammars
from dispatcher.tools.common import (
    Options,
    check_cancelled,
    object_schema,
    path_property,
    relative_path,
    require_file,
)
from dispatcher.tools.shapes import BOOLEAN, LINE, PATH, STRING, array, nullable, record
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects, ToolDefinition

T = TypeVar("T")

PROGRESS_POLL_S = 0.25
MAX_OUTLINE_BYTES = 4 * 1024 * 1024
KINDS = [
    "class",
    "function",
    "method",
    "constructor",
    "interface",
    "type",
    "struct",
    "enum",
    "trait",
    "module",
]
# extract.Symbol.to_json()
_SYMBOL_PROPERTIES: dict[str, dict[str, Any]] = {
    "name": STRING,
    "kind": {"type": "string", "enum": KINDS},
    "line": LINE,
    "end_line": LINE,
    "column": {
        "type": "integer",
        "minimum": 1,
        "description": "1-based column of the name (bytes).",
    },
    "signature": STRING,
    "container": nullable("string", "The enclosing class, impl or trait, if any."),
}
LIST_SYMBOLS_OUTPUT = record(
    {
        "path": PATH,
        "language": STRING,
        "symbols": array(record(_SYMBOL_PROPERTIES)),
        "syntax_errors": BOOLEAN,
    }
)
FIND_SYMBOL_OUTPUT = record(
    {"name": STRING, "definitions": array(record({"file": PATH, **_SYMBOL_PROPERTIES}))}
)
FIND_REFERENCES_OUTPUT = record(
    {
        "name": STRING,
        "references": array(
            record(
                {
                    "file": PATH,
                    "line": LINE,
                    "text": STRING,
                    "context": array(STRING, "Lines context_start.. around the use."),
                    "context_start": LINE,
                }
            )
        ),
        "total": {"type": "integer", "minimum": 0, "description": "Uses found, shown or not."},
        "truncated": BOOLEAN,
    }
)
DEPENDENCY_GRAPH_OUTPUT = record(
    {
        "edges": array(
            record(
                {
                    "from": PATH,
                    "to": nullable("string", "The workspace file or folder; null: external."),
                    "module": STRING,
                    "line": LINE,
                }
            )
        ),
        "nodes": array(PATH),
        "truncated": BOOLEAN,
    }
)
_LANGS = ", ".join(sorted(set(EXTENSIONS.values())))


async def ready_index(context: ToolContext) -> CodeIndex:
    """The workspace's index, built (first call: in the background, with
    progress events while this call waits) and checked for changed files."""
    require_grammars()  # before a build that could only fail
    index = index_for(context.workspace_files.workspace_root)
    note_session(context.session_id, index.root)
    index.start()
    waited = False
    last: tuple[int, int] | None = None
    while not index.wait(0):
        waited = True
        p = index.progress
        if (p.done, p.total) != last:
            last = (p.done, p.total)
            what = f"{p.done}/{p.total} files" if p.total else "listing files"
            context.emit_output("progress", f"indexing the workspace: {what}\n")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(PROGRESS_POLL_S):
                await context.cancel_event.wait()
        check_cancelled(context, "indexing")
    p = index.progress
    if p.state == "failed":
        raise ToolExecutionError(f"the code index could not be built: {p.error}")
    if waited:
        context.emit_output(
            "progress", f"indexed {index.file_count} source files in {p.seconds:g} s\n"
        )
    else:
        interval: float | None = None
        if "rescan_interval" in context.options:
            interval = Options("code", context.options).number(
                "rescan_interval", 0.0, minimum=0.0, maximum=3600.0
            )
        await asyncio.to_thread(lambda: index.refresh(min_interval=interval))
    return index


async def query_index(
    context: ToolContext, tool: str, path: str | None, query: Callable[[CodeIndex, str], T]
) -> T:
    """What every index-backed tool does before its own rendering: check for
    cancellation, resolve the ``path`` scope, wait for the index, and run
    ``query(index, scope)`` off the loop (a look-up takes the index's lock,
    which another session's freshness check may hold for a moment)."""
    check_cancelled(context, tool)
    under = _scope(context.workspace_files, path)
    index = await ready_index(context)
    return await asyncio.to_thread(query, index, under)


def _scope(ws: WorkspaceFileAPI, path: str | None) -> str:
    """The workspace-relative folder or file a query is limited to."""
    if path is None or path in ("", "."):
        return "."
    rel = relative_path(ws, path)
    if not ws.exists(rel):
        raise ToolExecutionError(f"path {path!r} does not exist")
    return rel


class ListSymbolsTool(BaseTool):
    """The outline of one source file: classes, functions, methods, types."""

    definition: ToolDefinition = ToolDefinition(
        name="list_symbols",
        description=(
            "Outline one source file: its classes, functions, methods and types with their "
            f"kind, lines and signature, parsed with tree-sitter ({_LANGS})."
        ),
        input_schema=object_schema({"path": path_property("The source file.")}, ["path"]),
        side_effects=SideEffects.READ,
        output_schema=LIST_SYMBOLS_OUTPUT,
    )
    path_fields: tuple[str, ...] = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "list_symbols")
        ws = context.workspace_files
        path: str = input["path"]
        st = require_file(ws, path)
        rel = relative_path(ws, path)
        language = language_for(rel)
        if language is None:
            raise ToolExecutionError(
                f"{path!r} is not a source file the code tools parse (suffixes: "
                f"{', '.join(sorted(EXTENSIONS))})"
            )
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_OUTLINE_BYTES:
            raise ToolExecutionError(f"{path!r} is larger than {MAX_OUTLINE_BYTES} bytes")
        facts = await asyncio.to_thread(lambda: extract(language, ws.read_bytes(rel)))
        symbols = [s.to_json() for s in facts.symbols]
        lines = [
            f"{s.line}-{s.end_line} {s.kind} "
            f"{(s.container + '.') if s.container else ''}{s.name}: {s.signature}"
            for s in facts.symbols
        ]
        text = f"{rel} ({language}, {len(symbols)} symbols)\n" + "\n".join(lines)
        if facts.error:
            text += "\n[the file has syntax errors: the outline may be incomplete]"
        return ToolOutput.text(
            text,
            data={
                "path": rel,
                "language": language,
                "symbols": symbols,
                "syntax_errors": facts.error,
            },
        )


class FindSymbolTool(BaseTool):
    """Where a name is defined, across the workspace."""

    definition: ToolDefinition = ToolDefinition(
        name="find_symbol",
        description=(
            "Find the definitions of a name (class, function, method, type...) across the "
            "workspace's source files, with kind, file, line and signature. `kind` narrows "
            "to one kind; `path` to a folder or file. The first call indexes the workspace."
        ),
        input_schema=object_schema(
            {
                "name": {"type": "string", "minLength": 1, "description": "Exact name."},
                "kind": {"type": "string", "enum": KINDS},
                "path": path_property("Folder or file to search (default: everywhere)."),
            },
            ["name"],
        ),
        side_effects=SideEffects.READ,
        output_schema=FIND_SYMBOL_OUTPUT,
    )
    path_fields: tuple[str, ...] = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        name: str = input["name"]
        found = await query_index(
            context,
            "find_symbol",
            input.get("path"),
            lambda index, under: index.definitions(name, kind=input.get("kind"), under=under),
        )
        defs = [{"file": rel, **sym.to_json()} for rel, sym in found]
        if defs:
            text = "\n".join(
                f"{d['file']}:{d['line']} {d['kind']} "
                f"{(str(d['container']) + '.') if d['container'] else ''}{name}: {d['signature']}"
                for d in defs
            )
        else:
            text = f"(no definition of {name!r} found)"
        return ToolOutput.text(text, data={"name": name, "definitions": defs})


class FindReferencesTool(BaseTool):
    """Where a name is used, excluding where it is defined."""

    definition: ToolDefinition = ToolDefinition(
        name="find_references",
        description=(
            "Find the uses of a name across the workspace's source files (identifiers in "
            "code, not text in comments or strings; definitions excluded), each with its "
            "line and surrounding lines. `path` limits the search to a folder or file."
        ),
        input_schema=object_schema(
            {
                "name": {"type": "string", "minLength": 1, "description": "Exact name."},
                "path": path_property("Folder or file to search (default: everywhere)."),
                "context_lines": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 5,
                    "description": "Lines shown before and after each use (default 1).",
                },
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 2000,
                    "description": "Most uses to return (default 200).",
                },
            },
            ["name"],
        ),
        side_effects=SideEffects.READ,
        output_schema=FIND_REFERENCES_OUTPUT,
    )
    path_fields: tuple[str, ...] = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        name: str = input["name"]
        around: int = input.get("context_lines", 1)
        limit: int = input.get("max_results", 200)

        def render(index: CodeIndex, under: str) -> tuple[list[dict[str, Any]], int]:
            by_file = index.references(name, under=under)
            total = sum(len(lines) for _, lines in by_file)
            out: list[dict[str, Any]] = []
            for rel, lines in by_file:
                if len(out) >= limit:
                    break
                text = index.read_lines(rel)
                for line in lines:
                    if len(out) >= limit:
                        break
                    lo, hi = max(1, line - around), min(len(text), line + around)
                    out.append(
                        {
                            "file": rel,
                            "line": line,
                            "text": text[line - 1] if line <= len(text) else "",
                            "context": text[lo - 1 : hi],
                            "context_start": lo,
                        }
                    )
            return out, total

        refs, total = await query_index(context, "find_references", input.get("path"), render)
        if refs:
            text = "\n".join(f"{r['file']}:{r['line']}: {r['text'].strip()}" for r in refs)
        else:
            text = f"(no references to {name!r} found)"
        if total > len(refs):
            text += f"\n[truncated: {len(refs)} of {total} uses shown]"
        return ToolOutput.text(
            text,
            metadata={"total": total, "truncated": total > len(refs)},
            data={
                "name": name,
                "references": refs,
                "total": total,
                "truncated": total > len(refs),
            },
        )


class DependencyGraphTool(BaseTool):
    """Imports between the workspace's files, as edges."""

    definition: ToolDefinition = ToolDefinition(
        name="dependency_graph",
        description=(
            "The import graph of the workspace: edges {from, to, module, line} where `to` is "
            "the workspace file (or Go/Java package folder) the import resolves to, or null "
            "for an external module. With `path` (a file), the imports reachable from it up "
            "to `depth` steps (default 1); with a folder, the edges of the files in it."
        ),
        input_schema=object_schema(
            {
                "path": path_property("A file to start from, or a folder (default: all)."),
                "depth": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 20,
                    "description": "Steps to follow from a file (default 1).",
                },
                "include_external": {
                    "type": "boolean",
                    "description": "Keep imports of modules outside the workspace (default true).",
                },
                "max_edges": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 20000,
                    "description": "Most edges to return (default 1000).",
                },
            },
            [],
        ),
        side_effects=SideEffects.READ,
        output_schema=DEPENDENCY_GRAPH_OUTPUT,
    )
    path_fields: tuple[str, ...] = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        ws = context.workspace_files
        depth: int = input.get("depth", 1)
        external: bool = input.get("include_external", True)
        limit: int = input.get("max_edges", 1000)
        under, edges = await query_index(
            context,
            "dependency_graph",
            input.get("path"),
            lambda index, under: (under, index.import_edges()),
        )
        is_file = under != "." and stat.S_ISREG(ws.stat(under).st_mode)
        if is_file:
            edges = _reachable(edges, under, depth)
        elif under != ".":
            prefix = under.rstrip("/") + "/"
            edges = [e for e in edges if e["from"].startswith(prefix)]
        if not external:
            edges = [e for e in edges if e["to"] is not None]
        shown = cap(edges, limit)
        edges = shown.items
        nodes = sorted({e["from"] for e in edges} | {e["to"] for e in edges if e["to"]})
        text = (
            "\n".join(f"{e['from']} -> {e['to'] or '(external) ' + e['module']}" for e in edges)
            or "(no imports found)"
        )
        if shown.truncated:
            text += "\n" + shown.notice(limit, "edges")
        return ToolOutput.text(
            text,
            metadata={"truncated": shown.truncated},
            data={"edges": edges, "nodes": nodes, "truncated": shown.truncated},
        )


def _reachable(edges: list[dict[str, Any]], start: str, depth: int) -> list[dict[str, Any]]:
    """The edges met walking imports from ``start``, breadth first, ``depth`` steps."""
    by_from: dict[str, list[dict[str, Any]]] = {}
    for e in edges:
        by_from.setdefault(e["from"], []).append(e)
    out: list[dict[str, Any]] = []
    seen = {start}
    queue: deque[tuple[str, int]] = deque([(start, 0)])
    while queue:
        node, level = queue.popleft()
        if level >= depth:
            continue
        for e in by_from.get(node, ()):
            out.append(e)
            target = e["to"]
            if target is not None and target not in seen:
                seen.add(target)
                queue.append((target, level + 1))
    return out


CODE_TOOLS = (ListSymbolsTool, FindSymbolTool, FindReferencesTool, DependencyGraphTool)
