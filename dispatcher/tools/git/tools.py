"""git_status, git_diff, git_log (read) and git_commit, git_branch (write):
thin tools over the git CLI with structured output. See git_runner for how
git is run and why the read tools can declare ``read``.

Each tool gives the model readable text and clients the same facts as
``ToolOutput.data``, described by the tool's ``output_schema`` (the
``*_OUTPUT`` schemas below); ``metadata`` keeps only operational facts
(git_diff: whether the diff text was cut)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dispatcher.errors import ToolExecutionError, ToolValidationFailed
from dispatcher.tool import (
    BaseTool,
    ConfirmationPreview,
    ToolContext,
    ToolEffects,
    ToolOutput,
    one_line,
)
from dispatcher.tools.common import (
    Options,
    check_cancelled,
    object_schema,
    path_property,
    refuse_git_internals,
    relative_path,
)
from dispatcher.tools.git.parse import (
    BRANCH_FORMAT,
    LOG_FORMAT,
    Status,
    parse_branches,
    parse_log,
    parse_numstat_z,
    parse_status_v2,
)
from dispatcher.tools.git.runner import GitRunner, check_revision, git_error
from dispatcher.tools.shapes import (
    BOOLEAN,
    COUNT,
    PATH,
    STRING,
    array,
    nullable,
    record,
)
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects, ToolDefinition

if TYPE_CHECKING:
    from dispatcher.sandbox import Sandbox

DEFAULT_DIFF_BYTES = 256 * 1024
DEFAULT_AUTHOR = ("toolrelay", "toolrelay@localhost")

# The change words of parse._STATUS_WORDS, plus what untracked/ignored entries carry.
_CHANGE = {"type": "string", "description": "modified, added, deleted, renamed, ... or unmodified."}
STATUS_OUTPUT = record(
    {
        "branch": record(
            {
                "head": nullable("string", "Current branch; null when HEAD is detached."),
                "oid": nullable("string", "HEAD commit; null before the first commit."),
                "upstream": nullable("string"),
                "ahead": nullable("integer", "Commits ahead of upstream (null: no upstream)."),
                "behind": nullable("integer", "Commits behind upstream (null: no upstream)."),
            }
        ),
        "entries": array(
            record(
                {
                    "path": PATH,
                    "kind": {
                        "type": "string",
                        "enum": [
                            "changed",
                            "renamed",
                            "copied",
                            "unmerged",
                            "untracked",
                            "ignored",
                        ],
                    },
                    "index": _CHANGE,
                    "worktree": _CHANGE,
                    "orig_path": nullable("string", "The path before a rename or copy."),
                }
            )
        ),
        "clean": BOOLEAN,
    }
)
DIFF_OUTPUT = record(
    {
        "files": array(
            record(
                {
                    "path": PATH,
                    "old_path": nullable("string", "The path before a rename."),
                    "added": nullable("integer", "Lines added; null for a binary file."),
                    "removed": nullable("integer", "Lines removed; null for a binary file."),
                    "binary": BOOLEAN,
                }
            ),
            "Every changed file, even when the diff text was truncated.",
        ),
        "staged": BOOLEAN,
        "ref": nullable("string"),
    }
)
COMMIT_RECORD = record(
    {
        "sha": STRING,
        "short": STRING,
        "author": STRING,
        "email": STRING,
        "date": {"type": "string", "format": "date-time", "description": "Author date."},
        "parents": array(STRING),
        "subject": STRING,
        "body": STRING,
    }
)
LOG_OUTPUT = record({"commits": array(COMMIT_RECORD, "Newest first."), "count": COUNT})
_COMMITTED_FILE = record(
    {
        "status": {"type": "string", "description": "git's name-status letter (A, M, D, R, C...)."},
        "path": PATH,
        "old_path": STRING,
    },
    optional=["old_path"],
)
COMMIT_OUTPUT = record(
    {"sha": STRING, "branch": nullable("string"), "files": array(_COMMITTED_FILE)}
)
BRANCH_OUTPUT = record(
    {
        "action": {"type": "string", "enum": ["list", "create", "switch", "delete"]},
        "name": STRING,
        "branches": array(
            record(
                {
                    "name": STRING,
                    "commit": STRING,
                    "current": BOOLEAN,
                    "upstream": nullable("string"),
                }
            ),
            "Present for action list.",
        ),
        "files_changed": array(PATH, "Present for action switch."),
    },
    optional=["name", "branches", "files_changed"],
)


class _GitTool(BaseTool):
    """Shared cancel(): stop the git command in flight."""

    def __init__(self) -> None:
        self._git: GitRunner | None = None

    def _runner(self, context: ToolContext, *, writable: bool = False) -> GitRunner:
        self._git = GitRunner.of(context, writable=writable)
        return self._git

    async def cancel(self) -> bool:
        return await self._git.terminate() if self._git is not None else False


def _pathspec(ws: WorkspaceFileAPI, path: str | None) -> list[str]:
    if path is None:
        return []
    rel = relative_path(ws, path)
    return [] if rel == "." else [rel]


class GitStatusTool(_GitTool):
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


class GitDiffTool(_GitTool):
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


class GitLogTool(_GitTool):
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


class GitCommitTool(_GitTool):
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
    and system config are never read (see git_runner)."""
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


