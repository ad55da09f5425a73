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

The order of the mounts matters: ``/tmp`` is replaced before the workspace is
bound, so a workspace under ``/tmp`` stays visible.
"""

from __future__ import annotations

import shutil


class SandboxUnavailable(Exception):
    """The sandbox was asked for but ``bwrap`` is not installed."""


def find_bwrap() -> str | None:
    """The path of ``bwrap``, or None when bubblewrap is not installed."""
    return shutil.which("bwrap")


def bwrap_prefix(workspace_root: str, cwd: str, *, bwrap: str | None = None) -> list[str]:
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
        "--bind",
        workspace_root,
        workspace_root,
        "--chdir",
        cwd,
        "--",
    ]
