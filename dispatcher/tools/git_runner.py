"""How the git tools run git: fixed argv, a hardened configuration, and the
repository confined to the workspace.

Why a git tool that runs a program can honestly declare ``read``: the read
tools run only read-only subcommands (status, diff, log, for-each-ref) with
an argv we build; the model supplies values (a revision, a path), never
flags, and values go after ``--end-of-options`` or ``--``. Git could still
run programs named in its configuration, so every call overrides those
settings on the command line (``core.fsmonitor``, ``core.hooksPath``,
``core.pager``, commit signing, network protocols) and diffs use
``--no-ext-diff --no-textconv``. The file tools refuse to write inside
``.git``, so a call cannot plant such configuration for the next one.
``GIT_OPTIONAL_LOCKS=0`` keeps status from rewriting the index.

``GIT_CEILING_DIRECTORIES`` stops git from finding a repository above the
workspace root: the repository must be the workspace itself, or git would
report (and act on) files outside it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from dispatcher.errors import ToolCancelled, ToolExecutionError, ToolTimeout, ToolValidationError
from dispatcher.tool import ToolContext
from dispatcher.tools.process import ProcessRunner

GIT_TIMEOUT = 60.0
STRUCTURED_LIMIT = 64 * 1024 * 1024
SAFETY_CONFIG = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "core.editor=true",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "protocol.allow=never",
    "credential.helper=",
    "color.ui=false",
)


@dataclass(slots=True)
class GitResult:
    """What one git command printed, and its status."""

    stdout: bytes
    stderr: str
    exit_code: int
    truncated: bool
    text: str  # stdout as text, head and tail kept when truncated


def _discard(stream: str, text: str) -> None:
    return None


class GitRunner:
    """Runs git in one workspace; ``terminate()`` stops the running command."""

    def __init__(self, context: ToolContext) -> None:
        self.context = context
        self.root = context.workspace_files.workspace_root
        self._runner: ProcessRunner | None = None

    def _env(self) -> dict[str, str]:
        env = {k: os.environ[k] for k in ("PATH", "HOME", "TZ") if k in os.environ}
        env.setdefault("PATH", os.defpath)
        env.update(
            {
                "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8",
                "GIT_CEILING_DIRECTORIES": os.path.dirname(self.root),
                "GIT_OPTIONAL_LOCKS": "0",
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_LITERAL_PATHSPECS": "1",
                "GIT_CONFIG_NOSYSTEM": "1",
            }
        )
        return env

    async def run(
        self,
        args: Sequence[str],
        *,
        output_limit: int = STRUCTURED_LIMIT,
        extra_env: dict[str, str] | None = None,
        check: bool = True,
    ) -> GitResult:
        argv = ["git"]
        for setting in SAFETY_CONFIG:
            argv += ["-c", setting]
        argv += list(args)
        env = self._env()
        if extra_env:
            env.update(extra_env)
        runner = ProcessRunner(
            argv,
            cwd=self.root,
            env=env,
            timeout=GIT_TIMEOUT,
            output_limit=output_limit,
            stream_limit=0,
            emit=_discard,
            cancel_event=self.context.cancel_event,
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
        """Fail clearly outside a repository. Needed before ``git diff``, which
        outside one silently turns into ``git diff --no-index``."""
        await self.run(["rev-parse", "--git-dir"])

    async def terminate(self) -> bool:
        runner = self._runner
        return await runner.terminate() if runner is not None else False


def git_error(subcommand: str, stderr: str) -> ToolExecutionError:
    """A clear error for a failed git command."""
    if "not a git repository" in stderr:
        return ToolExecutionError(
            "the workspace is not a git repository (git tools need a .git at the workspace "
            "root; create one with `git init` through the shell tool)"
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
        raise ToolValidationError(f"{what} {value!r} must be a revision, not an option")
    if any(ch.isspace() or ord(ch) < 32 for ch in value) or len(value) > 256:
        raise ToolValidationError(f"{what} {value!r} is not a valid revision")
    return value
