"""The git tools against hostile workspaces: a workspace dressed up as a bare
repository, a repository whose config names programs everywhere it can,
``.git`` pointing elsewhere, a crafted HOME, and the sandbox's view.

Every attack uses one "evil" script outside the workspace that appends to a
marker file (also outside). Each fixture first proves that plain git, run
the old way, does run the script (so the test can fail); then every tool is
called and the marker must stay absent after each call.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from dispatcher import ToolError, ToolExecutionError, WorkspaceFileAPI
from dispatcher.sandbox import Sandbox, SandboxConfig, probe
from dispatcher.tool import ToolFactory, ToolOutput
from dispatcher.tools import GitBranchTool, GitCommitTool, GitDiffTool, GitLogTool, GitStatusTool
from tests.dispatcher.tools.support import GIT_ENV, git, make_context, text_of

READ_CALLS: list[tuple[ToolFactory, dict[str, Any]]] = [
    (GitStatusTool, {}),
    (GitDiffTool, {}),
    (GitDiffTool, {"staged": True}),
    (GitDiffTool, {"ref": "HEAD"}),
    (GitLogTool, {}),
    (GitBranchTool, {}),
]
WRITE_CALLS: list[tuple[ToolFactory, dict[str, Any]]] = [
    (GitBranchTool, {"action": "create", "name": "topic"}),
    (GitBranchTool, {"action": "switch", "name": "other"}),
    (GitBranchTool, {"action": "switch", "name": "main"}),
    (GitBranchTool, {"action": "delete", "name": "topic"}),
    (GitCommitTool, {"message": "by paths", "paths": ["app.txt"]}),
    (GitCommitTool, {"message": "everything", "all": True}),
]
ALL_CALLS = READ_CALLS + WRITE_CALLS


class Evil:
    """A script outside the workspace that records every run in a marker file."""

    def __init__(self, base: Path) -> None:
        base.mkdir(exist_ok=True)
        self.marker = base / "PWNED"
        self.script = base / "evil.sh"
        # `cat` keeps it a working filter/pager, so git carries on and a
        # missed run cannot hide behind an error.
        self.script.write_text(f'#!/bin/sh\necho "ran: $0 $*" >> {self.marker}\ncat\n')
        self.script.chmod(0o755)

    @property
    def ran(self) -> bool:
        return self.marker.exists()

    def reset(self) -> None:
        self.marker.unlink(missing_ok=True)


@pytest.fixture
def evil(tmp_path: Path) -> Evil:
    return Evil(tmp_path / "evil")


def plain_git(cwd: Path, *args: str, **env: str) -> None:
    """git the way the old tools ran it (cwd = workspace, repository config
    honoured), outcome ignored: only used to prove an attack is armed."""
    subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV, **env},
        capture_output=True,
        timeout=30,
        check=False,
    )


async def call(
    factory: ToolFactory, args: dict[str, Any], ws: WorkspaceFileAPI, sandbox: Sandbox | None = None
) -> ToolOutput:
    return await factory().execute(args, make_context(ws, sandbox=sandbox))


async def each_call_refused(
    ws: WorkspaceFileAPI, evil: Evil, match: str, calls: list[tuple[ToolFactory, dict[str, Any]]]
) -> None:
    for factory, args in calls:
        with pytest.raises(ToolExecutionError, match=match):
            await call(factory, args, ws)
        assert not evil.ran, f"{factory.__name__}({args}) ran a program: {evil.marker.read_text()}"


# (a) a workspace dressed up as a bare repository -------------------------


def dress_as_bare_repository(root: Path, evil: Evil) -> None:
    (root / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "objects").mkdir()
    (root / "refs" / "heads").mkdir(parents=True)
    (root / "config").write_text(
        "[core]\n"
        "\trepositoryformatversion = 0\n"
        "\tbare = false\n"
        f"\tfsmonitor = {evil.script}\n"
        f"\tpager = {evil.script}\n"
        f"\tworktree = {root}\n"
        '[filter "x"]\n'
        f"\tclean = {evil.script}\n"
        f"\tsmudge = {evil.script}\n"
        f"[alias]\n\tst = !{evil.script}\n"
    )
    (root / ".gitattributes").write_text("* filter=x\n")
    (root / "app.txt").write_text("hello\n")


async def test_workspace_dressed_as_bare_repository(
    root: Path, ws: WorkspaceFileAPI, evil: Evil
) -> None:
    dress_as_bare_repository(root, evil)
    plain_git(root, "status")
    assert evil.ran, "the crafted workspace must fool plain git, or this test proves nothing"
    evil.reset()
    await each_call_refused(ws, evil, "not a git repository", ALL_CALLS)


async def test_bare_repository_beside_an_empty_dot_git(
    root: Path, ws: WorkspaceFileAPI, evil: Evil
) -> None:
    dress_as_bare_repository(root, evil)
    (root / ".git").mkdir()
    await each_call_refused(ws, evil, "not a git repository", ALL_CALLS)


# (b) a real repository whose config names programs everywhere -----------


def hostile_config(evil: Evil, hooks: Path, elsewhere: Path) -> str:
    e = evil.script
    return (
        "[core]\n"
        f"\tfsmonitor = {e}\n"
        f"\tpager = {e}\n"
        f"\thooksPath = {hooks}\n"
        f"\tworktree = {elsewhere}\n"
        f"\teditor = {e}\n"
        f"\tsshCommand = {e}\n"
        f"\taskPass = {e}\n"
        f"\tgitProxy = {e}\n"
        f"\talternateRefsCommand = {e}\n"
        f"\tattributesFile = {elsewhere}/attributes\n"
        '[filter "evil"]\n'
        f"\tclean = {e}\n"
        f"\tsmudge = {e}\n"
        "\trequired = true\n"
        '[filter "proc"]\n'
        f"\tprocess = {e}\n"
        '[filter "we=ird"]\n'
        f"\tclean = {e}\n"
        f"\tsmudge = {e}\n"
        f"[diff]\n\texternal = {e}\n"
        '[diff "evil"]\n'
        f"\ttextconv = {e}\n"
        f"\tcommand = {e}\n"
        f'[merge "evil"]\n\tdriver = {e}\n'
        f"[credential]\n\thelper = {e}\n"
        f'[credential "https://example.invalid"]\n\thelper = {e}\n'
        f"[alias]\n\tst = !{e}\n"
        f"[pager]\n\tstatus = {e}\n\tdiff = {e}\n\tlog = {e}\n\tbranch = {e}\n"
        f"[gpg]\n\tprogram = {e}\n"
        f'[gpg "ssh"]\n\tprogram = {e}\n\tdefaultKeyCommand = {e}\n'
        "[commit]\n\tgpgSign = true\n"
        "[tag]\n\tgpgSign = true\n"
        "[log]\n\tshowSignature = true\n"
        f"[sequence]\n\teditor = {e}\n"
        "[status]\n\tsubmoduleSummary = true\n"
        "[protocol]\n\tallow = always\n"
        '[protocol "ext"]\n\tallow = always\n'
        '[remote "origin"]\n'
        "\turl = ext::sh -c touch% /nonexistent\n"
        f"\tuploadpack = {e}\n"
        f"\treceivepack = {e}\n"
    )


HOOKS = (
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "post-checkout",
    "reference-transaction",
    "pre-auto-gc",
    "post-index-change",
)


@pytest.fixture
def hostile_repo(root: Path, tmp_path: Path, evil: Evil) -> Path:
    git(root, "init", "-q", "-b", "main")
    (root / ".gitattributes").write_text(
        "*.txt filter=evil diff=evil merge=evil\n*.p filter=proc\n*.w filter=we=ird\n"
    )
    (root / "app.txt").write_text("one\n")
    (root / "data.p").write_text("p\n")
    (root / "data.w").write_text("w\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial")
    git(root, "switch", "-q", "-c", "other")
    (root / "app.txt").write_text("other\n")
    (root / "data.w").write_text("other w\n")
    git(root, "commit", "-q", "-am", "other side")
    git(root, "switch", "-q", "main")
    # Hooks both where core.hooksPath points and in the default place.
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in HOOKS:
        for folder in (hooks, root / ".git" / "hooks"):
            hook = folder / name
            hook.write_text(f"#!/bin/sh\necho hook {name} >> {evil.marker}\n")
            hook.chmod(0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "outside-only.txt").write_text("not workspace\n")
    (elsewhere / "attributes").write_text("* filter=evil diff=evil\n")
    with (root / ".git" / "config").open("a") as f:
        f.write(hostile_config(evil, hooks, elsewhere))
    # Stat-dirty files, so that status and diff have to read (clean) them.
    (root / "app.txt").write_text("two\n")
    (root / "data.p").write_text("q\n")
    (root / "data.w").write_text("x\n")
    (root / "new.txt").write_text("new\n")
    return root


async def test_hostile_config_is_armed(hostile_repo: Path, evil: Evil) -> None:
    # What plain git does with this repository: runs the script.
    plain_git(hostile_repo, "--work-tree=.", "status")
    assert evil.ran
    evil.reset()
    plain_git(hostile_repo, "--work-tree=.", "diff")
    assert evil.ran


async def test_hostile_config_runs_nothing(
    hostile_repo: Path, ws: WorkspaceFileAPI, evil: Evil
) -> None:
    await hostile_calls(hostile_repo, ws, evil, None)


async def test_hostile_config_in_the_sandbox(
    hostile_repo: Path, ws: WorkspaceFileAPI, evil: Evil, sandbox: Sandbox
) -> None:
    # The script lies outside the workspace, so inside the sandbox it could
    # not even be found: this checks that the tools still work there.
    await hostile_calls(hostile_repo, ws, evil, sandbox)


async def hostile_calls(
    hostile_repo: Path, ws: WorkspaceFileAPI, evil: Evil, sandbox: Sandbox | None
) -> None:
    outcomes: dict[str, str] = {}
    for factory, args in ALL_CALLS:
        name = f"{factory.__name__}{args}"
        try:
            out = await call(factory, args, ws, sandbox)
            outcomes[name] = "ok"
        except ToolError as exc:  # refusing clearly is allowed; running a program is not
            outcomes[name] = f"refused: {exc}"
            assert str(exc), name
            out = None
        assert not evil.ran, f"{name} ran a program: {evil.marker.read_text()}"
        if factory is GitStatusTool and out is not None:
            paths = {e["path"] for e in out.data["entries"]}
            # The work tree is the workspace, whatever core.worktree says.
            assert "outside-only.txt" not in paths
            assert {"app.txt", "new.txt"} <= paths
    # Neutralised, not merely refused: the everyday calls still work.
    for key in ("GitStatusTool{}", "GitDiffTool{}", "GitLogTool{}", "GitBranchTool{}"):
        assert outcomes[key] == "ok", outcomes
    assert outcomes["GitCommitTool{'message': 'everything', 'all': True}"] == "ok", outcomes
    assert git(hostile_repo, "log", "-1", "--format=%s").strip() == "everything"
    # The smudge filter did not run on switch: contents are the stored ones.
    assert git(hostile_repo, "show", "HEAD:data.w") == "x\n"


async def test_diff_is_the_plain_diff(hostile_repo: Path, ws: WorkspaceFileAPI, evil: Evil) -> None:
    out = await call(GitDiffTool, {"path": "app.txt"}, ws)
    assert "-one\n+two\n" in text_of(out)
    assert not evil.ran


async def test_includes_are_refused(
    root: Path, ws: WorkspaceFileAPI, evil: Evil, tmp_path: Path
) -> None:
    git(root, "init", "-q", "-b", "main")
    (root / "app.txt").write_text("a\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial")
    included = tmp_path / "included.cfg"
    included.write_text(
        f'[core]\n\tfsmonitor = {evil.script}\n[filter "inc"]\n\tclean = {evil.script}\n'
    )
    (root / ".gitattributes").write_text("* filter=inc\n")
    (root / "app.txt").write_text("b\n")
    for key in ("include.path", f"includeIf.gitdir:{root}/.path"):
        git(root, "config", key, str(included))
        plain_git(root, "status")
        assert evil.ran
        evil.reset()
        await each_call_refused(ws, evil, "includ", ALL_CALLS)
        git(root, "config", "--unset", key)


# (c), (d) and friends: .git that points elsewhere --------------------------


@pytest.fixture
def outside_repo(tmp_path: Path, evil: Evil) -> Path:
    repo = tmp_path / "outside-repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "secret.txt").write_text("secret\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "outside secret")
    git(repo, "config", "core.fsmonitor", str(evil.script))
    return repo


def outside_head(repo: Path) -> str:
    return (repo / ".git" / "refs" / "heads" / "main").read_text()


async def test_dot_git_symlink_is_refused(
    root: Path, ws: WorkspaceFileAPI, evil: Evil, outside_repo: Path
) -> None:
    (root / ".git").symlink_to(outside_repo / ".git")
    (root / "app.txt").write_text("a\n")
    head = outside_head(outside_repo)
    await each_call_refused(ws, evil, "not a git repository.*symbolic link", ALL_CALLS)
    assert outside_head(outside_repo) == head


async def test_gitdir_file_is_refused(
    root: Path, ws: WorkspaceFileAPI, evil: Evil, outside_repo: Path
) -> None:
    (root / ".git").write_text(f"gitdir: {outside_repo / '.git'}\n")
    plain_git(root, "status")
    assert evil.ran
    evil.reset()
    head = outside_head(outside_repo)
    await each_call_refused(ws, evil, r"not a git repository.*gitdir", ALL_CALLS)
    assert outside_head(outside_repo) == head


@pytest.fixture
def repo(root: Path) -> Path:
    git(root, "init", "-q", "-b", "main")
    (root / "app.txt").write_text("one\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial")
    git(root, "branch", "other")
    return root


def plant_commondir(git_dir: Path, outside: Path) -> None:
    (git_dir / "commondir").write_text(str(outside / ".git"))


def plant_alternates(git_dir: Path, outside: Path) -> None:
    (git_dir / "objects" / "info" / "alternates").write_text(str(outside / ".git" / "objects"))


def plant_config_symlink(git_dir: Path, outside: Path) -> None:
    (git_dir / "config").unlink()
    (git_dir / "config").symlink_to(outside / ".git" / "config")


def plant_objects_symlink(git_dir: Path, outside: Path) -> None:
    shutil.rmtree(git_dir / "objects" / "info")
    (git_dir / "objects" / "info").symlink_to(outside / ".git" / "objects" / "info")


@pytest.mark.parametrize(
    ("plant", "match"),
    [
        (plant_commondir, "commondir"),
        (plant_alternates, "alternates"),
        (plant_config_symlink, r"\.git/config is a symbolic link"),
        (plant_objects_symlink, r"\.git/objects/info is a symbolic link"),
    ],
    ids=["commondir", "alternates", "config-symlink", "objects-symlink"],
)
async def test_repository_reaching_outside_is_refused(
    repo: Path,
    ws: WorkspaceFileAPI,
    evil: Evil,
    outside_repo: Path,
    plant: Callable[[Path, Path], None],
    match: str,
) -> None:
    plant(repo / ".git", outside_repo)
    await each_call_refused(ws, evil, match, ALL_CALLS)


# (e) the server's HOME and environment --------------------------------------


async def test_crafted_home_has_no_effect(
    repo: Path, ws: WorkspaceFileAPI, evil: Evil, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".gitconfig").write_text(
        f"[core]\n\tfsmonitor = {evil.script}\n\tpager = {evil.script}\n"
        f'[filter "home"]\n\tclean = {evil.script}\n\tsmudge = {evil.script}\n'
        "[user]\n\tname = Home\n\temail = home@example.invalid\n"
    )
    (home / ".config" / "git" / "attributes").write_text("* filter=home\n")
    (home / ".config" / "git" / "config").write_text(f"[core]\n\tfsmonitor = {evil.script}\n")
    for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    (repo / "app.txt").write_text("two\n")
    (repo / "new.txt").write_text("new\n")
    # Names the filter only ~/.gitconfig defines: the per-repository
    # neutralising never sees it, so only ignoring HOME keeps it from running.
    (repo / ".gitattributes").write_text("* filter=home\n")
    plain_git(repo, "status", GIT_CONFIG_GLOBAL=str(home / ".gitconfig"))
    assert evil.ran
    evil.reset()
    # The server's own git variables are not inherited either.
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", str(evil.script))
    monkeypatch.setenv("GIT_PAGER", str(evil.script))
    for factory, args in ALL_CALLS:
        await call(factory, args, ws)
        assert not evil.ran, f"{factory.__name__}({args}) ran a program"
    # ~/.gitconfig's identity was not used: the tool's fallback was.
    monkeypatch.delenv("GIT_DIR")
    assert git(repo, "log", "-1", "--format=%ae").strip() == "toolrelay@localhost"


# (f) inside the real sandbox --------------------------------------------------


@pytest.fixture
def sandbox(root: Path) -> Sandbox:
    exe, reason = probe(shutil.which("bwrap"))
    if exe is None:
        pytest.skip(f"no working sandbox here: {reason}")
    return Sandbox(SandboxConfig(bwrap=exe), str(root))


async def test_tools_work_in_the_sandbox(
    repo: Path, ws: WorkspaceFileAPI, sandbox: Sandbox
) -> None:
    def run(factory: ToolFactory, args: dict[str, Any]) -> Awaitable[ToolOutput]:
        return call(factory, args, ws, sandbox)

    (repo / "app.txt").write_text("two\n")
    (repo / "new.txt").write_text("new\n")
    status = await run(GitStatusTool, {})
    assert {e["path"] for e in status.data["entries"]} == {"app.txt", "new.txt"}
    diff = await run(GitDiffTool, {})
    assert "-one\n+two\n" in text_of(diff)
    committed = await run(GitCommitTool, {"message": "in the sandbox", "all": True})
    assert len(committed.data["sha"]) == 40
    log = await run(GitLogTool, {})
    assert [c["subject"] for c in log.data["commits"]] == ["in the sandbox", "initial"]
    await run(GitBranchTool, {"action": "create", "name": "topic"})
    switched = await run(GitBranchTool, {"action": "switch", "name": "other"})
    assert switched.data["files_changed"] == ["app.txt", "new.txt"]
    assert (repo / "app.txt").read_text() == "one\n"
    listed = await run(GitBranchTool, {})
    assert [b["name"] for b in listed.data["branches"]] == ["main", "other", "topic"]
    assert (await run(GitStatusTool, {})).data["clean"] is True


async def test_sandbox_hides_what_lies_outside(
    repo: Path, ws: WorkspaceFileAPI, sandbox: Sandbox, outside_repo: Path
) -> None:
    # A loose ref symlinked to a ref file of a repository outside: plain git
    # follows it (the top-level check does not walk refs/); in the sandbox
    # nothing outside the workspace exists, so it leads nowhere.
    leak = repo / ".git" / "refs" / "heads" / "leak"
    leak.symlink_to(outside_repo / ".git" / "refs" / "heads" / "main")
    secret_sha = outside_head(outside_repo).strip()
    unsandboxed = await call(GitBranchTool, {}, ws)
    assert any(secret_sha.startswith(b["commit"]) for b in unsandboxed.data["branches"])
    try:
        sandboxed = await call(GitBranchTool, {}, ws, sandbox)
    except ToolError:
        return  # refusing is fine too
    names = [b["name"] for b in sandboxed.data["branches"]]
    assert "leak" not in names and names == ["main", "other"]


# Submodules: git would run `git status` inside one, under its own config --------


async def test_submodule_config_runs_nothing(
    repo: Path, ws: WorkspaceFileAPI, evil: Evil, tmp_path: Path
) -> None:
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git(upstream, "init", "-q", "-b", "main")
    (upstream / "lib.txt").write_text("lib\n")
    git(upstream, "add", ".")
    git(upstream, "commit", "-q", "-m", "lib")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(upstream), "sub")
    git(repo, "config", "-f", ".gitmodules", "submodule.sub.ignore", "none")
    git(repo, "commit", "-q", "-am", "add submodule")
    # Not "active" in .git/config: only .gitmodules names it.
    git(repo, "config", "--remove-section", "submodule.sub")
    sub_config = repo / ".git" / "modules" / "sub" / "config"
    with sub_config.open("a") as f:
        f.write(f'[filter "subevil"]\n\tclean = {evil.script}\n\trequired = true\n')
    (repo / "sub" / ".gitattributes").write_text("* filter=subevil\n")
    (repo / "sub" / "lib.txt").write_text("LIB\n")  # same size: git must read it
    plain_git(repo, "status")
    assert evil.ran
    evil.reset()
    calls: list[tuple[ToolFactory, dict[str, Any]]] = [
        *READ_CALLS,
        (GitCommitTool, {"message": "nothing staged"}),
        (GitBranchTool, {"action": "switch", "name": "other"}),
        (GitCommitTool, {"message": "everything", "all": True}),
    ]
    for factory, args in calls:
        with contextlib.suppress(ToolError):  # refusing is fine; running a program is not
            await call(factory, args, ws)
        assert not evil.ran, f"{factory.__name__}({args}) ran a program"
