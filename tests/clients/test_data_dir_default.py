"""The TUI finds the token where the server writes it by default, and that
place is outside the folder both were started from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clients.local import default_data_dir as tui_default
from clients.local import resolve_token
from server.config import default_data_dir as server_default
from server.config import load_config


@pytest.mark.parametrize("xdg", [None, "/srv/state"])
def test_tui_and_server_agree(monkeypatch: pytest.MonkeyPatch, xdg: str | None) -> None:
    if xdg is None:
        monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_STATE_HOME", xdg)
    assert tui_default() == server_default()
    expected = os.path.join(xdg or "~/.local/state", "toolrelay")
    assert server_default() == expected


def test_default_is_outside_the_working_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.delenv("TOOLRELAY_DATA_DIR", raising=False)
    data_dir = load_config(None, env={}).data_dir
    assert data_dir == (tmp_path / "home" / ".local" / "state" / "toolrelay").resolve()
    assert not data_dir.is_relative_to(tmp_path / "repo")


def test_the_token_lookup_follows_toolrelay_data_dir(tmp_path: Path) -> None:
    """Every command-line client (TUI, MCP bridge) finds the token where a server
    started with TOOLRELAY_DATA_DIR wrote it, and an explicit token still wins."""
    data_dir = tmp_path / "state"
    data_dir.mkdir()
    (data_dir / "token").write_text("from-the-data-dir\n")
    env = {"TOOLRELAY_DATA_DIR": str(data_dir)}
    assert resolve_token(None, env=env) == "from-the-data-dir"
    assert resolve_token("explicit", env=env) == "explicit"
    assert resolve_token(None, env={**env, "TOOLRELAY_TOKEN": "from-env"}) == "from-env"
