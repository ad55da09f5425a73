"""shell (alias run_command): run a command line in the workspace, behind
four layers.

1. The blocklist (rules.py) refuses destructive commands in every mode.
2. The rating (rules.py) tells the confirmation policy whether the call is
   safe, dev or dangerous; with the ``allowed_only`` option a dangerous
   command is refused without asking anyone.
3. Limits: a timeout (default 30 s, 1..600), stdin from /dev/null, output
   capped by keeping head and tail, the exit code reported.
4. The working directory must lie inside the workspace; when the session
   has a sandbox (``context.sandbox``, on by default wherever bubblewrap
   works) the command runs in it with the full, read-only host view (see
   dispatcher/sandbox.py). Without one it runs on the host, and the policy
   asks for a confirmation first.

Beyond that, output streams live through ``context.emit_output``, a
cancelled call stops the whole process group (SIGTERM, SIGKILL 3 s later)
and reports what the command printed so far, and nothing the command starts
outlives the server (the sandbox's PID namespace, or the child reaper for an
unsandboxed command: see dispatcher/reaper.py).

The command sees a scrubbed environment, not the server's: API keys and
tokens in the server's environment must not reach a command (``env`` is
rated safe). Variables a call adds may not change which program runs or
inject code (PATH, LD_*, BASH_ENV ...): the rating is based on the command
text, and those would make the text lie.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from dispatcher.errors import (
    ToolCancelled,
    ToolExecutionError,
    ToolPermissionDenied,
    ToolTimeout,
    ToolValidationFailed,
)
from dispatcher.process import ProcessResult, ProcessRunner
from dispatcher.sandbox import Sandbox, SandboxUnavailable
from dispatcher.tool import (
    BaseTool,
    CallRating,
    ConfirmationPreview,
    GrantScope,
    ToolContext,
    ToolEffects,
    ToolOutput,
    declared_paths,
    lexical_path,
    one_line,
)
from dispatcher.tools.common import (
    THREAD_THRESHOLD_BYTES,
    Options,
    check_cancelled,
    object_schema,
    path_property,
    run_blocking,
)
from dispatcher.tools.shell.paths import shell_call_paths
from dispatcher.tools.shell.rules import Analysis, analyze, max_rating, rate_command
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects, ToolDefinition

DEFAULT_TIMEOUT = 30
MAX_TIMEOUT = 600
DEFAULT_OUTPUT_BYTES = 64 * 1024
DEFAULT_STREAM_BYTES = 1024 * 1024
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FORBIDDEN_ENV = re.compile(
    r"^(PATH|IFS|ENV|BASH_ENV|SHELLOPTS|BASHOPTS|PS4|PROMPT_COMMAND|LD_.*|DYLD_.*|BASH_FUNC_.*"
    r"|PYTHONSTARTUP|PYTHONPATH|PYTHONHOME|PERL5OPT|PERL5LIB|PERLLIB|RUBYOPT|RUBYLIB"
    r"|NODE_OPTIONS|GIT_.*|GCONV_PATH|HOSTALIASES|LOCPATH|MALLOC_.*)$"
)
# Server environment variables a command inherits; everything else (keys,
# tokens, cloud credentials) stays out unless the env_passthrough option names it.
_INHERITED = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR")
# Past this many characters a command's words are resolved in a worker
# thread (each costs a few system calls), as is any command with a glob,
# which lists workspace folders.
_INLINE_PATHS_CHARS = 4096


def _default_shell() -> str:
    return "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"


class ShellTool(BaseTool):
    """Runs one shell command line; see the module docstring."""

    definition: ToolDefinition = ToolDefinition(
        name="shell",
        description=(
            "Run a shell command in the workspace (bash -c). Output streams while it runs; the "
            "result has the exit code and the output (long output keeps its head and tail). "
            "No stdin. Destructive commands (rm -rf /, sudo, curl|sh ...) are always refused."
        ),
        input_schema=object_schema(
            {
                "command": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The command line to run.",
                },
                "cwd": path_property(
                    "Working directory relative to the workspace root (default: the root)."
                ),
                "timeout": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_TIMEOUT,
                    "description": "Seconds before the command is stopped (default 30).",
                },
                "env": {
                    "type": "object",
                    "description": "Extra environment variables (string values).",
                },
            },
            ["command"],
        ),
        side_effects=SideEffects.EXECUTE,
    )
    path_fields: tuple[str, ...] = ("cwd",)
    # Config section ``workspaces.shell`` (timeout, allowed_only, ...), for the alias too.
    options_section: ClassVar[str | None] = "shell"
    # A call's own ``timeout`` (at most MAX_TIMEOUT) is enforced by the tool;
    # the dispatcher's timeout only backs it up.
    self_timed_up_to: ClassVar[float | None] = MAX_TIMEOUT

    def __init__(self) -> None:
        self._runner: ProcessRunner | None = None

    # -- stages the dispatcher runs before the call ------------------------

    def prepare(self, input: dict[str, Any], workspace: WorkspaceFileAPI) -> Analysis:
        """The rules' analysis of the command where it would run: computed
        once per call, then read by rate, scope, preview and execute."""
        return _rated(input, workspace)

    def rate(
        self, input: dict[str, Any], workspace: WorkspaceFileAPI, *, prepared: Any = None
    ) -> CallRating:
        """The call's rating; a blocklisted command is refused here, before any
        confirmation is asked for (no one should be asked to approve it)."""
        result = _analysis(prepared, input, workspace)
        if result.blocked:
            raise ToolPermissionDenied(_blocked_message(result))
        return result.rating

    async def preview(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ConfirmationPreview:
        """The whole command and its ``env`` first (marked never to be cut),
        then where it runs and how it was rated."""
        result = _analysis(prepared, input, workspace)
        cwd = workspace.relative(workspace.resolve(input.get("cwd", ".")))
        head = [f"$ {input['command']}"]
        env = input.get("env")
        if isinstance(env, Mapping) and env:
            head.append("env:")
            head += [f"  {k}={v}" for k, v in env.items()]
        lines = [f"(in {cwd}; rated {result.rating.value})"]
        if result.blocked:
            lines.append("This command will be refused: " + "; ".join(result.blocked))
        keep = len("\n".join(head))
        return ConfirmationPreview(text="\n".join(head + lines), kind="command", keep=keep)

    async def effects(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ToolEffects:
        """The command, its working directory, the paths its words,
        redirections and ``env`` values name (shell/paths.py), and the files
        the rules' analysis says it writes (redirections, option values such
        as ``sort -o F``, written operands such as ``tee F``); a write no
        static reading can name (``> $F``) makes the effects unknown. Globs
        are matched against the workspace, so a command that has any is read
        off the event loop."""
        command: str = input["command"]
        cwd = lexical_path(str(input.get("cwd") or "."))
        analysis = _analysis(prepared, input, workspace)
        env = input.get("env")
        env_values = env if isinstance(env, Mapping) else None
        root = workspace.workspace_root
        named = await run_blocking(
            lambda: shell_call_paths(command, cwd, root, env_values),
            size_hint=_paths_work(command),
        )
        where = f" (in {cwd})" if cwd not in ("", ".") else ""
        written: dict[str, None] = {}
        for path in analysis.writes:
            joined = path if path.startswith("/") else posixpath.join(cwd, path)
            written.update(dict.fromkeys(declared_paths(joined, workspace)))
        return ToolEffects(
            writes=tuple(written),
            commands=(command,),
            cwd=cwd,
            command_paths=named,
            summary=one_line(f"{self.definition.name}: {command}") + where,
            unknown=analysis.writes_unknown,
        )

    def scope(
        self, input: dict[str, Any], workspace: WorkspaceFileAPI, *, prepared: Any = None
    ) -> GrantScope:
        """An "allow for session" answer grants each simple command's program and
        subcommand (``npm test``, ``git status``, ``ls``) at its rating or
        lower; a later command runs unasked only when every one of its parts
        is covered (``ls && rm x`` is not covered by a grant for ``ls``)."""
        result = _analysis(prepared, input, workspace)
        ratings: dict[str, CallRating] = {}
        for part in result.parts:
            known = ratings.get(part.key)
            ratings[part.key] = part.rating if known is None else max_rating(known, part.rating)
        levels = set(ratings.values())
        if len(levels) == 1:
            names = ", ".join(repr(k) for k in ratings)
            level = levels.pop().value
            text = f"allow {names} for this session (commands rated {level} or lower)"
        else:
            each = ", ".join(f"{k!r} (rated {r.value} or lower)" for k, r in ratings.items())
            text = f"allow {each} for this session"
        return GrantScope(tuple(ratings.items()), text)

    # -- the call ----------------------------------------------------------

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, self.definition.name)
        name = self.definition.name
        options = Options(name, context.options)
        command: str = input["command"]
        if not command.strip():
            raise ToolValidationFailed("command must not be blank")
        analysis = _permitted(command, context.prepared, options)
        ws = context.workspace_files
        cwd = ws.resolve(input.get("cwd", "."))
        if not cwd.is_dir():
            raise ToolExecutionError(f"cwd {input.get('cwd')!r} is not a folder in the workspace")
        # The option (server config `workspaces.shell.timeout`) is the default
        # for calls that do not name their own.
        timeout: float = input.get(
            "timeout", options.number("timeout", DEFAULT_TIMEOUT, minimum=1, maximum=MAX_TIMEOUT)
        )
        env = _environment(input.get("env"), options)
        argv = [str(options.raw.get("shell", _default_shell())), "-c", command]
        sandbox = context.sandbox
        sandboxed = sandbox is not None
        if sandbox is not None:
            try:
                argv = sandbox.command(argv, cwd=str(cwd))
            except SandboxUnavailable as exc:
                raise ToolPermissionDenied(str(exc)) from exc
        runner = _process_runner(argv, str(cwd), env, timeout, options, context)
        self._runner = runner
        try:
            result = await runner.run()
        except OSError as exc:
            raise ToolExecutionError(f"could not start the command: {exc.strerror}") from exc
        text = _render(result)
        if result.cancelled:
            raise ToolCancelled("the command was cancelled", partial_output=text)
        if result.timed_out:
            raise ToolTimeout(f"the command timed out after {timeout:g} s", partial_output=text)
        if sandboxed and result.exit_code == 1 and _sandbox_failed(result):
            raise ToolExecutionError(
                "the sandbox could not start: " + result.stderr.text().strip()[:500]
            )
        return ToolOutput.text(
            text,
            success=result.exit_code == 0,
            metadata=_metadata(result, analysis, sandboxed, timeout),
            command_executed=command,
        )

    async def cancel(self) -> bool:
        runner = self._runner
        if runner is None:
            return False
        return await runner.terminate()


def _permitted(command: str, prepared: object, options: Options) -> Analysis:
    """The analysis the call was rated and approved on (``prepared``), or,
    called directly, the command's own: execute() must hold on its own too.
    A blocked command, or a dangerous one under ``allowed_only``, is refused."""
    analysis = prepared if isinstance(prepared, Analysis) else analyze(command)
    if analysis.blocked:
        raise ToolPermissionDenied(_blocked_message(analysis))
    if options.boolean("allowed_only", False) and analysis.rating is CallRating.DANGEROUS:
        raise ToolPermissionDenied(
            "the command is rated 'dangerous' and allowed_only is on: only safe and dev "
            "commands may run in this session"
        )
    return analysis


def _process_runner(
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    timeout: float,
    options: Options,
    context: ToolContext,
) -> ProcessRunner:
    """The runner of ``argv`` with the output limits and kill grace of ``options``."""
    return ProcessRunner(
        argv,
        cwd=cwd,
        env=env,
        timeout=timeout,
        output_limit=options.integer(
            "max_output_bytes", DEFAULT_OUTPUT_BYTES, minimum=256, maximum=64 * 1024 * 1024
        ),
        stream_limit=options.integer(
            "max_stream_bytes", DEFAULT_STREAM_BYTES, minimum=0, maximum=1024 * 1024 * 1024
        ),
        emit=context.emit_output,
        cancel_event=context.cancel_event,
        kill_grace=options.number("kill_grace", 3.0, minimum=0.0, maximum=60.0),
    )


class RunCommandTool(ShellTool):
    """The same tool under the seeds' name; it reads the same ``shell``
    options section."""

    definition: ToolDefinition = ShellTool.definition.model_copy(
        update={
            "name": "run_command",
            "description": ShellTool.definition.description + " (Alias of the shell tool.)",
        }
    )


def _environment(extra: Any, options: Options) -> dict[str, str]:
    env = {k: os.environ[k] for k in _INHERITED if k in os.environ}
    env.setdefault("PATH", os.defpath)
    for name in options.string_list("env_passthrough"):
        if name in os.environ:
            env[name] = os.environ[name]
    # Plain, unpaged, unbuffered output suits a tool reading pipes.
    env.update(
        {
            "TERM": "dumb",
            "PAGER": "cat",
            "GIT_PAGER": "cat",
            "GIT_TERMINAL_PROMPT": "0",
            "PYTHONUNBUFFERED": "1",
            "NO_COLOR": "1",
        }
    )
    env.setdefault("LANG", "C.UTF-8")
    if extra is None:
        return env
    if not isinstance(extra, Mapping):
        raise ToolValidationFailed("env must be an object of string values")
    for key, value in extra.items():
        if not isinstance(value, str) or "\x00" in value:
            raise ToolValidationFailed(f"env value for {key!r} must be a string without NUL")
        if not _ENV_NAME.match(key):
            raise ToolValidationFailed(f"env name {key!r} is not a valid variable name")
        if _FORBIDDEN_ENV.match(key):
            raise ToolValidationFailed(
                f"env may not set {key}: it changes which program runs or injects code"
            )
        env[key] = value
    return env


def _paths_work(command: str) -> int:
    """The ``size_hint`` that sends finding a command's paths to a thread or not."""
    if len(command) > _INLINE_PATHS_CHARS or any(c in command for c in "*?["):
        return THREAD_THRESHOLD_BYTES
    return 0


