"""Server configuration: one YAML file validated by pydantic, then TOOLRELAY_*
environment variables, then command-line flags, each overriding the one before.

Every model forbids unknown keys, so a typo stops start-up with a message that
names the key's full path (``server.prot``), instead of being silently ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from dispatcher.policy import PolicyConfig

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_DATA_DIR = "data"
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_CONFIRMATION_TIMEOUT = 300.0


class ConfigError(Exception):
    """The configuration cannot be used; the message names the offending key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSection(_Section):
    """Where the server listens and keeps its files."""

    host: str = DEFAULT_HOST
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    data_dir: str = DEFAULT_DATA_DIR
    # Largest accepted request body; past it the answer is 413.
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024, le=256 * 1024 * 1024)
    # How long graceful shutdown waits for open connections before closing them.
    shutdown_grace: float = Field(default=5.0, gt=0, le=600)


class TokenConfig(_Section):
    """One access token: who holds it (``name``, also the client name) and its role."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.@-]{1,64}$")
    token: str = Field(min_length=16, max_length=512)
    role: Literal["admin", "user"] = "user"


class AuthSection(_Section):
    tokens: list[TokenConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> AuthSection:
        names = [t.name for t in self.tokens]
        if len(set(names)) != len(names):
            raise ValueError("token names must be unique")
        values = [t.token for t in self.tokens]
        if len(set(values)) != len(values):
            raise ValueError("two entries share the same token value")
        return self


class ShellSection(_Section):
    """Options of the ``shell``/``run_command`` tools."""

    enabled: bool = True
    # Run commands in a bubblewrap sandbox (no network, read-only outside the workspace).
    sandbox: bool = False
    # Refuse commands the shell tool rates dangerous, whatever the policy says.
    allowed_only: bool = False
    timeout: float = Field(default=30.0, ge=1, le=600)
    # Paths the sandbox covers up (besides the server's data dir, always hidden):
    # credentials a command has no business printing into a conversation.
    sandbox_hide: list[str] = Field(
        default_factory=lambda: ["~/.ssh", "~/.aws", "~/.gnupg", "~/.config/gcloud", "~/.netrc"]
    )


class WorkspacesSection(_Section):
    """What sessions may do in their workspace directories."""

    allow_delete: bool = False
    # When non-empty, a session's workspace must lie inside one of these directories.
    allowed_roots: list[str] = Field(default_factory=list)
    shell: ShellSection = Field(default_factory=ShellSection)


class DispatcherSection(_Section):
    max_concurrency: int = Field(default=4, ge=1, le=64)
    # Default per-call timeout for every tool, and per-tool exceptions.
    tool_timeout: float = Field(default=120.0, gt=0, le=3600)
    tool_timeouts: dict[str, float] = Field(default_factory=dict)
    # How long a cancelled tool may take to stop before it is abandoned.
    cancel_grace: float = Field(default=30.0, gt=0, le=600)

    @field_validator("tool_timeouts")
    @classmethod
    def _positive(cls, value: dict[str, float]) -> dict[str, float]:
        for name, seconds in value.items():
            if seconds <= 0:
                raise ValueError(f"timeout for {name!r} must be positive")
        return value


class PluginsSection(_Section):
    """Extra tools: factories named by import path, and the entry-point group."""

    import_paths: list[str] = Field(default_factory=list)
    entry_points: bool = True


class EventsSection(_Section):
    # Events queued for one WebSocket before it is cut off as too slow.
    subscriber_queue: int = Field(default=1024, ge=64, le=1_000_000)
    # Keep at most this many events in the durable log (None keeps everything),
    # pruning every ``prune_interval`` seconds.
    retention_events: int | None = Field(default=None, ge=1000)
    prune_interval: float = Field(default=60.0, ge=0.1, le=86400)


class ModelSection(_Section):
    # Model for {"message": ...} turns; None lets the adapters pick from the environment.
    default: str | None = None
    # System prompt of the agent loop; None uses the built-in coding-agent prompt.
    # "{workspace}" in it is replaced by the session's workspace path.
    system_prompt: str | None = Field(default=None, max_length=100_000)
    # Model calls one turn may make before it stops (reason "step_limit").
    max_steps: int = Field(default=25, ge=1, le=1000)
    # Output-token cap of each model call.
    max_tokens: int = Field(default=4096, ge=1, le=1_000_000)


class Config(_Section):
    """The whole configuration file."""

    server: ServerSection = Field(default_factory=ServerSection)
    auth: AuthSection = Field(default_factory=AuthSection)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    workspaces: WorkspacesSection = Field(default_factory=WorkspacesSection)
    dispatcher: DispatcherSection = Field(default_factory=DispatcherSection)
    confirmation_timeout: float = Field(default=DEFAULT_CONFIRMATION_TIMEOUT, gt=0, le=86400)
    plugins: PluginsSection = Field(default_factory=PluginsSection)
    events: EventsSection = Field(default_factory=EventsSection)
    model: ModelSection = Field(default_factory=ModelSection)
    # Absolute paths of the files this configuration was read from: secrets
    # live there (tokens), so no workspace may contain them and no sandbox
    # may see them. Set by load_config.
    _source_files: tuple[str, ...] = PrivateAttr(default=())

    @property
    def data_dir(self) -> Path:
        return Path(self.server.data_dir).expanduser().resolve()

    @property
    def source_files(self) -> tuple[str, ...]:
        return self._source_files


# TOOLRELAY_* variable -> dotted key it sets. TOOLRELAY_TOKEN is handled apart:
# it adds a token instead of replacing a value.
ENV_KEYS: dict[str, str] = {
    "TOOLRELAY_HOST": "server.host",
    "TOOLRELAY_PORT": "server.port",
    "TOOLRELAY_DATA_DIR": "server.data_dir",
    "TOOLRELAY_MAX_BODY_BYTES": "server.max_body_bytes",
    "TOOLRELAY_MODEL": "model.default",
    "TOOLRELAY_CONFIRMATION_TIMEOUT": "confirmation_timeout",
    "TOOLRELAY_POLICY_PRESET": "policy.preset",
    "TOOLRELAY_SHELL_ENABLED": "workspaces.shell.enabled",
    "TOOLRELAY_SHELL_SANDBOX": "workspaces.shell.sandbox",
    "TOOLRELAY_ALLOW_DELETE": "workspaces.allow_delete",
}
ENV_TOKEN = "TOOLRELAY_TOKEN"
ENV_TOKEN_NAME = "admin"


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Read ``path`` (optional), apply the environment, then ``overrides``
    (dotted keys, e.g. from CLI flags). Raises ConfigError naming the key."""
    env = os.environ if env is None else env
    source = str(path) if path is not None else "defaults"
    raw = _read_yaml(Path(path)) if path is not None else {}
    origins: dict[str, str] = {}
    for var, key in ENV_KEYS.items():
        value = env.get(var)
        if value is not None and value != "":
            _set_dotted(raw, key, value)
            origins[key] = var
    for key, value in (overrides or {}).items():
        if value is not None:
            _set_dotted(raw, key, value)
            origins[key] = "command line"
    token = env.get(ENV_TOKEN)
    if token:
        raw, index = _with_env_token(raw, token)
        origins[f"auth.tokens.{index}.token"] = ENV_TOKEN
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source, origins)) from None
    if path is not None:
        config._source_files = (os.path.realpath(os.path.expanduser(os.fspath(path))),)
    return config


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {path} must hold a mapping at the top, not {type(data).__name__}"
        )
    return data


def _set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = raw
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def _with_env_token(raw: dict[str, Any], token: str) -> tuple[dict[str, Any], int]:
    """Add TOOLRELAY_TOKEN as the admin token named 'admin' (replacing a configured
    token of that name, so the variable always works); returns its list index."""
    auth = raw.get("auth")
    auth = dict(auth) if isinstance(auth, dict) else {}
    tokens = auth.get("tokens")
    kept = [
        t
        for t in (tokens if isinstance(tokens, list) else [])
        if not (isinstance(t, dict) and t.get("name") == ENV_TOKEN_NAME)
    ]
    kept.append({"name": ENV_TOKEN_NAME, "token": token, "role": "admin"})
    auth["tokens"] = kept
    return {**raw, "auth": auth}, len(kept) - 1


def _describe(exc: ValidationError, source: str, origins: Mapping[str, str]) -> str:
    lines = [f"invalid configuration ({source}):"]
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        message = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        if err["type"] == "string_too_short" and key.endswith(".token"):
            message = "tokens must be at least 16 characters"
        origin = origins.get(key)
        where = f" (from {origin})" if origin else ""
        # Never echo the input of a token field: it is a secret.
        lines.append(f"  {key}{where}: {message}")
    return "\n".join(lines)
