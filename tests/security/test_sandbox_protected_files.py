"""Attack: write a protected file from inside the sandbox, however it is spelled.

``guardrails.protected_files`` is refused in Python first (the explained
refusal); this file attacks the second layer: bubblewrap mounts that make
the protected paths read-only inside every sandbox, so no option spelling
(``sort -o.env``, ``cp x .env``, ``python -c "open('.env','w')"``), no
rename of the folder around it, no git checkout of a branch that changes it,
and no swap of a name for a link while the sandbox starts can write them.
Secret patterns the admin hides (``workspaces.shell.sandbox_hide_files``)
cannot be read.

Real bubblewrap, real processes; the last tests go through a real server
(a shell command, a hook) started by the harness.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.sandbox import Sandbox, SandboxConfig
from dispatcher.sandbox_files import WorkspaceGlobs
from tests.harness import ServerProcess
from tests.server.support import new_session, start_turn, use, wait_turn

BWRAP = shutil.which("bwrap")
pytestmark = pytest.mark.skipif(BWRAP is None, reason="bubblewrap (bwrap) is not installed")
RUN_TIMEOUT = 30
PROTECTED = (".env", "secrets/**", "config/prod.yml")
HIDDEN = ("*.pem",)
ORIGINAL = {
    ".env": "TOKEN=original\n",
    "app/.env": "APP=original\n",
    "secrets/key": "key-original\n",
    "config/prod.yml": "prod: original\n",
}

# Ways a process writes a file; {t} is the target (workspace-relative).
WRITERS = (
    "sort -o{t} src.txt",
    "sort -uo {t} src.txt",
    "sort --o={t} src.txt",
    "sort --outp={t} src.txt",
    "cp src.txt {t}",
    "cp --remove-destination src.txt {t}",
    "tee {t} < src.txt",
    "dd if=src.txt of={t}",
    "echo pwned > {t}",
    "echo pwned >> {t}",
    "truncate -s 0 {t}",
    "rm -f {t} && echo pwned > {t}",
    "mv -f src.txt {t}",
    "ln -sf src.txt {t}",
    "python3 -c \"open('{t}','w').write('pwned')\"",
    "python3 -c \"import os; os.replace('src.txt', '{t}')\"",
    'perl -e \'open(F, ">{t}"); print F "pwned"\'',
    "sed -i s/original/pwned/ {t}",
)
TARGETS = tuple(ORIGINAL)


def _workspace(root: Path) -> Path:
    for rel, text in ORIGINAL.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / "src.txt").write_text("pwned\n", encoding="utf-8")
    (root / "deploy.pem").write_text("-----BEGIN PRIVATE KEY-----\n", encoding="utf-8")
    return root


def _box(root: Path, protected: tuple[str, ...] = PROTECTED) -> Sandbox:
    assert BWRAP is not None
    files = WorkspaceGlobs(read_only=protected, hidden=HIDDEN)
    return Sandbox(SandboxConfig(BWRAP, files=files), str(root))


def _sh(box: Sandbox, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        box.command(["/bin/sh", "-c", script]),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _unchanged(root: Path) -> None:
    for rel, text in ORIGINAL.items():
        path = root / rel
        assert not path.is_symlink(), rel
        assert path.read_text(encoding="utf-8") == text, rel


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return _workspace(tmp_path.resolve() / "ws")


@pytest.mark.parametrize("writer", WRITERS)
def test_no_spelling_writes_a_protected_file(ws: Path, writer: str) -> None:
    box = _box(ws)
    for target in TARGETS:
        _sh(box, writer.format(t=target) + "; mkdir -p secrets; echo new > secrets/new")
    _unchanged(ws)
    assert not (ws / "secrets" / "new").exists()


def test_control_the_same_writers_work_without_protection(ws: Path) -> None:
    """Without the binds the attacks do write: the test above can fail."""
    box = _box(ws, protected=())
    done = _sh(box, "sort -o.env src.txt; python3 -c \"open('app/.env','w').write('x')\"")
    assert done.returncode == 0, done.stderr
    assert (ws / ".env").read_text(encoding="utf-8") == "pwned\n"
    assert (ws / "app" / ".env").read_text(encoding="utf-8") == "x"


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    writer=st.sampled_from(WRITERS),
    target=st.sampled_from(TARGETS),
    via=st.sampled_from(["{t}", "./{t}", "{ws}/{t}", "sub/../{t}"]),
)
def test_property_no_writer_by_any_path_spelling(
    tmp_path_factory: pytest.TempPathFactory, writer: str, target: str, via: str
) -> None:
    root = _workspace(tmp_path_factory.mktemp("prop").resolve())
    (root / "sub").mkdir()
    spelled = via.format(t=target, ws=root)
    _sh(_box(root), writer.format(t=spelled))
    _unchanged(root)


def test_the_folder_around_a_protected_file_cannot_be_renamed_away(ws: Path) -> None:
    # mv app app2 would carry the mount along; a fresh app/.env would be writable.
    done = _sh(_box(ws), "mv app app2 && mkdir app && echo pwned > app/.env")
    assert done.returncode != 0
    assert not (ws / "app2").exists()
    _unchanged(ws)


def _everything(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_a_sandboxed_spawn_creates_nothing_in_the_workspace(tmp_path: Path) -> None:
    """Protected and hidden globs that match nothing (no .env, no secrets/,
    config/ without prod.yml): spawns, writable or not, leave the workspace
    as it was. Nothing appears in the user's checkout."""
    root = tmp_path.resolve() / "empty"
    (root / "config").mkdir(parents=True)
    (root / "src.txt").write_text("x\n", encoding="utf-8")
    before = _everything(root)
    box = _box(root)
    assert _sh(box, "true").returncode == 0
    ro = box.command(["/bin/sh", "-c", "true"], writable_workspace=False)
    assert subprocess.run(ro, timeout=RUN_TIMEOUT, check=False).returncode == 0
    assert _everything(root) == before


