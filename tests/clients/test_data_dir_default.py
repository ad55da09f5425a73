"""The TUI finds the token where the server writes it by default, and that
place is outside the folder both were started from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clients.tui.cli import default_data_dir as tui_default
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
