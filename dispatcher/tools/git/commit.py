"""git_commit: stage the given paths (or everything) and commit, with an
identity from the repository's config or the tool's options, hooks off."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dispatcher.errors import ToolExecutionError, ToolValidationFailed
from dispatcher.tool import ConfirmationPreview, ToolContext, ToolEffects, ToolOutput, one_line
from dispatcher.tools.common import Options, check_cancelled, object_schema, refuse_git_internals
from dispatcher.tools.git.base import GitTool
from dispatcher.tools.git.outputs import COMMIT_OUTPUT
from dispatcher.tools.git.runner import GitRunner, git_error
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects, ToolDefinition

if TYPE_CHECKING:
    from dispatcher.sandbox import Sandbox

DEFAULT_AUTHOR = ("toolrelay", "toolrelay@localhost")


class GitCommitTool(GitTool):
    """Stages the given paths (or everything) and commits."""

    definition: ToolDefinition = ToolDefinition(
        name="git_commit",
        description=(
            "Create a git commit with a message. Stage files first with `paths`, or every "
            "change (untracked files included) with all=true; otherwise what is already "
            "staged is committed. Hooks do not run."
        ),
        input_schema=object_schema(
            {
                "message": {"type": "string", "minLength": 1, "description": "Commit message."},
                "paths": {
                    "type": "array",
                    "items": {"type": "string", "format": "path"},
                    "description": "Files to stage before committing.",
                },
                "all": {"type": "boolean", "description": "Stage every change (default false)."},
            },
            ["message"],
        ),
        side_effects=SideEffects.WRITE,
        output_schema=COMMIT_OUTPUT,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "git_commit")
        ws = context.workspace_files
        message: str = input["message"]
        if not message.strip():
            raise ToolValidationFailed("message must not be blank")
        paths = [refuse_git_internals(ws, p) for p in input.get("paths", [])]
        git = self._runner(context, writable=True)
        if input.get("all", False):
            await git.run(["add", "-A", "--", "."])
        if paths:
            await git.run(["add", "--", *paths])
        env = await _identity(git, Options("git_commit", context.options))
        result = await git.run(["commit", "--no-verify", "-m", message], extra_env=env, check=False)
        if result.exit_code != 0:
            said = (result.text + "\n" + result.stderr).strip()
            if "nothing to commit" in said or "no changes added" in said:
                raise ToolExecutionError(
                    "nothing to commit: stage files with `paths` or pass all=true"
                )
            raise git_error("commit", result.stderr or result.text)
        head = await git.run(["rev-parse", "HEAD"])
        sha = head.stdout.decode().strip()
        branch = (await git.run(["branch", "--show-current"])).stdout.decode().strip() or None
        changed = await git.run(
            ["diff-tree", "--no-commit-id", "--root", "-r", "-z", "--name-status", "HEAD"]
        )
        files = _name_status(changed.stdout)
        return ToolOutput.text(
            f"[{branch or 'detached'} {sha[:12]}] {message.splitlines()[0]}\n"
            + "\n".join(f"{f['status']} {f['path']}" for f in files),
            data={"sha": sha, "branch": branch, "files": files},
        )

    async def preview(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ConfirmationPreview:
        paths = [refuse_git_internals(workspace, p) for p in input.get("paths", [])]
        lines = [f"git commit -m {input['message']!r}"]
        if input.get("all", False):
            lines.append("staging every change first (git add -A)")
        if paths:
            lines.append("staging first: " + ", ".join(paths))
        return ConfirmationPreview(text="\n".join(lines), kind="text")

    async def effects(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ToolEffects:
        """Staging and committing write ``.git`` only: no workspace file changes."""
        return ToolEffects(summary=f'{self.definition.name} "{one_line(input["message"])}"')


async def _identity(git: GitRunner, options: Options) -> dict[str, str]:
    """Author/committer from the repository's config, else from options (or a
    default), so a fresh repository can commit without asking anyone. Global
    and system config are never read (see runner.py)."""
    config = await git.config()
    if (config.get("user.email") or "").strip():
        return {}
    name = str(options.raw.get("author_name", DEFAULT_AUTHOR[0]))
    email = str(options.raw.get("author_email", DEFAULT_AUTHOR[1]))
    return {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
    }


def _name_status(raw: bytes) -> list[dict[str, str]]:
    """The files of ``--name-status -z`` output, renames and copies with their old path."""
    records = [r.decode("utf-8", "replace") for r in raw.split(b"\x00")]
    out: list[dict[str, str]] = []
    i = 0
    while i + 1 < len(records):
        status = records[i]
        if not status:
            i += 1
            continue
        if status[:1] in ("R", "C") and i + 2 < len(records):
            out.append({"status": status[:1], "path": records[i + 2], "old_path": records[i + 1]})
            i += 3
        else:
            out.append({"status": status, "path": records[i + 1]})
            i += 2
    return out
