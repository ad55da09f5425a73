"""The one sandbox every process started on a workspace's behalf runs in.

The shell, ripgrep/grep, git, GNU patch, the regex search worker, hooks and
stdio MCP servers all start through ``Sandbox.command``; no tool builds its
own ``bwrap`` line. Inside, a process sees:

- the host file system read-only (``--ro-bind / /``), with only the
  workspace (and, when a caller asks, a scratch folder it owns) writable;
- fresh, empty ``/tmp``, ``/run`` (hence ``/var/run``) and ``/dev/shm``: no
  host unix socket (docker, dbus, ssh-agent, redis) can be reached there,
  and abstract sockets belong to the host's network namespace, which the
  sandbox leaves (``--unshare-net``) unless a caller asks for network;
- nothing of the ``hidden`` paths: the server's data dir (token file,
  databases), every config file the server read, token files and credential
  folders. A folder is covered by an empty tmpfs, a file by ``/dev/null``;
- its own PID namespace (no other process, the server's environment
  included, is visible in ``/proc``), no capabilities (``--cap-drop ALL``:
  root with CAP_SYS_ADMIN could remount ``/`` read-write), and
  ``--die-with-parent``: a ``kill -9`` of the server ends every sandboxed
  process.

Besides, in every sandbox (``SandboxConfig.files``, dispatcher/sandbox_files.py):
the admin's protected workspace globs are bound read-only over the
workspace bind when it is writable (the folders above them pinned, each
bind checked inside before the command runs; nothing is created for a
missing one), and hidden workspace globs are covered. A ``user`` token's sandbox also
covers other users' roots and other sessions' workspaces (``Isolation``).

Why hand-written: bubblewrap is the maintained engine; this module only
decides its argument list, which is our security policy.

The order of mounts matters: fresh and hidden paths are mounted first, the
workspace last, so a workspace under ``/tmp`` stays visible. Session creation
refuses a workspace that contains, or lies inside, a hidden path, so a hidden
path can never be re-exposed by the workspace bind.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from dispatcher.sandbox_files import (
    MAX_SCAN_ENTRIES,
    NO_FILES,
    TooManyMatches,
    WorkspaceGlobs,
    WorkspaceMatcher,
)

log = logging.getLogger("toolrelay.sandbox")

# Mounted empty in every sandbox: where host unix sockets and shared scratch live.
FRESH_DIRS = ("/tmp", "/run", "/dev/shm")
# The "system" view: just enough of the host to run installed programs.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_ETC = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
)
PROBE_TIMEOUT = 10.0


class SandboxUnavailable(Exception):
    """The sandbox is required but cannot run here; the message says why."""


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    """Server-wide facts every session's sandbox shares: the ``bwrap`` binary
    (already probed), the absolute, resolved paths that must stay invisible,
    and the workspace globs mounted read-only or hidden in every workspace
    (``files``: the admin's ``guardrails.protected_files`` and
    ``workspaces.shell.sandbox_hide_files``). Every ``Sandbox`` is built from
    one, so every process of the server gets the same protection."""

    bwrap: str
    hidden: tuple[str, ...] = ()
    files: WorkspaceGlobs = NO_FILES


@dataclass(frozen=True, slots=True)
class Isolation:
    """What a ``user`` token's sandbox hides besides the server's secrets:
    ``roots`` (other tokens' allowed roots, real paths, fixed for the
    session) and ``live_workspaces`` (read at each spawn: every session's
    workspace). Paths that are or lie inside this workspace stay visible."""

    roots: tuple[str, ...] = ()
    live_workspaces: Callable[[], Iterable[str]] | None = None


class Sandbox:
    """One workspace's sandbox: turns an argv into the argv that runs it inside."""

    def __init__(
        self, config: SandboxConfig, workspace_root: str, *, isolation: Isolation | None = None
    ) -> None:
        self.config = config
        self.workspace_root = os.path.realpath(workspace_root)
        self._masks = tuple(_mask_arguments(config.hidden, self.workspace_root))
        self._files = WorkspaceMatcher(config.files)
        self._isolation = isolation

    def command(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        network: bool = False,
        writable_workspace: bool = True,
        extra_writable: Iterable[str] = (),
        extra_readable: Iterable[str] = (),
        host_view: Literal["full", "system"] = "full",
    ) -> list[str]:
        """The argv that runs ``argv`` in the sandbox with ``cwd`` (default: the
        workspace root) as its working directory.

        ``network``: keep the host's network (only for tools whose config says
        so: a network-declared MCP server). ``writable_workspace=False`` binds
        the workspace read-only (git's read subcommands, searches).
        ``extra_writable``: folders outside the workspace the process may
        write (a scratch tree the caller created and owns).
        ``extra_readable``: paths made visible again after the fresh mounts
        (a file the caller placed under ``/tmp`` for the process to read).
        ``host_view``: ``"full"`` shows the host read-only (minus the hidden
        paths): what a shell command expects. ``"system"`` shows only the
        installed programs and libraries (``/usr``, ``/lib*``, a few ``/etc``
        files) plus the workspace: for programs we start ourselves (ripgrep,
        grep, git, patch, the regex worker), so that even a symlink swapped
        in under their feet leads nowhere outside the workspace.
        """
        ws = self.workspace_root
        args = self._namespaces(network=network, host_view=host_view)
        for path in FRESH_DIRS:
            args += ["--tmpfs", path]
        for path in extra_readable:
            real = os.path.realpath(path)
            args += ["--ro-bind", real, real]
        # Masks after the re-exposed paths: a folder made visible again must
        # never uncover a hidden path inside it.
        args += self._masks
        args += self._isolation_masks()
        args += ["--bind" if writable_workspace else "--ro-bind", ws, ws]
        for path in extra_writable:
            real = os.path.realpath(path)
            args += ["--bind", real, real]
        # After the workspace bind, which they narrow.
        binds, identities = self._file_binds(writable_workspace)
        args += binds
        args += ["--chdir", cwd or ws, "--", *_verified(identities, argv)]
        return args

    def _namespaces(self, *, network: bool, host_view: Literal["full", "system"]) -> list[str]:
        """bwrap with fresh namespaces (the network's unless ``network``), no
        capabilities, the host view read-only, and fresh ``/dev`` and ``/proc``."""
        root_view = ["--ro-bind", "/", "/"] if host_view == "full" else _system_view()
        args = [
            self.config.bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--cap-drop",
            "ALL",
            *root_view,
            "--dev",
            "/dev",
            "--proc",
            "/proc",
        ]
        if not network:
            args.append("--unshare-net")
        return args

    def _isolation_masks(self) -> list[str]:
        """An empty tmpfs over each other user's root and each other session's
        workspace (a user token's sessions only). One that contains this
        workspace is covered too: the workspace bind comes after it."""
        iso = self._isolation
        if iso is None:
            return []
        ws = self.workspace_root
        ws_prefix = ws.rstrip(os.sep) + os.sep
        live = iso.live_workspaces() if iso.live_workspaces is not None else ()
        args: list[str] = []
        seen: set[str] = set()
        for path in (*iso.roots, *live):
            if path in seen or path == ws or path.startswith(ws_prefix) or path == os.sep:
                continue
            seen.add(path)
            if os.path.isdir(path):
                args += ["--tmpfs", path]
        return args

    def _file_binds(self, writable_workspace: bool) -> tuple[list[str], list[tuple[str, int, int]]]:
        """Mounts for the protected and hidden workspace globs (see
        dispatcher/sandbox_files.py), and the identities to verify inside."""
        if not self._files:
            return [], []
        try:
            found = self._files.expand(self.workspace_root, read_only=writable_workspace)
        except TooManyMatches as exc:
            raise SandboxUnavailable(str(exc)) from None
        if found.truncated:
            log.warning(
                "sandbox: the workspace %s has more than %d entries; protected and hidden "
                "file patterns were matched against the first ones only",
                self.workspace_root,
                MAX_SCAN_ENTRIES,
            )
        args: list[str] = []
        identities = list(found.identities)
        if writable_workspace:
            # Pins first: a folder that is a mount point cannot be renamed away.
            for path in found.pinned:
                args += ["--bind", path, path]
            for path in found.read_only:
                args += ["--ro-bind", path, path]
        else:
            # Read-only already; the sources below are trusted (/dev/null, tmpfs).
            identities = []
        for path in found.hidden_files:
            args += ["--ro-bind", "/dev/null", path]
        for path in found.hidden_dirs:
            args += ["--tmpfs", path, "--remount-ro", path]
        return args, identities