def test_a_protected_path_made_in_the_sandbox_is_read_only_from_the_next_spawn(
    tmp_path: Path,
) -> None:
    """A protected path that does not exist is not mounted: a process can
    create it (a new file: there is no secret to overwrite), and every later
    spawn binds it read-only."""
    root = tmp_path.resolve() / "empty"
    root.mkdir()
    box = _box(root)
    _sh(box, "echo first > .env; mkdir secrets; echo first > secrets/k")
    _sh(box, "echo pwned > .env; echo pwned > secrets/k; echo new > secrets/new")
    assert (root / ".env").read_text(encoding="utf-8") == "first\n"
    assert (root / "secrets" / "k").read_text(encoding="utf-8") == "first\n"
    assert not (root / "secrets" / "new").exists()


def test_a_hidden_match_inside_a_protected_folder_is_hidden(ws: Path) -> None:
    (ws / "secrets" / "deploy.pem").write_text("PRIVATE KEY\n", encoding="utf-8")
    done = _sh(_box(ws), "cat secrets/deploy.pem; echo pwned > secrets/key")
    assert "PRIVATE KEY" not in done.stdout
    _unchanged(ws)


def test_a_read_only_spawn_binds_hidden_globs_only(ws: Path) -> None:
    """With the workspace read-only (searches, git's reads) nothing needs a
    read-only bind; hidden globs still hold."""
    argv = _box(ws).command(["/bin/sh", "-c", "cat .env; cat deploy.pem"], writable_workspace=False)
    assert str(ws / ".env") not in argv and str(ws / "secrets") not in argv
    assert str(ws / "deploy.pem") in argv
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    assert "TOKEN=original" in done.stdout and "PRIVATE KEY" not in done.stdout
    assert str(ws / ".env") in _box(ws).command(["true"])  # a writable spawn binds it


