"""search_code on a typical tree, two ways: the regex in a killable child
process fed file contents over a pipe (the tool before issue 12, kept in
benchmarks/legacy_search_code/) against the ``regex`` module with a
per-search timeout in a worker thread (dispatcher.tools.search.search_code).

Run: ``.venv/bin/python benchmarks/regex_search.py [--files N] [--runs N]``

It builds ``--files`` (300) Python-like files of 200 lines, then times whole
tool calls (a fresh instance each, no sandbox) for a few patterns and
prints the median and 90th percentile in milliseconds and the ratio of the
medians. Both must find the same matches. A script, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.legacy_search_code.search_code import (
    SearchCodeTool as WorkerSearchCodeTool,
)
from dispatcher import ToolContext, WorkspaceFileAPI
from dispatcher.tools.search.search_code import SearchCodeTool

QUERIES: tuple[dict[str, Any], ...] = (
    {"pattern": r"def \w+_17\(", "max_results": 50},
    {"pattern": r"return value \+ 3$", "max_results": 1000, "context_lines": 0},
    {"pattern": "nothing matches this", "max_results": 50},
)


def build_tree(root: Path, files: int) -> None:
    for i in range(files):
        folder = root / f"pkg{i % 12}"
        folder.mkdir(exist_ok=True)
        body = "".join(
            f"def helper_{j}(value):\n    # comment {i}-{j}\n    return value + {j % 5}\n\n"
            for j in range(50)
        )
        (folder / f"module_{i}.py").write_text(body)


def context(ws: WorkspaceFileAPI) -> ToolContext:
    return ToolContext(
        session_id="bench",
        turn_id="turn",
        tool_use_id="tu",
        workspace_path=ws.workspace_root,
        workspace_files=ws,
        cancel_event=asyncio.Event(),
        options={},
        sandbox=None,
    )


async def time_tool(
    factory: Any, query: dict[str, Any], ws: WorkspaceFileAPI, runs: int
) -> tuple[list[float], list[Any]]:
    samples: list[float] = []
    matches: list[Any] = []
    for _ in range(runs):
        start = time.perf_counter()
        out = await factory().execute(dict(query), context(ws))
        samples.append((time.perf_counter() - start) * 1000)
        # The legacy tool reports its matches in metadata, today's in data.
        matches = out.data["matches"] if out.data is not None else out.metadata["matches"]
    return samples, matches


def p90(samples: list[float]) -> float:
    return sorted(samples)[int(len(samples) * 0.9) - 1]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_tree(root, args.files)
        ws = WorkspaceFileAPI(str(root))
        print(f"{args.files} files x 200 lines, {args.runs} runs each (ms)")
        print(
            f"{'pattern':<28} {'worker med':>10} {'p90':>7} {'thread med':>10} {'p90':>7}", end=""
        )
        print(f" {'ratio':>6}")
        for query in QUERIES:
            old, old_found = await time_tool(WorkerSearchCodeTool, query, ws, args.runs)
            new, new_found = await time_tool(SearchCodeTool, query, ws, args.runs)
            assert old_found == new_found, query["pattern"]
            om, nm = statistics.median(old), statistics.median(new)
            print(
                f"{query['pattern']:<28} {om:>10.1f} {p90(old):>7.1f} {nm:>10.1f}"
                f" {p90(new):>7.1f} {om / nm:>6.2f}"
            )
        ws.close()


if __name__ == "__main__":
    asyncio.run(main())