def _sandbox_failed(result: ProcessResult) -> bool:
    return result.stderr.text().startswith("bwrap:")


def _render(result: ProcessResult) -> str:
    parts = [f"exit code: {result.exit_code}"]
    out = result.stdout.text()
    err = result.stderr.text()
    if out:
        parts.append("stdout:\n" + out.rstrip("\n"))
    if err:
        parts.append("stderr:\n" + err.rstrip("\n"))
    if not out and not err:
        parts.append("(no output)")
    return "\n".join(parts)


def _metadata(
    result: ProcessResult, analysis: Analysis, sandboxed: bool, timeout: float
) -> dict[str, Any]:
    return {
        "exit_code": result.exit_code,
        "rating": analysis.rating.value,
        "sandboxed": sandboxed,
        "timeout": timeout,
        "duration_ms": result.duration_ms,
        "stdout_bytes": result.stdout.total,
        "stderr_bytes": result.stderr.total,
        "stdout_truncated": result.stdout.truncated,
        "stderr_truncated": result.stderr.truncated,
        "truncated": result.stdout.truncated or result.stderr.truncated,
        "background_killed": result.background_killed,
    }


def _rated(input: dict[str, Any], workspace: WorkspaceFileAPI) -> Analysis:
    """The rules' analysis of this call where it would run."""
    env = input.get("env")
    return rate_command(
        input["command"],
        workspace=workspace.workspace_root,
        cwd=input.get("cwd"),
        env_names=list(env) if isinstance(env, Mapping) else (),
    )


def _analysis(prepared: Any, input: dict[str, Any], workspace: WorkspaceFileAPI) -> Analysis:
    """The prepared analysis, or a fresh one for a stage called on its own."""
    return prepared if isinstance(prepared, Analysis) else _rated(input, workspace)


def _blocked_message(analysis: Analysis) -> str:
    return "the shell blocklist refuses this command: " + "; ".join(analysis.blocked)
