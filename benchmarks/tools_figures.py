"""The built-in tools' overhead (``benchmarks/tools_overhead.py``) as table rows.

``tools_overhead`` measures reading a 1 MiB file through ``read_file`` and
running ``true`` through the shell tool against the bare operations, all
variants interleaved in one run, and returns printable rows. This adapter
runs it with the runner's sizes and turns each row (median, p90, ratio of
medians to the bare operation) into a figure; the issue sets no target for
these, so they are reported.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from benchmarks import tools_overhead
from benchmarks.report import Section
from dispatcher import WorkspaceFileAPI

# "  <name>   median    0.123 ms   p90    0.456 ms     1.23x"
_ROW = re.compile(r"^\s+(?P<name>.+?)\s+median\s+(?P<median>[\d.]+) ms\s+p90\s+(?P<p90>[\d.]+) ms")
_RATIO = re.compile(r"(?P<ratio>[\d.]+)x\s*$")


def _figures(section: Section, title: str, lines: list[str]) -> int:
    """Rows of one tools_overhead table; the first row is its bare baseline."""
    baseline_name: str | None = None
    baseline: float | None = None
    added = 0
    for line in lines:
        row = _ROW.match(line)
        if row is None:
            continue
        median = float(row["median"])
        if baseline is None:
            baseline_name, baseline = row["name"], median
            section.add(f"{title}: {row['name']} (median)", median, "ms")
        else:
            ratio = _RATIO.search(line)
            # The script's own baseline may differ from its first row (the spawn
            # table compares to bare `true`); its printed ratio says which.
            base = median / float(ratio["ratio"]) if ratio else baseline
            section.add(
                f"{title}: {row['name']} (median)",
                median,
                "ms",
                baseline=base,
                baseline_name=baseline_name,
            )
        added += 1
    return added


async def run(quick: bool = False) -> Section:
    section = Section("tools")
    reads, spawns = (40, 30) if quick else (200, 100)
    with tempfile.TemporaryDirectory(prefix="toolrelay-bench-") as tmp:
        root = Path(tmp)
        ws = WorkspaceFileAPI(root)
        read_lines = await tools_overhead.bench_read(ws, root, reads)
        spawn_lines = await tools_overhead.bench_spawn(ws, spawns)
    rows = _figures(section, "read 1 MiB", read_lines)
    rows += _figures(section, "run `true`", spawn_lines)
    if rows == 0:
        raise RuntimeError("tools_overhead printed no rows this adapter understands")
    section.details = {"reads": reads, "spawns": spawns, "lines": read_lines + spawn_lines}
    return section
