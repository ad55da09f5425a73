"""git_branch: list, create, switch to or delete (merged) branches.

A switch rewrites the files that differ between HEAD and the target branch,
so its effects list them (``switch_changes``) for the guardrails and the
person confirming, and the switch refuses to run if HEAD or the branch moved
after they were checked (``CheckedSwitch``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dispatcher.errors import ToolExecutionError, ToolValidationFailed
from dispatcher.tool import ConfirmationPreview, ToolContext, ToolEffects, ToolOutput
from dispatcher.tools.common import check_cancelled, object_schema
from dispatcher.tools.git.base import GitTool
from dispatcher.tools.git.outputs import BRANCH_OUTPUT
from dispatcher.tools.git.parse import BRANCH_FORMAT, parse_branches
from dispatcher.tools.git.runner import GitRunner, check_revision
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects, ToolDefinition

if TYPE_CHECKING:
    from dispatcher.sandbox import Sandbox


class GitBranchTool(GitTool):
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
