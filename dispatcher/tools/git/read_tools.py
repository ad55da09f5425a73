"""git_status, git_diff and git_log: the read tools. They run git as
runner.py does for reads (in the sandbox, the workspace read-only, no
workspace config that could run a program), so they can declare ``read``."""

from __future__ import annotations

from typing import Any

from dispatcher.tool import ToolContext, ToolOutput
from dispatcher.tools.common import (
    Options,
    check_cancelled,
    object_schema,
    path_property,
    relative_path,
)
from dispatcher.tools.git.base import GitTool
from dispatcher.tools.git.outputs import DIFF_OUTPUT, LOG_OUTPUT, STATUS_OUTPUT
from dispatcher.tools.git.parse import (
    LOG_FORMAT,
    Status,
    parse_log,
    parse_numstat_z,
    parse_status_v2,
)
from dispatcher.tools.git.runner import check_revision, git_error
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects, ToolDefinition

DEFAULT_DIFF_BYTES = 256 * 1024


def _pathspec(ws: WorkspaceFileAPI, path: str | None) -> list[str]:
    """The pathspec limiting a command to ``path`` (none for the whole workspace)."""
    if path is None:
        return []
    rel = relative_path(ws, path)
    return [] if rel == "." else [rel]


class GitStatusTool(GitTool):
    """The working tree's state: branch, staged, unstaged and untracked files."""

    definition: ToolDefinition = ToolDefinition(
        name="git_status",
        description=(
            "Show the git status of the workspace: current branch, upstream ahead/behind, "
            "and each changed, staged, untracked or conflicted file."
        ),
        input_schema=object_schema({}, []),
        side_effects=SideEffects.READ,
        output_schema=STATUS_OUTPUT,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "git_status")
        git = self._runner(context)
        result = await git.run(
            [
                "status",
                "--porcelain=v2",
                "--branch",
                "-z",
                "--untracked-files=all",
                # git would run `git status` inside each submodule, under a
                # config we have not vetted.
                "--ignore-submodules=all",
            ]
        )
        status = parse_status_v2(result.stdout)
        return ToolOutput.text(_render_status(status), data=status.as_dict())


def _render_status(status: Status) -> str:
    b = status.branch
    head = b.head or f"detached at {b.oid[:12] if b.oid else '?'}"
    line = f"branch: {head}"
    if b.oid is None:
        line += " (no commits yet)"
    if b.upstream:
        line += f" (upstream {b.upstream}, ahead {b.ahead or 0}, behind {b.behind or 0})"
    lines = [line]
    for e in status.entries:
        name = f"{e.orig_path} -> {e.path}" if e.orig_path else e.path
        if e.kind in ("untracked", "ignored", "unmerged"):
            lines.append(f"{e.kind}: {name}")
            continue
        if e.index != "unmodified":
            lines.append(f"staged {e.index}: {name}")
        if e.worktree != "unmodified":
            lines.append(f"unstaged {e.worktree}: {name}")
    if not status.entries:
        lines.append("working tree clean")
    return "\n".join(lines)


class GitDiffTool(GitTool):
    """Unstaged (default) or staged changes, or changes against a revision."""

    definition: ToolDefinition = ToolDefinition(
        name="git_diff",
        description=(
            "Show a git diff: unstaged changes by default, staged ones with staged=true, or "
            "the working tree against a revision (ref, e.g. 'HEAD~1' or 'main..feature')."
        ),
        input_schema=object_schema(
            {
                "staged": {"type": "boolean", "description": "Diff the index (default false)."},
                "ref": {"type": "string", "description": "Revision or range to diff against."},
                "path": path_property("Limit the diff to this file or folder."),
                "context_lines": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 50,
                    "description": "Context lines around changes (default 3).",
                },
            },
            [],
        ),
        side_effects=SideEffects.READ,
        output_schema=DIFF_OUTPUT,
    )
    path_fields: tuple[str, ...] = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "git_diff")
        options = Options("git_diff", context.options)
        limit = options.integer(
            "max_output_bytes", DEFAULT_DIFF_BYTES, minimum=1024, maximum=64 * 1024 * 1024
        )
        base = ["diff", "--no-ext-diff", "--no-textconv", "--no-color", "--ignore-submodules=all"]
        if input.get("staged", False):
            base.append("--cached")
        revs = [check_revision(input["ref"], "ref")] if "ref" in input else []
        tail = [
            "--end-of-options",
            *revs,
            "--",
            *_pathspec(context.workspace_files, input.get("path")),
        ]
        git = self._runner(context)
        await git.ensure_repository()
        numstat = await git.run([*base, "--numstat", "-z", *tail])
        files = parse_numstat_z(numstat.stdout)
        diff = await git.run(
            [*base, f"-U{input.get('context_lines', 3)}", *tail], output_limit=limit
        )
        text = diff.text if diff.text else "(no changes)"
        return ToolOutput.text(
            text,
            metadata={"truncated": diff.truncated},
            data={
                "files": [
                    {
                        "path": f.path,
                        "old_path": f.old_path,
                        "added": f.added,
                        "removed": f.removed,
                        "binary": f.binary,
                    }
                    for f in files
                ],
                "staged": input.get("staged", False),
                "ref": input.get("ref"),
            },
        )


class GitLogTool(GitTool):
    """Recent commits, newest first."""

    definition: ToolDefinition = ToolDefinition(
        name="git_log",
        description="List recent git commits (newest first), optionally for a ref or a path.",
        input_schema=object_schema(
            {
                "max_count": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 200,
                    "description": "How many commits (default 20).",
                },
                "ref": {"type": "string", "description": "Revision or range (default HEAD)."},
                "path": path_property("Only commits touching this file or folder."),
            },
            [],
        ),
        side_effects=SideEffects.READ,
        output_schema=LOG_OUTPUT,
    )
    path_fields: tuple[str, ...] = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "git_log")
        revs = [check_revision(input["ref"], "ref")] if "ref" in input else []
        args = [
            "log",
            f"--max-count={input.get('max_count', 20)}",
            f"--format={LOG_FORMAT}",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--no-show-signature",
            "--end-of-options",
            *revs,
            "--",
            *_pathspec(context.workspace_files, input.get("path")),
        ]
        git = self._runner(context)
        result = await git.run(args, check=False)
        if result.exit_code != 0:
            if "does not have any commits yet" in result.stderr:
                return ToolOutput.text("(no commits yet)", data={"commits": [], "count": 0})
            raise git_error("log", result.stderr)
        commits = parse_log(result.stdout)
        lines = [f"{c.short} {c.date[:10]} {c.author}: {c.subject}" for c in commits]
        return ToolOutput.text(
            "\n".join(lines) if lines else "(no commits match)",
            data={
                "commits": [
                    {
                        "sha": c.sha,
                        "short": c.short,
                        "author": c.author,
                        "email": c.email,
                        "date": c.date,
                        "parents": c.parents,
                        "subject": c.subject,
                        "body": c.body,
                    }
                    for c in commits
                ],
                "count": len(commits),
            },
        )
