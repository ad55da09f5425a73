"""The bubblewrap (``bwrap``) sandbox for shell commands.

Inside it the command sees:

- the whole file system read-only (``--ro-bind / /``), with the workspace
  bound read-write on top (``--bind ws ws``);
- a private ``/tmp`` (``--tmpfs /tmp``), a minimal ``/dev`` and its own ``/proc``;
- no network: a new network namespace holds only a down loopback
  (``--unshare-net``);
- its own PID namespace (``--unshare-pid``): when the sandbox ends, every
  process in it ends, daemonised or not;
- no capabilities (``--cap-drop ALL``). We run as root, and root with
  CAP_SYS_ADMIN could simply ``mount -o remount,rw /`` and write anywhere;
- ``--die-with-parent``: if the server dies, the sandbox dies with it.

- nothing of the ``hidden`` paths (the server's data dir with its token file
  and event log, credential folders): a folder is covered by an empty tmpfs, a
  file by ``/dev/null``, so a command cannot print a secret into the
  conversation even though everything else is readable.

The order of the mounts matters: ``/tmp`` and the hidden paths are replaced
before the workspace is bound, so a workspace under either stays visible.
"""

from __future__ import annotations

import logging
import os
import shutil

log = logging.getLogger("toolrelay.tools.shell")


class SandboxUnavailable(Exception):
    """The sandbox was asked for but ``bwrap`` is not installed."""


def find_bwrap() -> str | None:
    """The path of ``bwrap``, or None when bubblewrap is not installed."""
    return shutil.which("bwrap")


def mask_arguments(hidden: tuple[str, ...], workspace_root: str) -> list[str]:
    """bwrap arguments that cover each existing hidden path. A path that is the
    workspace or one of its ancestors is left visible (hiding it would hide the
    workspace too) and logged."""
    args: list[str] = []
    root = os.path.realpath(workspace_root)
    for raw in hidden:
        path = os.path.realpath(os.path.expanduser(raw))
        if root == path or root.startswith(path.rstrip(os.sep) + os.sep):
            log.warning("sandbox_hide entry %s contains the workspace; left visible", raw)
            continue
        if os.path.isdir(path):
            args += ["--tmpfs", path]
        elif os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    return args


def bwrap_prefix(
    workspace_root: str, cwd: str, *, hidden: tuple[str, ...] = (), bwrap: str | None = None
) -> list[str]:
    """The argv that runs what follows it inside the sandbox, in ``cwd``."""
    exe = bwrap or find_bwrap()
    if exe is None:
        raise SandboxUnavailable(
            "the sandbox is enabled but bubblewrap (bwrap) is not installed; install the "
            "'bubblewrap' package or turn the shell's sandbox option off"
        )
    return [
        exe,
        "--die-with-parent",
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        *mask_arguments(hidden, workspace_root),
        "--bind",
        workspace_root,
        workspace_root,
        "--chdir",
        cwd,
        "--",
    ]
