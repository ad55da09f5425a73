"""Cost of the protected-file mounts per sandboxed spawn (issue 25, item 2).

Two workspaces, each measured in rounds that interleave its variants (so a
change in the machine's load hits them alike); each variant's median (and
p90), printed with its ratio to the first variant of its table.

1. Five globs, ~1000 files (``.env`` anywhere, ``secrets/**``, ``*.pem``,
   ``config/prod.yml``, ``deploy/*.key``, matching 20 files):

   - none: spawn ``true`` with no protected or hidden globs;
   - globs: spawn ``true`` with the globs: expansion (warm), the pins, the
     read-only binds and the check inside the sandbox that the mounts are
     the files that were looked at (one ``sh`` and one ``stat`` more);
   - expand: the glob expansion alone (no spawn), warm.

2. The README's ``protected_files: [".env", "secrets/**"]`` in a generated
   workspace of 10,000 files in ~1,000 folders (``.env`` is a name
   anywhere, so each spawn walks the workspace):

   - none / readme: spawn ``true`` without and with the patterns (warm);
   - search: spawn ``true`` with the patterns and the workspace read-only,
     as searches and git's reads do (no read-only binds needed: no walk);
   - cold: the expansion by a new matcher (a full walk);
   - warm: the expansion by the matcher of earlier spawns (one lstat per
     folder, dispatcher/sandbox_scan.py).

The generated folders are left quiet for the cache's racy window before
measuring, as a checkout is between edits.

Run: ``.venv/bin/python -m benchmarks.sandbox_binds [rounds]``.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dispatcher.sandbox import Sandbox, SandboxConfig
from dispatcher.sandbox_files import WorkspaceGlobs, WorkspaceMatcher
from dispatcher.sandbox_scan import RACY_NS

GLOBS = (".env", "secrets/**", "*.pem", "config/prod.yml", "deploy/*.key")
README_GLOBS = (".env", "secrets/**")
PER_ROUND = 5
Variants = dict[str, Callable[[], object]]


def _small_workspace(root: Path) -> None:
    """~1000 ordinary files in 50 folders, and 20 that the globs match."""
    for d in range(50):
        folder = root / "src" / f"pkg{d}"
        folder.mkdir(parents=True)
        for f in range(20):
            (folder / f"m{f}.py").write_text("x = 1\n")
    matched = [".env", "app/.env", "web/.env", "config/prod.yml"]
    matched += [f"secrets/k{i}" for i in range(6)]  # one folder bind
    matched += [f"certs/c{i}.pem" for i in range(6)]
    matched += [f"deploy/d{i}.key" for i in range(4)]
    _write(root, matched)


def _large_workspace(root: Path) -> None:
    """10,000 files in 40 x 25 folders, and the README's two matches."""
    for top in range(40):
        for sub in range(25):
            folder = root / f"pkg{top}" / f"mod{sub}"
            folder.mkdir(parents=True)
            for f in range(10):
                (folder / f"m{f}.py").write_text("x = 1\n")
    _write(root, [".env", "secrets/key"])


def _write(root: Path, rels: list[str]) -> None:
    for rel in rels:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("secret\n")


def _timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def _spawn(box: Sandbox, *, writable: bool = True) -> Callable[[], object]:
    def run() -> object:
        argv = box.command(["true"], writable_workspace=writable)
        return subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)

    return run


def _measure(variants: Variants, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in variants}
    for run in variants.values():
        run()  # warm
    for _ in range(rounds):
        for name, run in variants.items():
            times[name] += [_timed(run) for _ in range(PER_ROUND)]
    return times


def _report(title: str, times: dict[str, list[float]]) -> None:
    print(title)
    base = statistics.median(next(iter(times.values())))
    for name, values in times.items():
        median = statistics.median(values)
        p90 = statistics.quantiles(values, n=10)[-1]
        print(f"  {name:7s} median {median:7.2f} ms  p90 {p90:7.2f} ms  ratio {median / base:5.2f}")


def _small(bwrap: str, rounds: int) -> None:
    with tempfile.TemporaryDirectory(dir="/var/tmp") as folder:
        root = Path(folder)
        _small_workspace(root)
        time.sleep(RACY_NS / 1e9 + 0.5)
        files = WorkspaceGlobs(read_only=GLOBS)
        matcher = WorkspaceMatcher(files)
        found = matcher.expand(str(root))
        times = _measure(
            {
                "none": _spawn(Sandbox(SandboxConfig(bwrap), str(root))),
                "globs": _spawn(Sandbox(SandboxConfig(bwrap, files=files), str(root))),
                "expand": lambda: matcher.expand(str(root)),
            },
            rounds,
        )
    _report(
        f"sandbox binds: {len(found.read_only)} read-only mounts, {len(found.pinned)} pinned "
        f"folders ({len(GLOBS)} globs, 20 matching files, ~1000 files); "
        f"{rounds * PER_ROUND} runs each",
        times,
    )


def _large(bwrap: str, rounds: int) -> None:
    with tempfile.TemporaryDirectory(dir="/var/tmp") as folder:
        root = Path(folder)
        _large_workspace(root)
        time.sleep(RACY_NS / 1e9 + 0.5)
        files = WorkspaceGlobs(read_only=README_GLOBS)
        guarded = Sandbox(SandboxConfig(bwrap, files=files), str(root))
        warm = WorkspaceMatcher(files)
        found = warm.expand(str(root))
        times = _measure(
            {
                "none": _spawn(Sandbox(SandboxConfig(bwrap), str(root))),
                "readme": _spawn(guarded),
                "search": _spawn(guarded, writable=False),
                "cold": lambda: WorkspaceMatcher(files).expand(str(root)),
                "warm": lambda: warm.expand(str(root)),
            },
            rounds,
        )
    _report(
        f"README patterns {list(README_GLOBS)}: 10,000 files, {len(warm.listings)} folders "
        f"listed, {len(found.read_only)} read-only mounts; {rounds * PER_ROUND} runs each",
        times,
    )


def main(rounds: int = 40) -> None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        print("bubblewrap is not installed: nothing to measure")
        return
    _small(bwrap, rounds)
    _large(bwrap, rounds)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
