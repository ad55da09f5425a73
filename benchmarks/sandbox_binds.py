"""Cost of the protected-file mounts per sandboxed spawn (issue 25, item 2).

Spawns ``true`` in the sandbox, to the end, in three variants interleaved
in rounds (so a change in the machine's load hits them alike), each the
median (and p90) of its spawns, printed with their ratio to the first:

- none: no protected or hidden globs (the path before issue 25);
- globs: 5 protected globs matching 20 files in a workspace of ~1000 files
  (``.env`` anywhere, ``secrets/**``, ``*.pem``, ``config/prod.yml``,
  ``deploy/*.key``): expansion (a bounded walk), the pins, the read-only
  binds and the check inside the sandbox that the mounts are the files
  that were looked at (one ``sh`` and one ``stat`` more);
- expand: the glob expansion alone (no spawn), to split the cost.

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

GLOBS = (".env", "secrets/**", "*.pem", "config/prod.yml", "deploy/*.key")
PER_ROUND = 5


def _workspace(root: Path) -> None:
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
    for rel in matched:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("secret\n")


def _timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def _spawn(box: Sandbox) -> Callable[[], object]:
    def run() -> object:
        return subprocess.run(box.command(["true"]), check=True, stdin=subprocess.DEVNULL)

    return run


def main(rounds: int = 40) -> None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        print("bubblewrap is not installed: nothing to measure")
        return
    with tempfile.TemporaryDirectory(dir="/var/tmp") as folder:
        root = Path(folder)
        _workspace(root)
        files = WorkspaceGlobs(read_only=GLOBS)
        plain = Sandbox(SandboxConfig(bwrap), str(root))
        guarded = Sandbox(SandboxConfig(bwrap, files=files), str(root))
        matcher = WorkspaceMatcher(files)
        found = matcher.expand(str(root))
        variants: dict[str, Callable[[], object]] = {
            "none": _spawn(plain),
            "globs": _spawn(guarded),
            "expand": lambda: matcher.expand(str(root)),
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        for run in variants.values():
            run()  # warm
        for _ in range(rounds):
            for name, run in variants.items():
                times[name] += [_timed(run) for _ in range(PER_ROUND)]
    base = statistics.median(times["none"])
    print(
        f"sandbox binds: {len(found.read_only)} read-only mounts, {len(found.pinned)} pinned "
        f"folders ({len(GLOBS)} globs, 20 matching files); {rounds * PER_ROUND} runs each"
    )
    for name, values in times.items():
        median = statistics.median(values)
        p90 = statistics.quantiles(values, n=10)[-1]
        print(f"  {name:7s} median {median:7.2f} ms  p90 {p90:7.2f} ms  ratio {median / base:5.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
