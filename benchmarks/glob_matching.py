"""Cost of matching a user glob (find_files/grep/search_code ``file_pattern``)
against workspace paths: dispatcher's own gitignore-style translator
(dispatcher.tools.search.globbing) against wcmatch (GLOBSTAR, BRACE,
DOTGLOB, MATCHBASE) as its matcher and as its regex translation, each with
the pattern compiled once.

Run: ``.venv/bin/python benchmarks/glob_matching.py [--paths N]``

It prints, per pattern, the median time to test every path (microseconds
per path) and how many paths each accepted: a brace pattern such as
``*.{ts,tsx}`` matches nothing under the bare translator. The last column
is what the tools use: the translator after bracex's brace expansion. A
script, not a test.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from wcmatch import glob as wcglob

from dispatcher.tools.search.globbing import compile_glob, compile_user_glob

PATTERNS = ("*.py", "src/**/*.ts", "**/test_*.py", "*.{ts,tsx}", "[a-m]*.md")
FLAGS = wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB | wcglob.FORCEUNIX | wcglob.MATCHBASE


def make_paths(n: int) -> list[str]:
    """A plausible tree: a few folders deep, mixed extensions."""
    exts = ("py", "ts", "tsx", "md", "json", "txt")
    return [
        f"src/pkg{i % 13}/sub{i % 7}/{'test_' if i % 5 == 0 else ''}file{i}.{exts[i % len(exts)]}"
        for i in range(n)
    ]


def translator(pattern: str) -> Callable[[str], bool]:
    rx = compile_glob(pattern)
    if "/" in pattern:
        return lambda p: rx.match(p) is not None
    return lambda p: rx.match(p.rsplit("/", 1)[-1]) is not None


def translator_with_braces(pattern: str) -> Callable[[str], bool]:
    """What the tools use: the translator after bracex's brace expansion."""
    return compile_user_glob(pattern)


def wcmatcher(pattern: str) -> Callable[[str], bool]:
    return wcglob.compile(pattern, flags=FLAGS).match


def wctranslated(pattern: str) -> Callable[[str], bool]:
    """wcmatch's own translation to regexes, compiled once into one pattern;
    a name pattern (no '/') is tested against the last component."""
    include, _ = wcglob.translate(pattern, flags=FLAGS & ~wcglob.MATCHBASE)
    rx = re.compile("|".join(include))
    if "/" in pattern:
        return lambda p: rx.match(p) is not None
    return lambda p: rx.match(p.rsplit("/", 1)[-1]) is not None


def per_path_us(match: Callable[[str], bool], paths: list[str]) -> tuple[float, int]:
    rounds = []
    hits = 0
    for _ in range(7):
        start = time.perf_counter_ns()
        hits = sum(1 for p in paths if match(p))
        rounds.append((time.perf_counter_ns() - start) / len(paths) / 1000)
    return statistics.median(rounds), hits


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--paths", type=int, default=5000)
    args = parser.parse_args()
    paths = make_paths(args.paths)
    print(
        f"{'pattern':<16} {'ours us':>8} {'hits':>6} {'wcmatch us':>11} {'hits':>6}"
        f" {'translated us':>14} {'hits':>6} {'ours+braces us':>15} {'hits':>6}"
    )
    for pattern in PATTERNS:
        ours, ours_hits = per_path_us(translator(pattern), paths)
        wc, wc_hits = per_path_us(wcmatcher(pattern), paths)
        tr, tr_hits = per_path_us(wctranslated(pattern), paths)
        ob, ob_hits = per_path_us(translator_with_braces(pattern), paths)
        print(
            f"{pattern:<16} {ours:>8.3f} {ours_hits:>6} {wc:>11.3f} {wc_hits:>6}"
            f" {tr:>14.3f} {tr_hits:>6} {ob:>15.3f} {ob_hits:>6}"
        )


if __name__ == "__main__":
    main()
