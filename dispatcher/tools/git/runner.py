"""How the git tools run git: on the workspace's own repository only, with a
configuration that cannot make git run a program taken from workspace content.

Threat: everything in the workspace is untrusted, ``.git`` included (a cloned
repository, or a sandboxed shell command, can write ``.git/config``). Files
at the workspace root (``HEAD``, ``config``, ``objects/``, ``refs/``) can make
the workspace itself look like a bare repository, and a repository's config
can name programs that git runs from an innocent ``git status`` (filters,
``core.fsmonitor``, ``core.pager``, hooks, ``diff.external``, textconv,
credential helpers, ``core.sshCommand``...) or move the work tree elsewhere.

What every call does, in this order:

1. **Which repository.** ``<workspace>/.git`` must be a real directory
   (``lstat``: not a symlink, not a ``gitdir:`` file of a linked worktree or
   submodule), and git is told so explicitly: ``GIT_DIR=<ws>/.git`` and
   ``GIT_WORK_TREE=<ws>`` (the environment beats ``core.worktree``), so git
   never discovers a repository by itself. Refused before anything runs:
   ``.git/commondir`` (the repository's refs and objects would live
   elsewhere), ``objects/info/alternates`` (objects read from elsewhere), and
   a symlink among the entries of ``.git`` or ``.git/objects`` (reads and
   writes through it would leave the workspace). Deeper symlinks (a loose
   ref, a pack file) are not walked for, to keep the check cheap on big
   repositories: inside the sandbox they lead nowhere, since git sees only
   the workspace and the installed system.

2. **Whose configuration.** The environment is built from scratch (no
   ``GIT_*``, ``SSH_*`` or pager variable of the server leaks in), with
   ``GIT_CONFIG_NOSYSTEM=1``, ``GIT_CONFIG_GLOBAL=/dev/null``,
   ``GIT_ATTR_NOSYSTEM=1`` and ``HOME``/``XDG_CONFIG_HOME`` set to
   ``/dev/null``: a path under which no file can ever exist, so no crafted
   ``~/.gitconfig``, ``~/.config/git/attributes`` or ``ignore`` is read.
   ``PATH`` keeps only absolute folders outside the workspace, so neither
   ``git`` nor anything git starts is looked up in workspace content.

3. **Pinned keys.** The repository's own config is still read (it holds the
   branch setup, ``user.*``...), so every key that names a program or a path
   outside the repository is pinned on the command line (``-c``, which beats
   every config file): see ``STATIC_PINS``. Keys whose names embed a driver
   or remote chosen by the repository (``filter.<driver>.clean``,
   ``diff.<driver>.textconv``, ``merge.<driver>.driver``,
   ``credential.<url>.helper``, ``pager.<cmd>``, ``alias.<name>``...) cannot
   be listed in advance: each call first lists the configuration git will
   read (``git config --local --no-includes --list``, plus ``--worktree``
   when ``extensions.worktreeConfig`` is on; system and global config are
   off; this runs no program, and ``--local`` fails unless ``.git`` is a
   valid repository) and overrides every such key it finds with an empty
   value (``filter.<d>.required=false`` too, so an emptied filter is not
   fatal).
   Empty filter commands are documented as "no filter"; an emptied textconv
   or external diff would fail loudly if used, and the diff tools also pass
   ``--no-ext-diff --no-textconv``. These pairs travel in
   ``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n`` rather
   than ``-c``, because a subsection name may contain ``=``, which ``-c``
   cannot carry.

   ``include.path`` and ``includeIf.<cond>.path``: git has no switch that
   turns includes off for the repository config, ``-c`` cannot remove them,
   and an ``includeIf "onbranch:..."`` can change meaning halfway through a
   tool call (``git_branch switch``). Listing the included files ourselves
   would race with that. Decision: a repository whose config uses includes is
   refused with a clear error.

   Network: ``protocol.allow=never`` plus an empty ``GIT_ALLOW_PROTOCOL``
   (the variable overrides every ``protocol.<name>.allow`` and covers remote
   helpers), so a promisor remote cannot trigger a lazy fetch through
   ``ext::``, a remote helper or a local ``uploadpack`` command. Signing is off (``commit.gpgSign``,
   ``tag.gpgSign``, ``log.showSignature``), hooks point at ``/dev/null``,
   ``gc.auto=0`` and ``maintenance.auto=false`` start no background git.
   Submodules: the read tools pass ``--ignore-submodules=all`` (git would
   otherwise run ``git status`` inside each submodule, whose own config we
   have not vetted), and ``diff.ignoreSubmodules=all`` is pinned for the
   rest; ``submodule.<name>.ignore`` keys found in the config are pinned to
   ``all`` as well, and for the write tools so are the names ``.gitmodules``
   declares (it can set ``ignore = none`` per submodule, which beats the
   default for ``commit``, ``add`` and ``switch``).

4. **Where.** With a sandbox (``context.sandbox``), git runs inside it with
   the ``system`` host view (only the installed programs and the workspace
   exist), the workspace read-only for the read tools and writable for the
   write tools. ``GIT_OPTIONAL_LOCKS=0`` keeps status and diff from
   rewriting the index. Without a sandbox the same environment and pins apply.

What this does not guarantee: the config listing and the command that
follows are two processes; a process writing ``.git/config`` between them (a
concurrent shell command) could add a driver the second one honours. Inside
the sandbox such a program runs in the same sandbox the shell already had;
without the sandbox that window, and the deeper ``.git`` symlinks of step
1, are the residual risk.

The model supplies values (a revision, a path), never flags: values go after
``--end-of-options`` or ``--``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dispatcher.errors import ToolCancelled, ToolExecutionError, ToolTimeout, ToolValidationFailed
from dispatcher.process import ProcessRunner
from dispatcher.tool import ToolContext

if TYPE_CHECKING:
    from dispatcher.sandbox import Sandbox
    from dispatcher.workspace import WorkspaceFileAPI

GIT_TIMEOUT = 60.0
STRUCTURED_LIMIT = 64 * 1024 * 1024
CONFIG_LIMIT = 4 * 1024 * 1024
# A path under which nothing can exist: HOME and XDG_CONFIG_HOME point here.
NO_HOME = "/dev/null"

NOT_A_REPOSITORY = "the workspace is not a git repository (no .git directory at its root)"

# Pinned on the command line for every call. Program keys get an empty value
# (or, where git special-cases one, the value that means "nothing": ":" for
# editors, "cat" for the pager), path keys /dev/null.
STATIC_PINS: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", ":"),
    ("sequence.editor", ":"),
    ("core.askPass", ""),
    ("core.sshCommand", ""),
    ("core.gitProxy", ""),
    ("core.alternateRefsCommand", ""),
    ("core.attributesFile", "/dev/null"),
    ("core.excludesFile", "/dev/null"),
    ("core.untrackedCache", "false"),
    ("diff.external", ""),
    ("diff.orderFile", "/dev/null"),
    ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"),
    ("submodule.recurse", "false"),
    ("credential.helper", ""),
    ("gpg.program", ""),
    ("gpg.openpgp.program", ""),
    ("gpg.ssh.program", ""),
    ("gpg.x509.program", ""),
    ("gpg.ssh.defaultKeyCommand", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("protocol.allow", "never"),
    ("uploadpack.packObjectsHook", ""),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("color.ui", "false"),
)

# Variable names (the part after the last dot, lower case, as
# ``git config --list`` prints them) that name a program in some section.
PROGRAM_VARIABLES = frozenset(
    {
        "alternaterefscommand",
        "askpass",
        "browser",
        "cccmd",
        "clean",
        "cmd",
        "command",
        "defaultkeycommand",
        "difffilter",
        "driver",
        "editor",
        "external",
        "fsmonitor",
        "gitproxy",
        "headercmd",
        "helper",
        "hookspath",
        "httpd",
        "packobjectshook",
        "pager",
        "process",
        "program",
        "proxy",
        "receivepack",
        "sendmailcmd",
        "smtpserver",
        "smudge",
        "sshcommand",
        "textconv",
        "tocmd",
        "uploadpack",
    }
)
# Sections whose every key is a program or a command line.
PROGRAM_SECTIONS = frozenset({"alias", "pager"})
# Sections whose keys load more configuration: refused (see the module docstring).
INCLUDE_SECTIONS = frozenset({"include", "includeif"})


@dataclass(slots=True)
class GitResult:
    """What one git command printed, and its status."""

    stdout: bytes
    stderr: str
    exit_code: int
    truncated: bool
    text: str  # stdout as text, head and tail kept when truncated


@dataclass(slots=True)
class RepoConfig:
    """The repository's configuration as git will read it (includes not
    followed), and the overrides that neutralise it."""

    values: dict[str, str] = field(default_factory=dict)
    overrides: dict[str, str] = field(default_factory=dict)

    def get(self, key: str) -> str | None:
        return self.values.get(key.lower())


def _discard(stream: str, text: str) -> None:
    return None


def check_repository(root: str) -> str:
    """The workspace's own ``.git`` directory, or a ToolExecutionError saying
    why it will not be used. Looks with ``lstat`` only: nothing is followed."""
    git_dir = os.path.join(root, ".git")
    try:
        st = os.lstat(git_dir)
    except FileNotFoundError:
        raise ToolExecutionError(
            f"{NOT_A_REPOSITORY}; create one with `git init` through the shell tool"
        ) from None
    if stat.S_ISLNK(st.st_mode):
        raise ToolExecutionError(
            f"{NOT_A_REPOSITORY}: .git is a symbolic link, and the git tools only use a "
            ".git directory that lies inside the workspace"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise ToolExecutionError(
            f"{NOT_A_REPOSITORY}: .git is a file (a linked worktree's or submodule's "
            "`gitdir:` pointer), and the git tools only use a .git directory that lies "
            "inside the workspace"
        )
    _refuse_links(git_dir, ".git")
    if os.path.lexists(os.path.join(git_dir, "commondir")):
        raise ToolExecutionError(
            "the git tools refuse this repository: .git/commondir makes git use refs and "
            "objects outside the workspace"
        )
    objects = os.path.join(git_dir, "objects")
    if os.path.isdir(objects) and not os.path.islink(objects):
        _refuse_links(objects, ".git/objects")
        if os.path.lexists(os.path.join(objects, "info", "alternates")):
            raise ToolExecutionError(
                "the git tools refuse this repository: .git/objects/info/alternates makes "
                "git read objects from outside the workspace"
            )
    return git_dir


def _refuse_links(folder: str, shown: str) -> None:
    try:
        entries = list(os.scandir(folder))
    except OSError as exc:
        raise ToolExecutionError(f"cannot read {shown}: {exc.strerror}") from None
    for entry in entries:
        if entry.is_symlink():
            raise ToolExecutionError(
                f"the git tools refuse this repository: {shown}/{entry.name} is a symbolic "
                "link, which could lead git outside the workspace"
            )


def _truthy(value: str | None) -> bool:
    # git's boolean spellings; a value-less key means true.
    return value is None or value.strip().lower() in ("true", "yes", "on", "1")


def safe_path(root: str) -> str:
    """The server's PATH without relative folders or folders inside the
    workspace: programs are never looked up in workspace content."""
    prefix = root.rstrip(os.sep) + os.sep
    kept = [
        p
        for p in os.environ.get("PATH", os.defpath).split(os.pathsep)
        if os.path.isabs(p) and p != root and not (p.rstrip(os.sep) + os.sep).startswith(prefix)
    ]
    return os.pathsep.join(kept) or "/usr/bin:/bin"


def parse_config_list(raw: bytes) -> list[tuple[str, str, str | None]]:
    """``git config --list --show-scope -z`` as (scope, key, value) triples; a
    value-less boolean key has value None."""
    out: list[tuple[str, str, str | None]] = []
    fields = raw.split(b"\x00")
    for i in range(0, len(fields) - 1, 2):
        scope = fields[i].decode("utf-8", "replace")
        entry = fields[i + 1].decode("utf-8", "replace")
        key, sep, value = entry.partition("\n")
        out.append((scope, key, value if sep else None))
    return out


def neutralising_overrides(entries: Sequence[tuple[str, str, str | None]]) -> dict[str, str]:
    """The overrides for every program-naming key the repository config sets;
    raises when it uses includes."""
    overrides: dict[str, str] = {}
    for scope, key, _value in entries:
        if scope == "command":
            continue  # our own pins
        section, _, rest = key.partition(".")
        section = section.lower()
        subsection, _, variable = rest.rpartition(".")
        variable = variable.lower()
        if section in INCLUDE_SECTIONS:
            raise ToolExecutionError(
                f"the git tools refuse this repository: its config sets {key!r}, and "
                "included config files cannot be vetted (remove the include from .git/config)"
            )
        if section in PROGRAM_SECTIONS or variable in PROGRAM_VARIABLES:
            overrides[key] = ""
        if section == "filter" and subsection:
            # Every driver the config defines, whichever key it set: an emptied
            # filter means "no filter", and must not be fatal.
            base = f"filter.{subsection}."
            overrides.update({base + "clean": "", base + "smudge": "", base + "process": ""})
            overrides[base + "required"] = "false"
        elif section == "diff" and subsection:
            overrides[f"diff.{subsection}.textconv"] = ""
            overrides[f"diff.{subsection}.command"] = ""
        elif section == "submodule" and subsection:
            overrides[f"submodule.{subsection}.ignore"] = "all"
            overrides[f"submodule.{subsection}.update"] = "none"  # "!command" runs one
    return overrides


class GitRunner:
    """Runs git in one workspace; ``terminate()`` stops the running command.

    ``writable``: whether the command may write the workspace (and ``.git``);
    inside the sandbox the workspace is mounted read-only otherwise. A tool
    call's runner comes from ``of(context)``; a stage before the call (the
    effects of a branch switch) builds one from the workspace and sandbox."""

    def __init__(
        self,
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        cancel_event: asyncio.Event | None = None,
        writable: bool = False,
    ) -> None:
        self.sandbox = sandbox
        self.cancel_event = cancel_event if cancel_event is not None else asyncio.Event()
        self.root = workspace.workspace_root
        self.writable = writable
        self._runner: ProcessRunner | None = None
        self._config: RepoConfig | None = None
        self._path = safe_path(self.root)
        self._git = shutil.which("git", path=self._path) or "git"

    @classmethod
    def of(cls, context: ToolContext, *, writable: bool = False) -> GitRunner:
        """The runner of one tool call: its workspace, sandbox and cancellation."""
        return cls(
            context.workspace_files,
            sandbox=context.sandbox,
            cancel_event=context.cancel_event,
            writable=writable,
        )

    def _env(self) -> dict[str, str]:
        env = {k: os.environ[k] for k in ("TZ",) if k in os.environ}
        env.update(
            {
                "PATH": self._path,
                "HOME": NO_HOME,
                "XDG_CONFIG_HOME": NO_HOME,
                "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8",
                "GIT_DIR": os.path.join(self.root, ".git"),
                "GIT_WORK_TREE": self.root,
                "GIT_CEILING_DIRECTORIES": os.path.dirname(self.root),
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_SYSTEM": os.devnull,
                "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_ATTR_NOSYSTEM": "1",
                "GIT_ALTERNATE_OBJECT_DIRECTORIES": "",
                # An empty allow-list: every transport (file, ext::, remote
                # helpers) is refused, whatever protocol.<name>.allow says.
                "GIT_ALLOW_PROTOCOL": "",
                "GIT_PROTOCOL_FROM_USER": "0",
                "GIT_NO_LAZY_FETCH": "1",
                "GIT_OPTIONAL_LOCKS": "0",
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_LITERAL_PATHSPECS": "1",
                "GIT_PAGER": "cat",
                "GIT_EDITOR": ":",
            }
        )
        return env

    def _argv(self, args: Sequence[str]) -> list[str]:
        argv = [self._git, "--no-pager"]
        for key, value in (*STATIC_PINS, ("core.worktree", self.root)):
            argv += ["-c", f"{key}={value}"]
        argv += list(args)
        sandbox = self.sandbox
        if sandbox is None:
            return argv
        return sandbox.command(
            argv, cwd=self.root, writable_workspace=self.writable, host_view="system"
        )

    async def config(self) -> RepoConfig:
        """Checks the repository and reads its configuration (once per runner)."""
        if self._config is None:
            check_repository(self.root)
            # --local fails unless GIT_DIR is a valid repository, which makes
            # this listing the validity check as well (a plain listing would
            # succeed on an empty .git, and `git diff` then turns --no-index).
            entries = await self._list_config("--local")
            local = {key.lower(): value for _, key, value in entries}
            if _truthy(local.get("extensions.worktreeconfig", "false")):
                entries += await self._list_config("--worktree")
            config = RepoConfig(overrides=neutralising_overrides(entries))
            if self.writable:
                # Commands we cannot pass --ignore-submodules to (commit's
                # "nothing to commit" status, add, switch) honour a
                # submodule.<name>.ignore from .gitmodules over our default.
                for name in await self._submodule_names():
                    config.overrides[f"submodule.{name}.ignore"] = "all"
                    config.overrides[f"submodule.{name}.update"] = "none"
            for scope, key, value in entries:
                if scope != "command":
                    config.values[key.lower()] = value if value is not None else "true"
            self._config = config
        return self._config

    async def _list_config(self, which: str) -> list[tuple[str, str, str | None]]:
        listed = await self._exec(
            ["config", which, "--no-includes", "--list", "--show-scope", "-z"],
            output_limit=CONFIG_LIMIT,
            extra_env=None,
            check=True,
        )
        if listed.truncated:
            raise ToolExecutionError(
                "the git tools refuse this repository: its configuration is larger "
                f"than {CONFIG_LIMIT // (1024 * 1024)} MiB"
            )
        return parse_config_list(listed.stdout)

    async def _submodule_names(self) -> list[str]:
        """The submodule names .gitmodules declares, read where git reads it:
        the work tree's file, else the index's, else HEAD's."""
        path = os.path.join(self.root, ".gitmodules")
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise ToolExecutionError(
                "the git tools refuse this repository: .gitmodules is a symbolic link"
            )
        sources = [["--file", path]] if st is not None else []
        sources += [["--blob", ":.gitmodules"], ["--blob", "HEAD:.gitmodules"]]
        for source in sources:
            listed = await self._exec(
                ["config", *source, "--no-includes", "--name-only", "--list", "-z"],
                output_limit=CONFIG_LIMIT,
                extra_env=None,
                check=source[0] == "--file",
            )
            if listed.exit_code != 0:
                continue
            names: dict[str, None] = {}
            for raw in listed.stdout.split(b"\x00"):
                key = raw.decode("utf-8", "replace")
                section, _, rest = key.partition(".")
                name, _, _variable = rest.rpartition(".")
                if section.lower() == "submodule" and name:
                    names.setdefault(name, None)
            return list(names)
        return []

    async def run(
        self,
        args: Sequence[str],
        *,
        output_limit: int = STRUCTURED_LIMIT,
        extra_env: dict[str, str] | None = None,
        check: bool = True,
    ) -> GitResult:
        config = await self.config()
        env = dict(extra_env or {})
        env["GIT_CONFIG_COUNT"] = str(len(config.overrides))
        for i, (key, value) in enumerate(config.overrides.items()):
            env[f"GIT_CONFIG_KEY_{i}"] = key
            env[f"GIT_CONFIG_VALUE_{i}"] = value
        return await self._exec(args, output_limit=output_limit, extra_env=env, check=check)

    async def _exec(
        self,
        args: Sequence[str],
        *,
        output_limit: int,
        extra_env: dict[str, str] | None,
        check: bool,
    ) -> GitResult:
        env = self._env()
        if extra_env:
            env.update(extra_env)
        runner = ProcessRunner(
            self._argv(args),
            cwd=self.root,
            env=env,
            timeout=GIT_TIMEOUT,
            output_limit=output_limit,
            stream_limit=0,
            emit=_discard,
            cancel_event=self.cancel_event,
            kill_grace=1.0,
        )
        self._runner = runner
        try:
            result = await runner.run()
        except FileNotFoundError as exc:
            raise ToolExecutionError("git is not installed on the server") from exc
        finally:
            self._runner = None
        if result.cancelled:
            raise ToolCancelled(f"git {args[0]} was cancelled")
        if result.timed_out:
            raise ToolTimeout(f"git {args[0]} did not finish within {GIT_TIMEOUT:g} s")
        stderr = result.stderr.text().strip()
        out = GitResult(
            stdout=result.stdout.data(),
            stderr=stderr,
            exit_code=result.exit_code if result.exit_code is not None else -1,
            truncated=result.stdout.truncated,
            text=result.stdout.text(),
        )
        if check and out.exit_code != 0:
            raise git_error(args[0], stderr)
        return out

    async def ensure_repository(self) -> None:
        """Fail clearly outside a repository (before ``git diff``, which outside
        one would turn into ``git diff --no-index``)."""
        await self.config()

    async def terminate(self) -> bool:
        runner = self._runner
        return await runner.terminate() if runner is not None else False


def git_error(subcommand: str, stderr: str) -> ToolExecutionError:
    """A clear error for a failed git command."""
    if "not a git repository" in stderr or "only be used inside a git repository" in stderr:
        return ToolExecutionError(
            "the workspace is not a git repository (its .git directory is not a valid "
            "repository; create one with `git init` through the shell tool)"
        )
    if "dubious ownership" in stderr:
        return ToolExecutionError(
            "git refuses this repository because another user owns it (safe.directory)"
        )
    lines = stderr.splitlines()
    # git's own verdict, not the hints it prints after it.
    verdict = [ln for ln in lines if ln.startswith(("error:", "fatal:"))] or lines[-1:]
    detail = " ".join(verdict) if verdict else "no message"
    return ToolExecutionError(f"git {subcommand} failed: {detail[:500]}")


def check_revision(value: str, what: str) -> str:
    """A revision argument from the model: never an option, never multi-line."""
    if not value or value.startswith("-"):
        raise ToolValidationFailed(f"{what} {value!r} must be a revision, not an option")
    if any(ch.isspace() or ord(ch) < 32 for ch in value) or len(value) > 256:
        raise ToolValidationFailed(f"{what} {value!r} is not a valid revision")
    return value
