"""Configuration loading and log redaction, in process."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

from server.config import ConfigInvalid, load_config
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
    with pytest.raises(ConfigInvalid) as caught:
        load_config(write(tmp_path, text), env=env)
    assert expected in str(caught.value)


def test_unusable_files_are_explained(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalid, match="must hold a mapping"):
        load_config(write(tmp_path, "- just\n- a list\n"), env={})
    with pytest.raises(ConfigInvalid, match="not valid YAML"):
        load_config(write(tmp_path, "server: [unclosed\n"), env={})
    with pytest.raises(ConfigInvalid, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml", env={})


def test_token_values_never_appear_in_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "auth:\n  tokens:\n    - {name: 'bad name!', token: " + SECRET + "}\n")
    with pytest.raises(ConfigInvalid) as caught:
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
    with pytest.raises(ConfigInvalid, match="token names must be unique"):
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


# -- allowed roots and protected paths -----------------------------------------------


def roots_config(tmp_path: Path, roots: str, *, data_dir: Path | None = None) -> Path:
    data = data_dir or tmp_path / "srv" / "data"
    return write(tmp_path, f"server:\n  data_dir: {data}\n{roots}")


@pytest.mark.parametrize(
    ("roots", "key", "reason"),
    [
        ("workspaces:\n  allowed_roots: ['/']\n", "workspaces.allowed_roots.0", "filesystem root"),
        (
            "workspaces:\n  allowed_roots: ['{base}/ok', '{base}']\n",
            "workspaces.allowed_roots.1",
            "contains the server's data dir",
        ),
        (
            "workspaces:\n  allowed_roots: ['{base}/srv/data/inner']\n",
            "workspaces.allowed_roots.0",
            "lies inside the server's data dir",
        ),
        (
            "auth:\n  tokens:\n    - {{name: u, token: user-token-0123456789, "
            "allowed_roots: ['{base}/ok']}}\n"
            "    - {{name: v, token: user-token-9876543210, allowed_roots: ['{base}/cfg']}}\n",
            "auth.tokens.1.allowed_roots.0",
            "contains a config file",
        ),
        ("model:\n  scripts_dir: '{base}/srv'\n", "model.scripts_dir", "contains the server's"),
    ],
)
def test_allowed_roots_holding_secrets_are_config_errors(
    tmp_path: Path, roots: str, key: str, reason: str
) -> None:
    base = tmp_path.resolve()
    (base / "cfg").mkdir()
    path = base / "cfg" / "config.yaml"
    path.write_text(
        f"server:\n  data_dir: {base / 'srv' / 'data'}\n" + roots.format(base=base),
        encoding="utf-8",
    )
    with pytest.raises(ConfigInvalid) as caught:
        load_config(path, env={})
    assert key in str(caught.value) and reason in str(caught.value)


def test_allowed_roots_are_absolute_and_kept_per_token(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalid, match=r"auth.tokens.0.allowed_roots: .*not an absolute"):
        load_config(
            roots_config(
                tmp_path,
                "auth:\n  tokens:\n    - {name: u, token: user-token-0123456789, "
                "allowed_roots: [relative/dir]}\n",
            ),
            env={},
        )
    with pytest.raises(ConfigInvalid, match=r"model\.scripts_dir: .*not an absolute"):
        load_config(roots_config(tmp_path, "model:\n  scripts_dir: scripts\n"), env={})
    ws = tmp_path / "ws"
    config = load_config(
        roots_config(
            tmp_path,
            "auth:\n  tokens:\n    - {name: u, token: user-token-0123456789, "
            f"allowed_roots: ['{ws}']}}\n",
        ),
        env={},
    )
    assert config.auth.tokens[0].allowed_roots == [str(ws)]


def test_a_scripted_default_is_stored_as_its_real_path(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    path = roots_config(tmp_path, f"model:\n  default: 'scripted:{tmp_path}/link/s.yaml'\n")
    config = load_config(path, env={})
    assert config.model.default == f"scripted:{tmp_path.resolve()}/real/s.yaml"


# -- redaction of encoded query strings ------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        f"token={SECRET}",
        f"%74oken={SECRET}",
        f"%74%6F%6B%65%6E={SECRET}",
        f"TOKEN={SECRET}",
        f"ToKeN={SECRET}",
        f"token=other&token={SECRET}",
        f"token={SECRET.replace('-', '%2D')}",
        f"x={SECRET.replace('t', '%74')}",  # a known token, percent-encoded, under any key
        f"+token={SECRET}",  # "+" decodes to a space
        f"token={SECRET[:6]}+{SECRET[6:]}",
    ],
)
def test_every_encoding_of_a_query_token_is_redacted(query: str) -> None:
    redact = TokenRedactor([SECRET])
    line = f'127.0.0.1:5 - "GET /events?after=0&{query}&client=me HTTP/1.1" 101'
    out = redact(line)
    value = query.partition("=")[2]
    assert value not in out, out
    assert SECRET[:10] not in out
    assert "after=0" in out and "client=me" in out  # the rest of the line is kept


# -- secrets out of the environment -----------------------------------------------------


def test_scrubbing_removes_secrets_and_keeps_provider_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import adapters.registry as registry
    from server.environment import scrub_secrets

    monkeypatch.setattr(registry, "_kept_keys", {})
    env = {
        "TOOLRELAY_TOKEN": SECRET,
        "ANTHROPIC_API_KEY": "sk-ant",
        "ANTHROPIC_AUTH_TOKEN": "tok-ant",
        "SOMETOOL_API_KEY": "other",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:1",
        "TOOLRELAY_PORT": "9000",
        "PATH": "/usr/bin",
    }
    removed = scrub_secrets(env)
    assert sorted(removed) == [
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "SOMETOOL_API_KEY",
        "TOOLRELAY_TOKEN",
    ]
    assert env == {
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:1",
        "TOOLRELAY_PORT": "9000",
        "PATH": "/usr/bin",
    }
    # The adapters read the process environment through the kept keys.
    kept = registry.process_environment()
    assert kept.get("ANTHROPIC_API_KEY") == "sk-ant"
    assert kept.get("ANTHROPIC_AUTH_TOKEN") == "tok-ant"
    assert "SOMETOOL_API_KEY" not in kept and "TOOLRELAY_TOKEN" not in kept
