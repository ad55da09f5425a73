"""The optional extras: a default server runs without any of them, and a
feature whose extra is missing says so in one line naming the extra.

"Missing" is real here, not a mock: each check runs in a fresh interpreter
whose ``sitecustomize`` (put first on ``PYTHONPATH``) refuses to import the
extra's packages, as if pip had never installed them; the feature's own code
runs unchanged. The lock (constraints.txt) is checked against pyproject.toml.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from protocol.extras import EXTRAS, MissingExtra, require
from tests.harness import REPO_ROOT, ServerProcess
from tests.server.support import new_session, result_text, start_turn, wait_turn

# What uninstalling each extra takes away (opentelemetry-api stays: fastapi needs it).
REMOVED: dict[str, tuple[str, ...]] = {
    "code": EXTRAS["code"].modules,
    "otel": ("opentelemetry.sdk", "opentelemetry.exporter"),
    "redis": ("redis", "hiredis"),
    "tui": ("textual",),
}

SITECUSTOMIZE = '''
import os
import sys
from importlib.abc import MetaPathFinder

_BLOCKED = tuple(filter(None, os.environ.get("TOOLRELAY_TEST_NOT_INSTALLED", "").split(",")))


class _NotInstalled(MetaPathFinder):
    """Imports of the named packages fail as if they were not installed."""

    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in _BLOCKED):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
'''


@pytest.fixture
def without(tmp_path: Path) -> dict[str, str]:
    """The environment of an interpreter that lacks what TOOLRELAY_TEST_NOT_INSTALLED names."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TOOLRELAY_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO_ROOT)])
    return env


def _run(
    env: dict[str, str], extras: list[str], code: str, *args: str
) -> subprocess.CompletedProcess[str]:
    env = dict(env, TOOLRELAY_TEST_NOT_INSTALLED=",".join(m for e in extras for m in REMOVED[e]))
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _line(extra: str) -> str:
    return str(MissingExtra(extra))


def test_the_blocker_really_removes_a_package(without: dict[str, str]) -> None:
    done = _run(without, ["code"], "import tree_sitter")
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'tree_sitter'" in done.stderr


SERVE = "import sys; from server.cli import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.parametrize(
    ("extra", "args", "env"),
    [
        ("redis", ["--redis", "redis://127.0.0.1:9/0"], {}),
        ("otel", [], {"OTEL_TRACES_EXPORTER": "console"}),
        ("otel", [], {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}),
    ],
)
def test_serve_stops_at_start_up_when_a_configured_feature_lacks_its_extra(
    without: dict[str, str], tmp_path: Path, extra: str, args: list[str], env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    argv = ["serve", "--port", "0", "--data-dir", str(data), *args]
    done = _run(dict(without, **env), [extra], SERVE, *argv)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"toolrelay: {_line(extra)}"]
    assert not data.exists()  # stopped before the data dir was made


def test_the_tui_without_its_extra_says_which_to_install(without: dict[str, str]) -> None:
    done = _run(without, ["tui"], SERVE, "tui")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"toolrelay tui: {_line('tui')}"]


async def test_the_default_server_runs_without_any_extra(
    without: dict[str, str], tmp_path: Path
) -> None:
    """The real server, none of the extras installed: it starts, answers, and
    a code tool's call ends as a tool error naming the 'code' extra."""
    blocked = ",".join(m for modules in REMOVED.values() for m in modules)
    env = {"PYTHONPATH": without["PYTHONPATH"], "TOOLRELAY_TEST_NOT_INSTALLED": blocked}
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "m.py").write_text("def f():\n    pass\n", encoding="utf-8")
    server = ServerProcess(tmp_path / "server", env=env).start()  # waits for /healthz 200
    try:
        async with server.client() as http:
            session_id = await new_session(http, workspace)
            calls = [
                {"id": "tu_1", "name": "list_symbols", "input": {"path": "m.py"}},
                {"id": "tu_2", "name": "find_symbol", "input": {"name": "f"}},
            ]
            turn = await wait_turn(http, session_id, await start_turn(http, session_id, *calls))
    finally:
        server.stop()
    assert turn["status"] == "completed", turn
    assert [r["is_error"] for r in turn["results"]] == [True, True]
    for result in turn["results"]:
        assert result_text(result).strip().endswith(_line("code")), result
    assert "Traceback" not in server.stderr()


def test_every_extra_is_installed_here() -> None:
    for extra in EXTRAS:
        require(extra)  # the test environment (scripts/bootstrap) installs them all


def _pyproject() -> dict[str, Any]:
    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        project: dict[str, Any] = tomllib.load(f)["project"]
    return project


def test_the_extras_table_names_the_extras_of_pyproject() -> None:
    assert set(_pyproject()["optional-dependencies"]) - {"dev"} == set(EXTRAS)


def _lock() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO_ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version
    return pins


def test_the_lock_pins_every_requirement_within_its_bounds() -> None:
    project = _pyproject()
    requirements: list[str] = list(project["dependencies"])
    requirements += [r for group in project["optional-dependencies"].values() for r in group]
    pins = _lock()
    for text in requirements:
        requirement = Requirement(text)
        pinned = pins.get(canonicalize_name(requirement.name))
        assert pinned is not None, f"{requirement.name} is not in constraints.txt"
        assert requirement.specifier.contains(pinned, prereleases=True), (text, pinned)


def test_every_install_path_uses_the_lock() -> None:
    assert "-c constraints.txt" in (REPO_ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert "-c constraints.txt" in (REPO_ROOT / "scripts" / "bootstrap").read_text(encoding="utf-8")
