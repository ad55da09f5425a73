"""Times the code index on a generated repository: the first call's background
build, later queries answered from it, and a query after an edit.

    python -m benchmarks.code_index [--files 10000] [--queries 20]

Prints medians; figures vary with the machine's load (nothing is asserted).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from dispatcher import ToolContext, WorkspaceFileAPI
from dispatcher.tools.code import FindReferencesTool, FindSymbolTool
from dispatcher.tools.code.index import index_for


def generate(root: Path, files: int) -> None:
    """Small Python modules in folders of 100, each importing its predecessor."""
    for i in range(files):
        folder = root / f"pkg{i // 100:03d}"
        folder.mkdir(exist_ok=True)
        prev = max(i - 1, 0)
        (folder / f"mod{i:05d}.py").write_text(
            f"from pkg{prev // 100:03d}.mod{prev:05d} import func_{prev}\n\n\n"
            f"class Thing{i}:\n    def method(self, x):\n        return func_{prev}(x)\n\n\n"
            f"def func_{i}(x):\n    return Thing{i}().method(x)\n"
        )


async def run(files: int, queries: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate(root, files)
        ws = WorkspaceFileAPI(root)

        def context(**options: float) -> ToolContext:
            return ToolContext("bench", "turn", "tu", ws.workspace_root, ws, options=options)

        started = time.perf_counter()
        await FindSymbolTool().execute({"name": "func_1"}, context())
        first = time.perf_counter() - started
        print(f"files: {files}")
        print(f"first call (background build + query): {first:.3f} s")
        print(f"build alone: {index_for(ws.workspace_root).progress.seconds:.3f} s")
        for name, tool, key in (
            ("find_symbol", FindSymbolTool, "func_"),
            ("find_references", FindReferencesTool, "func_"),
        ):
            times = []
            for q in range(queries):
                t = time.perf_counter()
                await tool().execute({"name": f"{key}{(q * 37) % files}"}, context())
                times.append(time.perf_counter() - t)
            print(
                f"{name}: median {statistics.median(times) * 1000:.2f} ms, "
                f"max {max(times) * 1000:.1f} ms (a full check runs when due)"
            )
        index = index_for(ws.workspace_root)
        t = time.perf_counter()
        index.refresh(min_interval=0)
        print(f"freshness check alone: {(time.perf_counter() - t) * 1000:.1f} ms")
        t = time.perf_counter()
        index.definitions("func_5")
        print(f"lookup alone: {(time.perf_counter() - t) * 1e6:.1f} us")
        (root / "pkg000" / "new.py").write_text("def fresh():\n    pass\n")
        index.mark_dirty(["pkg000/mod00001.py"])  # what note_modified does after patch_file
        t = time.perf_counter()
        await FindSymbolTool().execute({"name": "func_1"}, context())
        print(f"query after an edit through our tools: {(time.perf_counter() - t) * 1000:.1f} ms")
        t = time.perf_counter()
        await FindSymbolTool().execute({"name": "fresh"}, context(rescan_interval=0))
        print(
            f"query after an outside edit (full check): {(time.perf_counter() - t) * 1000:.1f} ms"
        )
        ws.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(run(args.files, args.queries))


if __name__ == "__main__":
    main()
