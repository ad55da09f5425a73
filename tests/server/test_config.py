"""Configuration loading and log redaction, in process."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from server.config import ConfigError, load_config
from server.logs import RedactingFilter, TokenRedactor

SECRET = "s3cret-token-value-0123456789"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_a_file() -> None:
    config = load_config(None, env={})
    assert (config.server.host, config.server.port) == ("127.0.0.1", 8765)
    assert config.confirmation_timeout == 300
    assert config.dispatcher.max_concurrency == 4
    assert config.policy.preset == "confirm-sensitive"
    assert config.auth.tokens == []


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = write(tmp_path, "server:\n  port: 9000\n  host: 127.0.0.2\nconfirmation_timeout: 10\n")
    env = {"TOOLRELAY_PORT": "9100", "TOOLRELAY_CONFIRMATION_TIMEOUT": "20"}
    config = load_config(path, env=env, overrides={"server.port": 9200, "server.host": None})
    assert config.server.port == 9200  # flag beats environment beats file
    assert config.server.host == "127.0.0.2"  # an unset flag changes nothing
    assert config.confirmation_timeout == 20


def test_toolrelay_token_adds_an_admin_token(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "auth:\n  tokens:\n"
        "    - {name: alice, token: alice-token-0123456789, role: user}\n"
        "    - {name: admin, token: old-admin-token-0123456789, role: admin}\n",
    )
    config = load_config(path, env={"TOOLRELAY_TOKEN": SECRET})
    tokens = {t.name: (t.token, t.role) for t in config.auth.tokens}
    assert tokens == {"alice": ("alice-token-0123456789", "user"), "admin": (SECRET, "admin")}


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("server:\n  prot: 1\n", {}, "server.prot: unknown key"),
        ("colour: blue\n", {}, "colour: unknown key"),
        ("policy:\n  default:\n    write: sometimes\n", {}, "policy.default.write:"),
        ("policy:\n  per_tool:\n    shell: never\n", {}, "policy.per_tool.shell:"),
        ("dispatcher:\n  max_concurrency: 0\n", {}, "dispatcher.max_concurrency:"),
        ("workspaces:\n  shell:\n    timeout: 9999\n", {}, "workspaces.shell.timeout:"),
        ("auth:\n  tokens:\n    - {name: a, token: short}\n", {}, "tokens must be at least 16"),
        ("", {"TOOLRELAY_PORT": "http"}, "server.port (from TOOLRELAY_PORT)"),
        ("", {"TOOLRELAY_TOKEN": "short"}, "auth.tokens.0.token (from TOOLRELAY_TOKEN)"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, text: str, env: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), env=env)
    assert expected in str(caught.value)


def test_unusable_files_are_explained(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(write(tmp_path, "- just\n- a list\n"), env={})
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "server: [unclosed\n"), env={})
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml", env={})


def test_token_values_never_appear_in_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "auth:\n  tokens:\n    - {name: 'bad name!', token: " + SECRET + "}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert "auth.tokens.0.name" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_duplicate_token_names_are_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "auth:\n  tokens:\n"
        "    - {name: a, token: first-token-0123456789}\n"
        "    - {name: a, token: second-token-0123456789}\n",
    )
    with pytest.raises(ConfigError, match="token names must be unique"):
        load_config(path, env={})


def test_redactor_removes_query_tokens_bearer_and_known_values() -> None:
    redact = TokenRedactor([SECRET])
    line = f"GET /sessions/x/events?after=3&token={SECRET}&client=me HTTP/1.1"
    assert redact(line) == "GET /sessions/x/events?after=3&token=***&client=me HTTP/1.1"
    assert redact("Authorization: Bearer abc.def") == "Authorization: Bearer ***"
    assert redact(f"path /files/{SECRET}/x") == "path /files/***/x"
    assert redact("nothing to hide") == "nothing to hide"


def test_redacting_filter_rewrites_arguments_and_tracebacks() -> None:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s" %d',
        ("127.0.0.1:5", f"GET /events?token={SECRET} HTTP/1.1", 200),
        None,
    )
    assert RedactingFilter([SECRET]).filter(record)
    assert SECRET not in record.getMessage()
    assert "token=***" in record.getMessage()
    try:
        raise ValueError(f"bad {SECRET}")
    except ValueError:
        failing = logging.LogRecord("x", logging.ERROR, __file__, 1, "boom", (), sys.exc_info())
    RedactingFilter([SECRET]).filter(failing)
    assert failing.exc_text is not None and SECRET not in failing.exc_text