# Runs before the command, inside the sandbox: the mounts bubblewrap made
# from workspace paths must be the files Python looked at (same device and
# inode), else a name was swapped for a link meanwhile and the mount may
# show something else: nothing runs. The paths are positional arguments
# (never spliced into the script); ``eval`` only sees "${N}" references.
_VERIFY = r"""want=$1; n=$2; shift 2
refs=; i=1
while [ "$i" -le "$n" ]; do refs="$refs \"\${$i}\""; i=$((i+1)); done
got=$(eval "%s -L -c %%d:%%i -- $refs" 2>/dev/null) || got=
shift "$n"
if [ "$(echo $got)" != "$want" ]; then
  echo "toolrelay sandbox: a protected path changed while the sandbox started; nothing ran" >&2
  exit 126
fi
exec "$@"
"""
STAT = shutil.which("stat") or "/usr/bin/stat"
SH = "/bin/sh"


def _verified(identities: Sequence[tuple[str, int, int]], argv: Sequence[str]) -> list[str]:
    """``argv``, preceded by the in-sandbox check of ``identities`` when any."""
    if not identities:
        return list(argv)
    want = " ".join(f"{dev}:{ino}" for _, dev, ino in identities)
    paths = [path for path, _, _ in identities]
    script = _VERIFY % STAT
    return [SH, "-c", script, "toolrelay-verify", want, str(len(paths)), *paths, *argv]


