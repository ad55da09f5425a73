"""dispatcher.sandbox attacked from inside: what a sandboxed process can see,
reach and write, with real bubblewrap; the start-up decision (probe,
configure) too.

Every secret of a test lives under /var/tmp, never /tmp: the sandbox's /tmp
is a fresh tmpfs, so a secret under /tmp would be "hidden" whatever the
hidden list said and the test could not fail. Each attack has a control run
(the same command without the protection) proving it would have worked.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from dispatcher.sandbox import (
    Sandbox,
    SandboxConfig,
    SandboxUnavailable,
    configure,
    hidden_paths,
    probe,
    reexposed_folders,
)

BWRAP = shutil.which("bwrap")
pytestmark = pytest.mark.skipif(BWRAP is None, reason="bubblewrap (bwrap) is not installed")
RUN_TIMEOUT = 30


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _box(workspace: Path, hidden: tuple[str, ...] = ()) -> Sandbox:
    assert BWRAP is not None
    return Sandbox(SandboxConfig(BWRAP, hidden_paths(hidden)), str(workspace))


def _sh(box: Sandbox, script: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return _run(box.command(["/bin/sh", "-c", script], **kwargs))  # type: ignore[arg-type]


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A folder outside /tmp (which the sandbox replaces), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="toolrelay-sbx-", dir="/var/tmp")).resolve()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server_files(host_dir: Path) -> dict[str, Path]:
    """What a server keeps: a data dir with a canary and a token file, a
    config file holding a token, a credential folder; plus a workspace."""
    data = host_dir / "data"
    data.mkdir()
    (data / "canary.txt").write_text("canary-in-data-dir")
    (data / "token").write_text("token-file-secret")
    config = host_dir / "toolrelay.yaml"
    config.write_text("auth: {tokens: [{name: a, token: config-file-secret-value}]}\n")
    creds = host_dir / "dot-ssh"
    creds.mkdir()
    (creds / "id_ed25519").write_text("private-key-secret")
    workspace = host_dir / "ws"
    workspace.mkdir()
    return {"data": data, "config": config, "creds": creds, "ws": workspace}


SECRETS = ("canary-in-data-dir", "token-file-secret", "config-file-secret-value", "private-key")


def _read_all(files: dict[str, Path]) -> str:
    return (
        f"cat {files['data']}/canary.txt {files['data']}/token {files['config']} "
        f"{files['creds']}/id_ed25519; ls -A {files['data']} {files['creds']}"
    )


def test_every_hidden_thing_is_invisible(server_files: dict[str, Path]) -> None:
    files = server_files
    script = _read_all(files)
    control = _sh(_box(files["ws"]), script)
    assert all(secret in control.stdout for secret in SECRETS), control
    hidden = (str(files["data"]), str(files["config"]), str(files["data"] / "token"))
    box = _box(files["ws"], (*hidden, str(files["creds"])))
    for view in ("full", "system"):
        done = _sh(box, script, host_view=view)
        leaked = [s for s in SECRETS if s in done.stdout + done.stderr]
        assert not leaked, (view, done)
    # And nothing of them can be written either (the config is a /dev/null bind).
    done = _sh(box, f"echo x > {files['config']}; echo x > {files['data']}/new")
    assert files["config"].read_text().startswith("auth:")
    assert not (files["data"] / "new").exists()


def test_a_symlink_in_the_workspace_does_not_reach_a_hidden_path(
    server_files: dict[str, Path],
) -> None:
    files = server_files
    (files["ws"] / "link-data").symlink_to(files["data"])
    (files["ws"] / "link-config").symlink_to(files["config"])
    box = _box(files["ws"], (str(files["data"]), str(files["config"])))
    done = _sh(box, "cat link-data/canary.txt link-data/token link-config")
    assert not any(s in done.stdout for s in SECRETS), done


@pytest.fixture
def unix_listeners() -> Iterator[list[str]]:
    """Host unix sockets a sandboxed process must not reach: one in /run (where
    docker, dbus and ssh-agent sockets live), one in /tmp, one abstract."""
    paths = [f"/run/toolrelay-test-{uuid.uuid4().hex[:8]}.sock"]
    paths.append(f"/tmp/toolrelay-test-{uuid.uuid4().hex[:8]}.sock")
    abstract = f"\0toolrelay-test-{uuid.uuid4().hex[:8]}"
    socks = []
    try:
        for path in [*paths, abstract]:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(path)
            s.listen(8)
            socks.append(s)
        yield [*paths, "@" + abstract[1:]]
    finally:
        for s in socks:
            s.close()
        for path in paths:
            Path(path).unlink(missing_ok=True)


CONNECT = (
    "import socket, sys\n"
    "for p in sys.argv[1:]:\n"
    "    s = socket.socket(socket.AF_UNIX)\n"
    "    a = '\\0' + p[1:] if p.startswith('@') else p\n"
    "    try:\n"
    "        s.connect(a); print('CONNECTED', p)\n"
    "    except OSError as e:\n"
    "        print('refused', p, e)\n"
)


def test_host_unix_sockets_are_unreachable(host_dir: Path, unix_listeners: list[str]) -> None:
    python = shutil.which("python3") or "/usr/bin/python3"
    argv = [python, "-c", CONNECT, *unix_listeners]
    control = _run(argv)
    assert control.stdout.count("CONNECTED") == len(unix_listeners), control
    done = _run(_box(host_dir).command(argv))
    assert "CONNECTED" not in done.stdout, done
    refused = [line for line in done.stdout.splitlines() if line.startswith("refused ")]
    assert len(refused) == len(unix_listeners), done


def test_no_host_process_is_visible(host_dir: Path) -> None:
    me = os.getpid()
    done = _sh(
        _box(host_dir), "ls /proc | grep -E '^[0-9]+$'; cat /proc/[0-9]*/cmdline | tr '\\0' ' '"
    )
    pids = [line for line in done.stdout.split() if line.isdigit()]
    assert pids and len(pids) <= 4, done.stdout  # bwrap's init, sh, ls, grep at most
    assert "pytest" not in done.stdout and str(me) not in pids
    # /proc of the host shows this test's own process: the check can tell.
    assert "pytest" in Path(f"/proc/{me}/cmdline").read_bytes().decode(errors="replace")
    ps = shutil.which("ps")
    if ps:
        listing = _run(_box(host_dir).command([ps, "-eo", "pid,args"]))
        assert "pytest" not in listing.stdout and len(listing.stdout.splitlines()) <= 3, listing


def test_only_the_workspace_and_extra_writable_are_writable(host_dir: Path) -> None:
    ws = host_dir / "ws"
    ws.mkdir()
    scratch = Path(tempfile.mkdtemp(prefix="toolrelay-scratch-"))  # under /tmp: bound after it
    outside = host_dir / "outside.txt"
    try:
        script = f"echo w > {ws}/in.txt; echo s > {scratch}/s.txt; echo o > {outside}; echo done"
        done = _sh(_box(ws), script, extra_writable=[str(scratch)])
        assert "done" in done.stdout
        assert (ws / "in.txt").read_text() == "w\n"
        assert (scratch / "s.txt").read_text() == "s\n"
        assert not outside.exists() and "Read-only file system" in done.stderr
        # Read-only workspace: the search tools' mode.
        ro = _sh(_box(ws), f"echo x > {ws}/ro.txt", writable_workspace=False)
        assert ro.returncode != 0 and not (ws / "ro.txt").exists()
        # Control: outside the sandbox the same write lands.
        _run(["/bin/sh", "-c", f"echo o > {outside}"])
        assert outside.exists()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture
async def tcp_listener() -> AsyncIterator[int]:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def test_network_is_unreachable_unless_asked(host_dir: Path, tcp_listener: int) -> None:
    python = shutil.which("python3") or "/usr/bin/python3"
    code = (
        "import socket\ntry:\n"
        f"    socket.create_connection(('127.0.0.1', {tcp_listener}), timeout=3)\n"
        "    print('REACHED')\n"
        "except OSError as e:\n    print('unreachable', e)\n"
    )

    async def run(argv: list[str]) -> str:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL
        )
        out, _ = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT)
        return out.decode()

    box = _box(host_dir)
    assert "unreachable" in await run(box.command([python, "-c", code]))
    # The per-tool opt-in keeps the host network: the check can tell.
    assert "REACHED" in await run(box.command([python, "-c", code], network=True))


def test_system_view_shows_programs_but_no_homes_or_secrets(host_dir: Path) -> None:
    box = _box(host_dir)
    script = (
        "for p in /root /home /work /etc/shadow /etc/ssh /var/lib /opt /srv; do "
        "[ -e $p ] && echo VISIBLE $p; done; echo ran"
    )
    done = _sh(box, script, host_view="system")
    assert "ran" in done.stdout, done
    assert "VISIBLE" not in done.stdout, done.stdout
    # Installed programs still run there (patch, git, rg are started this way).
    assert _run(box.command(["/usr/bin/env", "true"], host_view="system")).returncode == 0
    # The full view does show them: the check can tell.
    full = _sh(box, script)
    assert "VISIBLE /etc/shadow" in full.stdout and "VISIBLE /root" in full.stdout


def test_probe_and_configure() -> None:
    assert BWRAP is not None
    assert probe() == (BWRAP, "")
    config, reason = configure(None, ["~/.ssh", "/var/tmp/./x"])
    assert config is not None and reason == ""
    assert config.bwrap == BWRAP
    assert os.path.realpath(os.path.expanduser("~/.ssh")) in config.hidden
    assert "/var/tmp/x" in config.hidden
    assert configure(False, []) == (None, "turned off by workspaces.shell.sandbox: false")
    missing = "/nonexistent/bwrap"
    config, reason = configure(None, [], bwrap=missing)
    assert config is None and "bwrap could not run" in reason
    with pytest.raises(SandboxUnavailable, match=r"workspaces\.shell\.sandbox is true"):
        configure(True, [], bwrap=missing)


def test_probe_reports_a_failing_bwrap(host_dir: Path) -> None:
    fake = host_dir / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permission to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    exe, reason = probe(str(fake))
    assert exe is None
    assert reason == "bwrap failed: bwrap: No permission to create new namespace"


def test_a_trusted_folder_under_tmp_is_shown_again_without_its_hidden_paths(
    host_dir: Path,
) -> None:
    """An admin-configured program living under /tmp (a venv in a checkout
    there) must still run in the sandbox's fresh /tmp, and showing its folder
    again must not uncover a hidden path inside that folder."""
    checkout = Path(tempfile.mkdtemp(prefix="toolrelay-trusted-", dir="/tmp")).resolve()
    try:
        program = checkout / "venv" / "bin" / "tool"
        program.parent.mkdir(parents=True)
        program.write_text("#!/bin/sh\necho trusted-ran\n")
        program.chmod(0o755)
        secret_dir = checkout / "data"
        secret_dir.mkdir()
        (secret_dir / "token").write_text("canary-reexposed")
        workspace = host_dir / "ws"
        workspace.mkdir()
        shown = reexposed_folders([str(program), "--flag", "/not/there"])
        assert shown == [str(checkout)]
        box = _box(workspace, hidden=(str(secret_dir),))
        without = _run(box.command([str(program)]))
        assert without.returncode != 0  # the control: /tmp is fresh inside
        ran = _run(box.command([str(program)], extra_readable=shown))
        assert ran.stdout.strip() == "trusted-ran", ran.stderr
        peek = _sh(box, f"cat {secret_dir}/token; ls {secret_dir}", extra_readable=shown)
        assert "canary-reexposed" not in peek.stdout + peek.stderr
        assert "token" not in peek.stdout
    finally:
        shutil.rmtree(checkout, ignore_errors=True)
