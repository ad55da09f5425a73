"""The fallback applier: GNU ``patch`` run on a private copy of the files.

``patch`` tolerates context that drifted a little (fuzz) where the built-in
applier wants an exact match. It never runs inside the workspace: the files
the diff names are copied into a temporary tree, the (re-rendered, exactly
counted) diff is applied there, and only when every hunk succeeded are the
results read back. So a failing hunk can never leave a file half patched.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping

from dispatcher.tools.diff_parse import FilePatch, render_unified_diff

PATCH_TIMEOUT = 30.0


class SystemPatchError(Exception):
    """``patch`` is missing, failed, or did not finish in time; the message says which."""


async def apply_with_system_patch(
    files: list[FilePatch], originals: Mapping[str, bytes | None]
) -> tuple[dict[str, bytes | None], str]:
    """New content per path (None: the file is gone) and what ``patch`` said.

    ``files`` must already name workspace-relative, confined paths on both
    sides; ``originals`` holds the current bytes of each (None: absent).
    """
    exe = shutil.which("patch")
    if exe is None:
        raise SystemPatchError("the system 'patch' program is not installed")
    with tempfile.TemporaryDirectory(prefix="toolrelay-patch-") as scratch:
        tree, diff_path = _prepare(scratch, files, originals)
        proc = await asyncio.create_subprocess_exec(
            exe,
            "-p0",
            "--batch",
            "--forward",
            "--no-backup-if-mismatch",
            "--reject-file=-",
            "-i",
            diff_path,
            cwd=tree,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={"PATH": os.defpath, "LC_ALL": "C"},
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(PATCH_TIMEOUT):
                out, _ = await proc.communicate()
        except TimeoutError:
            await _kill(proc)
            raise SystemPatchError(f"patch did not finish within {PATCH_TIMEOUT:g} s") from None
        except asyncio.CancelledError:
            await _kill(proc)
            raise
        messages = out.decode("utf-8", errors="replace").strip()
        if proc.returncode != 0:
            raise SystemPatchError(messages or f"patch exited with status {proc.returncode}")
        results = _collect(tree, originals)
        return results, messages


def _prepare(
    scratch: str, files: list[FilePatch], originals: Mapping[str, bytes | None]
) -> tuple[str, str]:
    """Copy the current files into a private tree and write the diff beside it."""
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
    return tree, diff_path


def _collect(tree: str, originals: Mapping[str, bytes | None]) -> dict[str, bytes | None]:
    results: dict[str, bytes | None] = {}
    for rel in originals:
        dest = os.path.join(tree, rel)
        if os.path.isfile(dest):
            with open(dest, "rb") as fh:
                results[rel] = fh.read()
        else:
            results[rel] = None
    return results


async def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await proc.wait()