def test_git_checkout_of_a_branch_that_changes_a_protected_file_fails(ws: Path) -> None:
    git = ["git", "-C", str(ws), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    subprocess.run([*git, "checkout", "-qb", "evil"], check=True)
    (ws / ".env").write_text("TOKEN=evil\n", encoding="utf-8")
    subprocess.run([*git, "commit", "-qam", "evil"], check=True)
    subprocess.run([*git, "checkout", "-q", "main"], check=True)
    _unchanged(ws)
    _sh(_box(ws), "git checkout -q evil; git checkout -qf evil; git reset -q --hard evil")
    _unchanged(ws)


@pytest.fixture
def outside_secret() -> Iterator[Path]:
    # Under /var/tmp, not /tmp: the sandbox's /tmp is a fresh tmpfs, where the
    # link would lead nowhere and the test could not fail.
    with tempfile.TemporaryDirectory(dir="/var/tmp") as folder:
        secret = Path(folder) / "outside-secret"
        secret.write_text("host secret\n", encoding="utf-8")
        yield secret


@pytest.mark.parametrize("relative", [True, False])
def test_a_name_swapped_for_a_link_while_starting_runs_nothing(
    ws: Path, outside_secret: Path, relative: bool
) -> None:
    """A concurrent process swaps app/.env for a link to an outside secret
    between the expansion and bubblewrap's mount: nothing runs. A relative
    link resolves on both sides of the mount (the check inside refuses it);
    an absolute one already fails in bubblewrap's set-up."""
    argv = _box(ws).command(["/bin/sh", "-c", "echo RAN; cat app/.env"])
    os.replace(ws / "app" / ".env", ws / "app" / "env.bak")
    link = os.path.relpath(outside_secret, ws / "app") if relative else str(outside_secret)
    os.symlink(link, ws / "app" / ".env")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    assert done.returncode != 0, done
    assert "RAN" not in done.stdout and "host secret" not in done.stdout
    if relative:
        assert done.returncode == 126 and "protected path changed" in done.stderr, done


def test_hidden_patterns_cannot_be_read_or_renamed(ws: Path) -> None:
    done = _sh(_box(ws), "cat deploy.pem; cat ./deploy.pem; cp deploy.pem out.txt; mv deploy.pem x")
    assert "PRIVATE KEY" not in done.stdout
    out = ws / "out.txt"
    assert not out.exists() or "PRIVATE KEY" not in out.read_text(encoding="utf-8")
    assert (ws / "deploy.pem").exists()


# -- through the real server: a shell command and a hook, same protection ----


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("protected_server")
    config: dict[str, Any] = {
        "guardrails": {"protected_files": list(PROTECTED)},
        "workspaces": {"shell": {"sandbox_hide_files": list(HIDDEN)}},
        # The shell runs unasked: the guardrail is the only Python check left.
        "policy": {"preset": "yolo"},
        "hooks": {
            "post_tool_use": [
                {
                    "name": "rewrite",
                    "command": "echo hook >> .env; echo hook > app/.env; cat *.pem > leak.txt",
                    "matcher": "read_file",
                }
            ]
        },
    }
    srv = ServerProcess(root, config=config)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


async def test_a_shell_command_and_a_hook_of_the_server_cannot_write(
    server: ServerProcess, ws: Path
) -> None:
    # Names the guardrail cannot see in the text (built at run time): only
    # the sandbox's mounts stand in the way.
    command = (
        "cat deploy.pem > leak2.txt; "
        "python3 -c \"open('.e' + 'nv', 'w').write('pwned')\"; "
        "python3 -c \"open('secr' + 'ets/key', 'w').write('pwned')\""
    )
    async with server.client("alice") as http:
        sid = await new_session(http, ws)
        tid = await start_turn(
            http,
            sid,
            use("t1", "shell", command=command),
            use("t2", "read_file", path="src.txt"),
        )
        turn = await wait_turn(http, sid, tid)
    assert turn["status"] == "completed", turn
    _unchanged(ws)
    # Both ran (each left its file), and neither wrote nor read what it may not.
    for leak in ("leak.txt", "leak2.txt"):
        assert "PRIVATE KEY" not in (ws / leak).read_text(encoding="utf-8")
