"""The fallback applier: GNU ``patch`` run on a private copy of the files.

``patch`` tolerates context that drifted a little (fuzz) where the built-in
applier wants an exact match. It never runs inside the workspace: the files
the diff names are copied into a temporary tree, the (re-rendered, exactly
counted) diff is applied there, and only when every hunk succeeded are the
results read back. So a failing hunk can never leave a file half patched.

When the session has a sandbox, ``patch`` runs in it with the "system" host
view (installed programs only, the workspace read-only) and the scratch tree
as its one writable folder: the sandbox's ``/tmp`` is a fresh tmpfs, and
``extra_writable`` binds the scratch after it. Without a sandbox it runs on
the host, still as its own process group guarded by the child reaper
(through ProcessRunner), so it dies with the server.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping

from dispatcher.process import ProcessRunner
from dispatcher.sandbox import Sandbox, SandboxUnavailable
from dispatcher.tools.patch.diff_parse import FilePatch, render_unified_diff

PATCH_TIMEOUT = 30.0
# patch prints a line or two per hunk; more than this is kept as head and tail.
OUTPUT_LIMIT = 256 * 1024


class SystemPatchFailed(Exception):
    """``patch`` is missing, failed, or did not finish in time; the message says which."""


def _no_stream(stream: str, text: str) -> None:
    """patch's messages are returned whole, not streamed."""


async def apply_with_system_patch(
    files: list[FilePatch],
    originals: Mapping[str, bytes | None],
    *,
    sandbox: Sandbox | None = None,
) -> tuple[dict[str, bytes | None], str]:
    """New content per path (None: the file is gone) and what ``patch`` said.

    ``files`` must already name workspace-relative, confined paths on both
    sides; ``originals`` holds the current bytes of each (None: absent).
    ``sandbox``: the session's sandbox, or None when it is off.
    """
    exe = shutil.which("patch")
    if exe is None:
        raise SystemPatchFailed("the system 'patch' program is not installed")
    with tempfile.TemporaryDirectory(prefix="toolrelay-patch-") as scratch:
        scratch, tree, diff_path = _prepare(scratch, files, originals)
        argv = _patch_argv(exe, diff_path, tree, scratch, sandbox)
        messages = await _run_patch(argv, tree)
        results = _collect(tree, originals)
        return results, messages


def _patch_argv(
    exe: str, diff_path: str, tree: str, scratch: str, sandbox: Sandbox | None
) -> list[str]:
    """patch applying ``diff_path`` in ``tree``; in the sandbox, only the
    scratch folder writable and only the installed system visible."""
    argv = [
        exe,
        "-p0",
        "--batch",
        "--forward",
        "--no-backup-if-mismatch",
        "--reject-file=-",
        "-i",
        diff_path,
    ]
    if sandbox is None:
        return argv
    try:
        return sandbox.command(
            argv,
            cwd=tree,
            writable_workspace=False,
            extra_writable=[scratch],
            host_view="system",
        )
    except SandboxUnavailable as exc:
        raise SystemPatchFailed(str(exc)) from exc


async def _run_patch(argv: list[str], tree: str) -> str:
    """Run patch to its end; what it said, or SystemPatchFailed."""
    runner = ProcessRunner(
        argv,
        cwd=tree,
        env={"PATH": os.defpath, "LC_ALL": "C"},
        timeout=PATCH_TIMEOUT,
        output_limit=OUTPUT_LIMIT,
        stream_limit=0,
        emit=_no_stream,
        cancel_event=asyncio.Event(),
        kill_grace=0.0,
    )
    try:
        result = await runner.run()
    except OSError as exc:
        raise SystemPatchFailed(f"patch could not start: {exc.strerror}") from exc
    if result.timed_out:
        raise SystemPatchFailed(f"patch did not finish within {PATCH_TIMEOUT:g} s")
    messages = "\n".join(
        part for part in (result.stdout.text().strip(), result.stderr.text().strip()) if part
    )
    if result.exit_code != 0:
        raise SystemPatchFailed(messages or f"patch exited with status {result.exit_code}")
    return messages


def _prepare(
    scratch: str, files: list[FilePatch], originals: Mapping[str, bytes | None]
) -> tuple[str, str, str]:
    """Copy the current files into a private tree and write the diff beside it.
    Returns resolved paths (scratch, tree, diff): inside a sandbox only the
    resolved scratch folder exists, not a symlink that leads to it."""
    scratch = os.path.realpath(scratch)
    tree = os.path.join(scratch, "tree")
    os.mkdir(tree)
    for rel, data in originals.items():
        if data is None:
            continue
        dest = os.path.join(tree, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as fh:
            fh.write(data)
    diff_path = os.path.join(scratch, "change.diff")
    with open(diff_path, "w", encoding="utf-8", errors="surrogateescape") as fh:
        fh.write(render_unified_diff(files))
    return scratch, tree, diff_path


def _collect(tree: str, originals: Mapping[str, bytes | None]) -> dict[str, bytes | None]:
    """Read back each result. patch has exited and nothing else writes the
    private scratch, but a diff can make patch leave a symbolic link: a path
    that resolves anywhere but to itself, or is not a regular file, is refused,
    never followed out of the tree."""
    results: dict[str, bytes | None] = {}
    for rel in originals:
        dest = os.path.join(tree, rel)
        if not os.path.lexists(dest):
            results[rel] = None
            continue
        if os.path.realpath(dest) != os.path.normpath(dest):
            raise SystemPatchFailed(f"patch left {rel!r} as a symbolic link; refused")
        fd = os.open(dest, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SystemPatchFailed(f"patch left {rel!r} as something other than a file")
            results[rel] = fh.read()
    return results