def _system_view() -> list[str]:
    """bwrap arguments for the "system" view: programs and libraries only.
    Merged-/usr systems have /bin, /lib... as symlinks into /usr: recreate them."""
    args: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in SYSTEM_ETC:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


def _mask_arguments(hidden: Iterable[str], workspace_root: str) -> list[str]:
    """bwrap arguments covering each existing hidden path. A hidden path that
    is, contains or lies inside the workspace cannot be hidden without hiding
    (or re-exposing) the workspace: session creation refuses such
    workspaces, so meeting one here is a bug and fails loudly."""
    args: list[str] = []
    ws_prefix = workspace_root.rstrip(os.sep) + os.sep
    for raw in hidden:
        path = os.path.realpath(os.path.expanduser(raw))
        prefix = path.rstrip(os.sep) + os.sep
        if path == workspace_root or ws_prefix.startswith(prefix) or path.startswith(ws_prefix):
            raise SandboxUnavailable(
                f"the workspace {workspace_root} overlaps the hidden path {path}; "
                "refusing to start a sandbox that would expose it"
            )
        if os.path.isdir(path):
            args += ["--tmpfs", path]
        elif os.path.lexists(path):
            args += ["--ro-bind", "/dev/null", path]
    return args


def reexposed_folders(paths: Iterable[str]) -> list[str]:
    """Folders to show again (read-only) so that trusted, admin-configured
    paths living under a fresh mount keep working in the sandbox: for each
    existing absolute path under ``/tmp``, ``/run`` or ``/dev/shm`` (as given
    and resolved), the folder just below that mount (``/tmp/ci`` for
    ``/tmp/ci/.venv/bin/python``: a venv needs its whole tree). Hidden paths
    inside them stay hidden (masks are applied after these binds)."""
    found: dict[str, None] = {}
    for raw in paths:
        if not raw or not os.path.isabs(raw) or not os.path.lexists(raw):
            continue
        for candidate in (os.path.abspath(raw), os.path.realpath(raw)):
            for fresh in FRESH_DIRS:
                prefix = fresh + os.sep
                if candidate.startswith(prefix):
                    top = candidate[len(prefix) :].split(os.sep, 1)[0]
                    found.setdefault(os.path.join(fresh, top), None)
    return list(found)