class GitBranchTool(_GitTool):
    """Lists, creates, switches to or deletes (merged) branches."""

    definition: ToolDefinition = ToolDefinition(
        name="git_branch",
        description=(
            "Manage git branches: action 'list' (default), 'create' (name, optional "
            "start_point), 'switch' (name) or 'delete' (name; only fully merged branches)."
        ),
        input_schema=object_schema(
            {
                "action": {
                    "type": "string",
                    "enum": ["list", "create", "switch", "delete"],
                    "description": "What to do (default list).",
                },
                "name": {"type": "string", "description": "Branch name."},
                "start_point": {
                    "type": "string",
                    "description": "Revision a new branch starts at (default HEAD).",
                },
            },
            [],
        ),
        side_effects=SideEffects.WRITE,
        output_schema=BRANCH_OUTPUT,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "git_branch")
        action = input.get("action", "list")
        git = self._runner(context, writable=action != "list")
        if action == "list":
            return await _list_branches(git)
        name = await _branch_name(git, input.get("name"))
        if action == "create":
            start = (
                [check_revision(input["start_point"], "start_point")]
                if "start_point" in input
                else []
            )
            await git.run(["branch", "--end-of-options", name, *start])
            return ToolOutput.text(f"created branch {name}", data={"action": action, "name": name})
        if action == "delete":
            await git.run(["branch", "-d", "--end-of-options", name])
            return ToolOutput.text(f"deleted branch {name}", data={"action": action, "name": name})
        before = (await git.run(["rev-parse", "--verify", "-q", "HEAD"], check=False)).stdout
        checked = context.prepared
        if isinstance(checked, CheckedSwitch) and checked.target is not None:
            await _still_as_checked(git, name, checked)
        await git.run(["switch", "--no-guess", "--end-of-options", name])
        changed: list[str] = []
        if before.strip():
            diff = await git.run(
                [
                    "diff",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--ignore-submodules=all",
                    "--name-only",
                    "-z",
                    before.decode().strip(),
                    "HEAD",
                    "--",
                ]
            )
            changed = [p.decode("utf-8", "replace") for p in diff.stdout.split(b"\x00") if p]
        return ToolOutput.text(
            f"switched to branch {name}" + (f" ({len(changed)} files changed)" if changed else ""),
            data={"action": action, "name": name, "files_changed": changed},
            files_modified=changed or None,
        )

    def prepare(self, input: dict[str, Any], workspace: WorkspaceFileAPI) -> CheckedSwitch:
        # Filled by effects for a switch: what the guardrails checked.
        return CheckedSwitch()

    async def effects(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ToolEffects:
        """Listing, creating and deleting branches write ``.git`` only. A
        switch rewrites every file that differs between HEAD and the target
        branch (git diff HEAD <branch>, run like the read tools: in the
        sandbox, the workspace read-only); untracked files git would
        overwrite are among them (they are in the target's tree), local
        changes git carries over are not touched. Kept in ``prepared`` so the
        switch refuses to run if HEAD or the branch moved since."""
        action = input.get("action", "list")
        name = input.get("name")
        summary = f"{self.definition.name} {action}" + (f" {name}" if isinstance(name, str) else "")
        if action != "switch" or not isinstance(name, str) or not name or name.startswith("-"):
            return ToolEffects(summary=summary)  # a switch without a usable name is refused
        git = GitRunner(workspace, sandbox=sandbox)
        checked = await switch_changes(git, name)
        if checked is None:
            # The branch does not exist now; it might by the time the call runs.
            return ToolEffects.not_known(summary)
        if isinstance(prepared, CheckedSwitch):
            prepared.adopt(checked)
        if checked.truncated:
            return ToolEffects.not_known(summary + " (too many files to list)")
        count = len(checked.writes) + len(checked.deletes)
        return ToolEffects(
            writes=checked.writes,
            deletes=checked.deletes,
            summary=f"{summary} ({count} files change)" if count else summary,
        )

    async def preview(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ConfirmationPreview:
        action = input.get("action", "list")
        text = f"git branch: {action}"
        if "name" in input:
            text += f" {input['name']!r}"
        if "start_point" in input:
            text += f" at {input['start_point']!r}"
        if isinstance(prepared, CheckedSwitch) and prepared.target is not None:
            changed = [*prepared.writes, *(f"{p} (deleted)" for p in prepared.deletes)]
            shown = changed[:PREVIEW_FILES]
            more = len(changed) - len(shown)
            text += "\nfiles the switch changes:" if changed else "\nno file changes"
            text += "".join(f"\n  {p}" for p in shown) + (f"\n  ... {more} more" if more else "")
        return ConfirmationPreview(text=text, kind="text")


# Files named in a switch's preview text (the request's projected_modifications
# lists them all).
PREVIEW_FILES = 50
# Bytes of `git diff --name-status` read for a switch's effects; past it the
# effects are unknown.
SWITCH_LIST_LIMIT = 4 * 1024 * 1024


@dataclass(slots=True)
class CheckedSwitch:
    """A branch switch as its effects saw it: HEAD and the target commit, and
    the files that differ between them (``truncated``: more than could be
    listed)."""

    head: str | None = None
    target: str | None = None
    writes: tuple[str, ...] = ()
    deletes: tuple[str, ...] = ()
    truncated: bool = False

    def adopt(self, other: CheckedSwitch) -> None:
        self.head, self.target = other.head, other.target
        self.writes, self.deletes, self.truncated = other.writes, other.deletes, other.truncated


async def switch_changes(git: GitRunner, name: str) -> CheckedSwitch | None:
    """What ``git switch name`` would change, or None when ``name`` is no
    local branch (the switch would fail)."""
    target = await _commit_of(git, f"refs/heads/{name}")
    if target is None:
        return None
    head = await _commit_of(git, "HEAD")
    if head is None:
        # No commit yet: the switch checks out the target's whole tree.
        args = ["ls-tree", "-r", "-z", "--name-only", "--full-tree", target]
    else:
        args = [
            *("diff", "--no-ext-diff", "--no-textconv", "--ignore-submodules=all"),
            *("--no-renames", "--name-status", "-z", head, target, "--"),
        ]
    listed = await git.run(args, output_limit=SWITCH_LIST_LIMIT)
    writes, deletes = _changed_files(listed.stdout, statuses=head is not None)
    return CheckedSwitch(head, target, writes, deletes, listed.truncated)


def _changed_files(raw: bytes, *, statuses: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(written, deleted) paths of ``--name-status -z`` (or ``--name-only -z``)."""
    fields = [f.decode("utf-8", "replace") for f in raw.split(b"\x00")]
    if not statuses:
        return tuple(f for f in fields if f), ()
    writes: list[str] = []
    deletes: list[str] = []
    for status, path in zip(fields[0::2], fields[1::2], strict=False):
        if path:
            (deletes if status.startswith("D") else writes).append(path)
    return tuple(writes), tuple(deletes)


async def _commit_of(git: GitRunner, rev: str) -> str | None:
    result = await git.run(
        ["rev-parse", "--verify", "-q", "--end-of-options", f"{rev}^{{commit}}"], check=False
    )
    sha = result.stdout.decode().strip()
    return sha if result.exit_code == 0 and sha else None


async def _still_as_checked(git: GitRunner, name: str, checked: CheckedSwitch) -> None:
    """Refuse a switch whose HEAD or target moved after its effects were
    checked: the guardrails and the person approved those files, not others."""
    head = await _commit_of(git, "HEAD")
    target = await _commit_of(git, f"refs/heads/{name}")
    if head != checked.head or target != checked.target:
        raise ToolExecutionError(
            f"HEAD or branch {name!r} moved after the switch was checked; nothing was "
            "switched (call git_branch again)"
        )


async def _list_branches(git: GitRunner) -> ToolOutput:
    result = await git.run(["for-each-ref", f"--format={BRANCH_FORMAT}", "refs/heads"])
    branches = parse_branches(result.stdout)
    lines = [
        f"{'*' if b.current else ' '} {b.name} {b.commit}"
        + (f" (upstream {b.upstream})" if b.upstream else "")
        for b in branches
    ]
    return ToolOutput.text(
        "\n".join(lines) if lines else "(no branches yet)",
        data={
            "action": "list",
            "branches": [
                {"name": b.name, "commit": b.commit, "current": b.current, "upstream": b.upstream}
                for b in branches
            ],
        },
    )


async def _branch_name(git: GitRunner, name: str | None) -> str:
    if not name:
        raise ToolValidationFailed("this action needs a branch name in `name`")
    if name.startswith("-"):
        raise ToolValidationFailed(f"branch name {name!r} must not start with '-'")
    check = await git.run(["check-ref-format", "--branch", name], check=False)
    if check.exit_code != 0:
        raise ToolValidationFailed(f"{name!r} is not a valid branch name")
    return name
