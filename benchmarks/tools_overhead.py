"""What the built-in tools cost on top of the bare operation they wrap.

Run: ``.venv/bin/python benchmarks/tools_overhead.py [--reads N] [--spawns N] [--greps N]``

In one run, on the stdlib asyncio loop, it times:

- reading a 1 MiB UTF-8 file: ``Path.read_text()`` vs the read_file tool
  (fresh instance per call, as the dispatcher makes it) vs a whole
  ``ToolDispatcher.dispatch`` of read_file (events to a null publisher), and
  the tool with its worker-thread hop switched off, to show that hop's share;
- running ``true``: a bare ``asyncio.create_subprocess_exec('true')`` (output
  piped and read, as any tool must) vs the shell tool with the sandbox off and
  on; plus bare ``bash -c true`` and ``bwrap ... bash -c true``, which are what
  the tool actually runs, so the tool's own share can be read off;
- grep over a tree of ``--grep-files`` (3000) small files, one hit each: bare
  ``rg`` on the folder vs the grep tool's rg backend with the sandbox off and
  on (files opened by descriptor and handed over as /proc/self/fd/N) and its
  Python backend. ``--only-grep`` runs just this part.

It prints the median and 90th percentile of each and the ratio of the medians
to the bare operation. It is a script, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dispatcher import (
    DispatchSession,
    PolicyConfig,
    RulePolicy,
    ToolContext,
    ToolDispatcher,
    WorkspaceFileAPI,
)
from dispatcher.sandbox import Sandbox, SandboxConfig, hidden_paths
from dispatcher.tools import GrepTool, ReadFileTool, ShellTool, common
from protocol.canonical import ToolUseBlock
from server.config import ShellSection

MIB = 1024 * 1024


def _context(ws: WorkspaceFileAPI, options: dict[str, object] | None = None) -> ToolContext:
    return ToolContext(
        session_id="bench",
        turn_id="t",
        tool_use_id="tu",
        workspace_path=ws.workspace_root,
        workspace_files=ws,
        options=options or {},
    )


Variant = Callable[[], Awaitable[object]]


async def _interleaved(variants: dict[str, Variant], n: int, warmup: int) -> dict[str, list[float]]:
    """Time every variant n times, one of each in turn, so background load
    (other processes on a shared machine) hits all of them alike."""
    for _ in range(warmup):
        for fn in variants.values():
            await fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(n):
        for name, fn in variants.items():
            start = time.perf_counter()
            await fn()
            samples[name].append(time.perf_counter() - start)
    return samples


def _sync(fn: Callable[[], object]) -> Variant:
    async def call() -> object:
        return fn()

    return call


def _row(name: str, samples: list[float], baseline: float | None) -> str:
    """One printed line: median, p90, and the ratio of medians to the baseline."""
    median = statistics.median(samples)
    p90 = statistics.quantiles(samples, n=10)[-1] if len(samples) >= 10 else max(samples)
    ratio = f"{median / baseline:6.2f}x" if baseline else "  1.00x"
    return f"  {name:<44} median {median * 1e3:8.3f} ms   p90 {p90 * 1e3:8.3f} ms   {ratio}"


async def bench_read(ws: WorkspaceFileAPI, root: Path, n: int) -> list[str]:
    line = "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ éàü ~!@#$%^&*()\n"
    body = (line * (MIB // len(line.encode()) + 1)).encode()[:MIB]
    body = body[: body.rfind(b"\n") + 1]
    body += b"x" * (MIB - len(body) - 1) + b"\n"  # exactly 1 MiB, valid UTF-8
    target = root / "one_mib.txt"
    target.write_bytes(body)
    expected = body.decode()

    async def through_tool() -> object:
        return await ReadFileTool().execute({"path": "one_mib.txt"}, _context(ws))

    dispatcher = ToolDispatcher()
    dispatcher.register(ReadFileTool)
    session = DispatchSession(
        session_id="bench", workspace=ws, policy=RulePolicy(PolicyConfig(preset="yolo"))
    )
    call = ToolUseBlock(id="tu_read", name="read_file", input={"path": "one_mib.txt"})

    async def through_dispatcher() -> object:
        return await dispatcher.dispatch(call, session, turn_id="t")

    async def tool_inline() -> object:
        # The same call with the worker-thread hop switched off, to show its share.
        saved = common.THREAD_THRESHOLD_BYTES
        common.THREAD_THRESHOLD_BYTES = 1 << 62
        try:
            return await through_tool()
        finally:
            common.THREAD_THRESHOLD_BYTES = saved

    # Check once, outside the timed runs, that every variant reads the same text.
    checked = await through_tool()
    assert checked.content[0].text == expected  # type: ignore[attr-defined]
    result = await through_dispatcher()
    assert result.text() == expected  # type: ignore[attr-defined]
    samples = await _interleaved(
        {
            "Path.read_text()": _sync(target.read_text),
            "read_file tool (execute)": through_tool,
            "read_file via ToolDispatcher.dispatch": through_dispatcher,
            "read_file tool, inline (no worker thread)": tool_inline,
        },
        n,
        warmup=5,
    )
    base = statistics.median(samples["Path.read_text()"])
    assert len(body) == MIB
    return [f"read a {len(body) / MIB:.2f} MiB file ({n} runs each, interleaved)"] + [
        _row(name, values, None if name == "Path.read_text()" else base)
        for name, values in samples.items()
    ]


async def bench_read_small(ws: WorkspaceFileAPI, root: Path, n: int) -> list[str]:
    """A 4 KiB file six folders deep: here the per-component descriptor walk
    (one openat per folder) is a visible share, unlike for 1 MiB."""
    rel = "d1/d2/d3/d4/d5/d6/small.txt"
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("some ordinary text of a small source file\n" * 100)

    async def through_tool() -> object:
        return await ReadFileTool().execute({"path": rel}, _context(ws))

    samples = await _interleaved(
        {
            "Path.read_text() (small)": _sync(target.read_text),
            "read_file tool (small)": through_tool,
        },
        n,
        warmup=5,
    )
    base = statistics.median(samples["Path.read_text() (small)"])
    size = target.stat().st_size
    return [f"read a {size} B file 6 folders deep ({n} runs each, interleaved)"] + [
        _row(name, values, None if i == 0 else base)
        for i, (name, values) in enumerate(samples.items())
    ]


async def bench_spawn(ws: WorkspaceFileAPI, n: int) -> list[str]:
    def bare(*argv: str) -> Variant:
        # Output piped and read to the end: the least any tool must do.
        async def run() -> object:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            return await proc.communicate()

        return run

    def shell(sandbox: Sandbox | None) -> Variant:
        async def run() -> object:
            ctx = _context(ws)
            ctx.sandbox = sandbox
            out = await ShellTool().execute({"command": "true"}, ctx)
            assert out.success, out.content
            return out

        return run

    bash = shutil.which("bash") or "/bin/sh"
    variants: dict[str, Variant] = {
        "asyncio.create_subprocess_exec('true')": bare("true"),
        "bare `bash -c true` (what the tool runs)": bare(bash, "-c", "true"),
        "shell tool, sandbox off": shell(None),
    }
    bwrap = shutil.which("bwrap")
    if bwrap:
        # The server's default credential folders hidden, as a session's sandbox has them.
        hidden = hidden_paths(ShellSection().sandbox_hide)
        sandbox = Sandbox(SandboxConfig(bwrap, hidden), ws.workspace_root)
        box = sandbox.command([bash, "-c", "true"])
        variants["bare `bwrap ... bash -c true`"] = bare(*box)
        variants["shell tool, sandbox on (bwrap)"] = shell(sandbox)
    samples = await _interleaved(variants, n, warmup=5)
    base = statistics.median(samples["asyncio.create_subprocess_exec('true')"])
    rows = [f"run `true` ({n} runs each, interleaved; ratios against bare `true`)"]
    rows += [
        _row(name, values, base if i else None) for i, (name, values) in enumerate(samples.items())
    ]
    if not shutil.which("bwrap"):
        rows.append("  (bwrap not installed: sandbox rows skipped)")
    return rows


def _grep_tree(root: Path, files: int) -> None:
    """``files`` small source-like files in folders of 100, one hit each."""
    body = "".join(
        f"line {k} of some ordinary source text {'needle' if k == 7 else 'hay'}\n"
        for k in range(60)
    )
    for i in range(files):
        folder = root / "tree" / f"pkg{i // 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{i:05d}.py").write_text(body)


async def bench_grep(ws: WorkspaceFileAPI, root: Path, files: int, n: int) -> list[str]:
    """grep over a tree of ``files`` files: bare ``rg`` on the folder vs the grep
    tool (rg backend, sandbox off and on; python backend for scale)."""
    _grep_tree(root, files)
    rg = shutil.which("rg")
    variants: dict[str, Variant] = {}
    if rg:

        async def bare_rg() -> object:
            proc = await asyncio.create_subprocess_exec(
                rg, "--no-config", "-F", "-n", "-e", "needle", str(root / "tree"),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            return await proc.communicate()

        variants["bare `rg -F needle tree/`"] = bare_rg

    def tool(backend: str, sandbox: Sandbox | None) -> Variant:
        async def run() -> object:
            ctx = _context(ws, {"backend": backend})
            ctx.sandbox = sandbox
            out = await GrepTool().execute({"pattern": "needle", "max_results": 5000}, ctx)
            assert out.metadata["count"] == min(files, 5000), out.metadata["count"]
            return out

        return run

    if rg:
        variants["grep tool, rg backend, sandbox off"] = tool("rg", None)
        bwrap = shutil.which("bwrap")
        if bwrap:
            box = Sandbox(SandboxConfig(bwrap), ws.workspace_root)
            variants["grep tool, rg backend, sandbox on"] = tool("rg", box)
    variants["grep tool, python backend"] = tool("python", None)
    samples = await _interleaved(variants, n, warmup=2)
    first = next(iter(samples))
    base = statistics.median(samples[first])
    rows = [f"grep a {files}-file tree ({n} runs each, interleaved; ratios against {first})"]
    rows += [
        _row(name, values, base if i else None) for i, (name, values) in enumerate(samples.items())
    ]
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=200, help="read_file samples")
    parser.add_argument("--spawns", type=int, default=100, help="subprocess samples")
    parser.add_argument("--greps", type=int, default=20, help="grep samples (0: skip)")
    parser.add_argument("--grep-files", type=int, default=3000, help="files in the grep tree")
    parser.add_argument("--only-grep", action="store_true", help="run only the grep part")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="toolrelay-bench-") as tmp:
        root = Path(tmp)
        ws = WorkspaceFileAPI(root)
        loop = type(asyncio.get_running_loop()).__name__
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"python {sys.version.split()[0]}, loop {loop}, {os.cpu_count()} cpus, load {load}")
        if not args.only_grep:
            for line in await bench_read(ws, root, args.reads):
                print(line)
            for line in await bench_read_small(ws, root, args.reads):
                print(line)
            for line in await bench_spawn(ws, args.spawns):
                print(line)
        if args.greps:
            for line in await bench_grep(ws, root, args.grep_files, args.greps):
                print(line)


if __name__ == "__main__":
    asyncio.run(main())
