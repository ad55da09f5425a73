"""workspaces.shell.sandbox: auto (None) by default, false opts out, true
requires it; TOOLRELAY_SHELL_SANDBOX sets it too, "auto" included."""

from __future__ import annotations

import pytest

from server.config import ConfigInvalid, load_config


def _sandbox(env: dict[str, str]) -> bool | None:
    return load_config(env=env).workspaces.shell.sandbox


def test_default_is_auto() -> None:
    assert _sandbox({}) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0", False), ("false", False), ("1", True), ("true", True), ("auto", None), ("AUTO", None)],
)
def test_environment_variable(value: str, expected: bool | None) -> None:
    assert _sandbox({"TOOLRELAY_SHELL_SANDBOX": value}) is expected


def test_a_bad_value_names_the_key_and_the_variable() -> None:
    with pytest.raises(ConfigInvalid) as info:
        _sandbox({"TOOLRELAY_SHELL_SANDBOX": "maybe"})
    assert "workspaces.shell.sandbox" in str(info.value)
    assert "TOOLRELAY_SHELL_SANDBOX" in str(info.value)


def test_credential_folders_are_hidden_by_default() -> None:
    hide = load_config(env={}).workspaces.shell.sandbox_hide
    assert {"~/.ssh", "~/.aws", "~/.docker", "~/.kube", "~/.config/gh"} <= set(hide)
