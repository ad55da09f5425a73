"""``python -m benchmarks``: run every benchmark, print one table, write JSON.

Each target is printed with the figure measured, the bare baseline measured
in the same run, their ratio and pass/MISS. The JSON (default
``benchmarks/results/latest.json``) also holds every detail and the machine.

    python -m benchmarks                 # everything (a few minutes)
    python -m benchmarks --quick         # shorter runs, noisier figures
    python -m benchmarks --only fanout --only confirmation
    python -m benchmarks --list

Benchmarks are scripts that measure; nothing here is a pass/fail test of
the code. They talk to 127.0.0.1 only and every loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path

import benchmarks.growth as growth
from benchmarks import confirmation, dispatch_overhead, fanout, scale, shell, tools_figures, turn
from benchmarks.report import (
    Figure,
    Section,
    Target,
    machine,
    markdown_table,
    status_word,
    table,
)

Runner = Callable[[bool], Awaitable[Section]]

BENCHMARKS: dict[str, Runner] = {
    "dispatch": dispatch_overhead.section,
    "fanout": fanout.run,
    "confirmation": confirmation.run,
    "shell": shell.run,
    "tools": tools_figures.run,
    "scale": scale.run,
    "growth": growth.run,
    "turn": turn.run,
}
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "latest.json"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description="toolrelay benchmarks against the bare stack"
    )
    parser.add_argument("--quick", action="store_true", help="shorter runs (noisier figures)")
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(BENCHMARKS),
        metavar="NAME",
        help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}",
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write results")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument(
        "--markdown",
        type=Path,
        metavar="RESULTS",
        help="print the table of a results file as Markdown (for the README) and exit",
    )
    return parser


async def _run_one(name: str, runner: Runner, quick: bool) -> Section:
    started = time.perf_counter()
    try:
        section = await runner(quick)
    except Exception as exc:
        # One broken benchmark must not hide the others' figures.
        traceback.print_exc()
        section = Section(name)
        section.figures.append(
            Figure(name, f"ERROR: {type(exc).__name__}: {exc}"[:120], float("nan"), "",
                   Target.at_least(0, "the benchmark must finish"))
        )  # fmt: skip
        section.details = {"error": repr(exc)}
    section.seconds = time.perf_counter() - started
    print(f"[{name}] done in {section.seconds:.1f} s", file=sys.stderr, flush=True)
    return section


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.markdown:
        saved = json.loads(args.markdown.read_text(encoding="utf-8"))
        print(markdown_table(saved["figures"]))
        return 0
    if args.list:
        for name, runner in BENCHMARKS.items():
            doc = (sys.modules[runner.__module__].__doc__ or "").strip().splitlines()[0]
            print(f"{name:<14} {doc}")
        return 0
    names = args.only or list(BENCHMARKS)
    info = machine()
    sections: list[Section] = []
    for name in names:
        print(f"[{name}] running{' (quick)' if args.quick else ''} ...", file=sys.stderr)
        sections.append(asyncio.run(_run_one(name, BENCHMARKS[name], args.quick)))
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    figures = [f for s in sections for f in s.figures]
    print()
    print(table(figures))
    missed = [f for f in figures if f.passed is False]
    print()
    print(
        f"{len(figures)} figures, {sum(f.passed is True for f in figures)} targets met, "
        f"{len(missed)} missed; machine: {info['nproc']} cores ({info['cpu_model']}), "
        f"Python {info['python']}, load {info['loadavg_start']} -> {info['loadavg_end']}"
    )
    for f in missed:
        print(f"  {status_word(False)}: {f.benchmark} / {f.name}")
    result = {
        "machine": info,
        "quick": args.quick,
        "command": "python -m benchmarks " + " ".join(argv or sys.argv[1:]),
        "figures": [f.to_json() for f in figures],
        "sections": [s.to_json() for s in sections],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
