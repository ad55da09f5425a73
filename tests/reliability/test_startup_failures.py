"""Start-up failures: each is one clear line on stderr, no traceback, the
documented exit code (1 for start-up failures, 2 for configuration errors,
see specs/server-api.md), and nothing left behind: no data dir, no token, no
database a failed start created.

Every case runs the real ``toolrelay serve`` in a subprocess.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import REPO_ROOT, _scrubbed_env

RUN_TIMEOUT = 60.0


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``toolrelay serve ARGS`` to completion (bounded); it must not start serving."""
    full_env = _scrubbed_env()
    full_env["PYTHONPATH"] = str(REPO_ROOT)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1", *args],
        cwd=REPO_ROOT,
        env=full_env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def assert_one_clear_line(
    result: subprocess.CompletedProcess[str], code: int, *needles: str
) -> str:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stdout == "", "a failed start printed a banner: " + result.stdout
    ours = [line for line in result.stderr.splitlines() if line.startswith("toolrelay:")]
    assert len(ours) == 1, result.stderr
    for needle in needles:
        assert needle in ours[0], ours[0]
    return ours[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


def test_port_in_use_exits_1_and_creates_nothing(tmp_path: Path, busy_port: int) -> None:
    data = tmp_path / "nested" / "data"
    result = serve("--port", str(busy_port), "--data-dir", str(data))
    assert_one_clear_line(result, 1, f"127.0.0.1:{busy_port}", "in use")
    assert tree(tmp_path) == set()  # no data dir, no token


def test_port_in_use_leaves_an_existing_data_dir_as_it_was(tmp_path: Path, busy_port: int) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "keep.txt").write_text("x")
    result = serve("--port", str(busy_port), "--data-dir", str(data))
    assert_one_clear_line(result, 1, "in use")
    assert tree(tmp_path) == {"data", "data/keep.txt"}


def test_data_dir_that_is_a_file_exits_1(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    for data in (afile, afile / "data"):
        result = serve("--port", "0", "--data-dir", str(data))
        assert_one_clear_line(result, 1, str(data), "not a directory")
    assert tree(tmp_path) == {"afile"}
    assert afile.read_text() == "not a directory"


def test_read_only_data_dir_exits_1(tmp_path: Path) -> None:
    """Unwritable for real, even for root: a read-only tmpfs."""
    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        for data in (ro, ro / "data"):
            result = serve("--port", "0", "--data-dir", str(data))
            assert_one_clear_line(result, 1, str(data))
        assert tree(ro) == set()
    finally:
        subprocess.run(["umount", str(ro)], check=True, timeout=30)


def test_bad_config_exits_2_and_creates_nothing(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("server:\n  prot: 1\n")
    data = tmp_path / "data"
    result = serve("--port", "0", "--data-dir", str(data), "--config", str(config))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "server.prot" in result.stderr
    assert tree(tmp_path) == {"config.yaml"}


def test_unusable_database_exits_1_and_removes_only_what_it_made(tmp_path: Path) -> None:
    """The runtime's own start fails (a state database that is not one): one
    line, no traceback; the files that were there stay, nothing is added."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "state.sqlite3").write_bytes(os.urandom(4096))
    before = tree(tmp_path)
    result = serve("--port", "0", "--data-dir", str(data))
    assert_one_clear_line(result, 1, "state database", "not a database")
    assert tree(tmp_path) == before