def probe(bwrap: str | None = None, hidden: Iterable[str] = ()) -> tuple[str | None, str]:
    """Run the sandbox once (``true`` inside it, with ``hidden`` masked as a
    session's sandbox would). Returns (path of bwrap, "") when it works, or
    (None, the reason) when it does not. Blocking: call it at start-up, off
    the event loop."""
    exe = bwrap or shutil.which("bwrap")
    if exe is None:
        return None, "bubblewrap (bwrap) is not installed"
    # A scratch folder of its own as the workspace: the server's cwd may hold
    # the data dir (the README's layout), which a workspace must not contain.
    with tempfile.TemporaryDirectory(prefix="toolrelay-probe-") as scratch:
        try:
            argv = Sandbox(SandboxConfig(exe, tuple(hidden)), scratch).command(
                ["/bin/sh", "-c", "true"], writable_workspace=False
            )
        except SandboxUnavailable as exc:
            return None, str(exc)
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                timeout=PROBE_TIMEOUT,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"bwrap could not run: {exc}"
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, f"bwrap failed: {reason[-1] if reason else f'exit {done.returncode}'}"
    return exe, ""


def configure(
    setting: bool | None,
    hidden: Iterable[str],
    *,
    bwrap: str | None = None,
    files: WorkspaceGlobs = NO_FILES,
    unasked: Sequence[str] = (),
) -> tuple[SandboxConfig | None, str]:
    """The server's sandbox decision, made once at start-up (blocking: probes).

    ``setting`` is ``workspaces.shell.sandbox``: None (auto) turns the sandbox
    on wherever the probe passes, False turns it off, True requires it.
    ``files``: the workspace globs every sandbox mounts read-only or hides.
    ``unasked``: what the config makes the server run on a workspace's behalf
    without asking anyone (hooks, quality gates, stdio MCP servers, named as
    their config keys). Returns (the config, "") when on, (None, why it is
    off) when off; raises SandboxUnavailable (one line, naming the probe's
    reason) when it is required but cannot run, and when it is on "auto",
    cannot run and ``unasked`` is not empty: those would run unsandboxed
    without anyone having chosen that (``false`` is that choice)."""
    if setting is False:
        return None, "turned off by workspaces.shell.sandbox: false"
    paths = hidden_paths(hidden)
    exe, reason = probe(bwrap, paths)
    if exe is None:
        if setting is True:
            raise SandboxUnavailable(
                f"workspaces.shell.sandbox is true but the sandbox cannot run here: {reason}. "
                "Install bubblewrap (Debian/Ubuntu package 'bubblewrap') and make sure "
                "unprivileged user namespaces are allowed, or set "
                "workspaces.shell.sandbox: false to run commands unsandboxed (each then "
                "asks for a confirmation)"
            )
        if unasked:
            raise SandboxUnavailable(
                f"the sandbox cannot run here ({reason}) and {', '.join(unasked)} would run "
                "workspace content unsandboxed without asking: make bubblewrap work (the "
                "README's Docker section says what a container needs) or set "
                "workspaces.shell.sandbox: false to run them unsandboxed knowingly"
            )
        return None, reason
    return SandboxConfig(exe, paths, files), ""


def hidden_paths(*groups: Iterable[str]) -> tuple[str, ...]:
    """Absolute, resolved, de-duplicated paths from several lists (``~`` expanded)."""
    seen: dict[str, None] = {}
    for group in groups:
        for raw in group:
            seen.setdefault(os.path.realpath(os.path.expanduser(raw)), None)
    return tuple(seen)
