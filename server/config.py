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
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from dispatcher.mcp.config import McpServerConfig, check_server_name
from dispatcher.pipeline.budget import LimitsConfig
from dispatcher.pipeline.globs import check_globs
from dispatcher.pipeline.guardrails import GuardrailConfig
from dispatcher.pipeline.hooks import HooksConfig
from dispatcher.pipeline.profiles import ProfileConfig, check_profile_names
from dispatcher.policy import PolicyConfig
from protocol.validation_errors import describe_errors, dotted_location, plain_message
from server.agents import AgentConfig, check_agents
from server.mcp_guard import check_hosts
from server.origins import check_origins
from server.roots import Protected, real

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def default_data_dir() -> str:
    """``$XDG_STATE_HOME/toolrelay`` (``~/.local/state/toolrelay``): outside any
    checkout, so a newcomer who serves from a repository and opens a session on
    it never puts the token and databases inside the workspace. The TUI's
    ``clients.local.default_data_dir`` must give the same answer (a test checks)."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join("~", ".local", "state")
    return os.path.join(state, "toolrelay")


DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_CONFIRMATION_TIMEOUT = 300.0
DEFAULT_SUBSCRIBER_QUEUE_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_EVENT_OUTPUT_BYTES = 64 * 1024
DEFAULT_RETENTION_BYTES = 1024 * 1024 * 1024


class ConfigInvalid(Exception):
    """The configuration cannot be used; the message names the offending key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSection(_Section):
    """Where the server listens and keeps its files."""

    host: str = DEFAULT_HOST
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    data_dir: str = Field(default_factory=default_data_dir)
    # Largest accepted request body; past it the answer is 413.
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024, le=256 * 1024 * 1024)
    # How long graceful shutdown waits for open connections before closing them.
    shutdown_grace: float = Field(default=5.0, gt=0, le=600)
    # Web origins besides the server's own that may open event WebSockets
    # (``https://app.example.com``); see server/origins.py.
    allowed_origins: list[str] = Field(default_factory=list)

    _origins_valid = field_validator("allowed_origins")(check_origins)
    # Host names (``name`` or ``name:port``) besides loopback and ``host``
    # under which clients reach the MCP endpoint (a proxy's or a container's
    # public name); other Hosts are refused (DNS rebinding, server/mcp_guard.py).
    allowed_hosts: list[str] = Field(default_factory=list)

    _hosts_valid = field_validator("allowed_hosts")(check_hosts)


def _absolute_paths(paths: list[str]) -> list[str]:
    """Allowed roots must be absolute (``~`` allowed): a relative root would
    mean whatever the server's working directory happens to be."""
    for path in paths:
        if not path or "\x00" in path or not os.path.isabs(os.path.expanduser(path)):
            raise ValueError(f"{path!r} is not an absolute path")
    return paths


class TokenConfig(_Section):
    """One access token: who holds it (``name``, also the client name), its role,
    and the directories its sessions may use (``allowed_roots``, see server/roots.py)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.@-]{1,64}$")
    token: str = Field(min_length=16, max_length=512)
    role: Literal["admin", "user"] = "user"
    # This token's sessions must lie inside one of these (besides
    # workspaces.allowed_roots). A user token with no roots at all cannot
    # create sessions.
    allowed_roots: list[str] = Field(default_factory=list)

    _roots_absolute = field_validator("allowed_roots")(_absolute_paths)


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
    # The bubblewrap sandbox every process started on a workspace's behalf
    # runs in (dispatcher/sandbox.py). None (the default, also "auto"): on
    # wherever the start-up probe finds bubblewrap working, off otherwise;
    # false: off (an explicit opt-out: every shell command then asks for a
    # confirmation); true: required, start-up fails when it cannot run.
    sandbox: bool | None = None
    # Refuse commands the shell tool rates dangerous, whatever the policy says.
    allowed_only: bool = False
    timeout: float = Field(default=30.0, ge=1, le=600)
    # Paths the sandbox covers up besides those always hidden (the data dir,
    # every config file the server read, the token file): credentials a
    # command has no business printing into a conversation.
    sandbox_hide: list[str] = Field(
        default_factory=lambda: [
            "~/.ssh",
            "~/.aws",
            "~/.gnupg",
            "~/.config/gcloud",
            "~/.netrc",
            # Registry and cluster credentials; ~/.docker may also hold a
            # docker socket (the fresh /run and /tmp cover the usual places).
            "~/.docker",
            "~/.kube",
            "~/.config/gh",
            "~/.git-credentials",
        ]
    )
    # Workspace globs (the dialect of guardrails.protected_files) whose
    # content no sandboxed process may read: each match is covered (a file
    # by /dev/null, a folder by an empty read-only tmpfs) in every sandbox.
    sandbox_hide_files: list[str] = Field(default_factory=list)

    _hide_files = field_validator("sandbox_hide_files")(check_globs)

    @field_validator("sandbox", mode="before")
    @classmethod
    def _auto(cls, value: Any) -> Any:
        # TOOLRELAY_SHELL_SANDBOX=auto (or "auto" in YAML) means the default.
        if isinstance(value, str) and value.strip().lower() == "auto":
            return None
        return value


class WorkspacesSection(_Section):
    """What sessions may do in their workspace directories."""

    allow_delete: bool = False
    # When non-empty, every session's workspace must lie inside one of these
    # directories; they are also the roots of every user token (see server/roots.py).
    allowed_roots: list[str] = Field(default_factory=list)
    shell: ShellSection = Field(default_factory=ShellSection)


class DispatcherSection(_Section):
    max_concurrency: int = Field(default=4, ge=1, le=64)
    # Per-call timeouts (server/tool_wiring.py): null keeps the spec's defaults
    # (60 s none/read/write, 600 s execute/network, or the tool's own); a number
    # replaces them for tools that declare none and do not time themselves.
    # tool_timeouts[name] is used exactly as given, for built-ins and plugins.
    tool_timeout: float | None = Field(default=None, gt=0, le=3600)
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
    """The event streams' memory bounds and the durable log's retention."""

    # Events queued for one WebSocket before it is cut off as too slow.
    subscriber_queue: int = Field(default=1024, ge=64, le=1_000_000)
    # ... and their encoded size: a few large events cost more than many small
    # ones. Past either bound the socket is closed with the resumable 4429.
    subscriber_queue_bytes: int = Field(
        default=DEFAULT_SUBSCRIBER_QUEUE_BYTES, ge=64 * 1024, le=1024 * 1024 * 1024
    )
    # Tool output carried by an event (tool.completed content, tool.output_delta
    # text) beyond this is cut, marked ``truncated: true`` with ``output_bytes``;
    # the full result stays in the conversation and the turn record.
    max_event_output_bytes: int = Field(
        default=DEFAULT_MAX_EVENT_OUTPUT_BYTES, ge=1024, le=64 * 1024 * 1024
    )
    # Retention of the durable log, applied every ``prune_interval`` seconds (None:
    # no limit of that kind): at most this many events, this many bytes of
    # database pages in use, events no older than this many seconds. A cursor
    # older than what is kept gets the explicit ``cursor expired`` close.
    retention_events: int | None = Field(default=None, ge=1000)
    retention_bytes: int | None = Field(default=DEFAULT_RETENTION_BYTES, ge=1024 * 1024, le=1 << 50)
    retention_age_s: float | None = Field(default=None, ge=60, le=100 * 365 * 86400)
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
    # Folder whose files a client may name as ``scripted:<path>`` models
    # (besides files inside the session's own workspace). None: workspace only.
    scripts_dir: str | None = None

    @field_validator("scripts_dir")
    @classmethod
    def _scripts_dir_absolute(cls, value: str | None) -> str | None:
        if value is not None:
            _absolute_paths([value])
        return value

    @field_validator("default")
    @classmethod
    def _real_script_path(cls, value: str | None) -> str | None:
        # A scripted default is opened without following symbolic links (see
        # adapters/scripted_script.py); the admin's path is trusted, so it is
        # resolved once here, relative to the working directory.
        if value is not None and value.strip().startswith("scripted:"):
            path = value.strip().removeprefix("scripted:").strip()
            if path:
                return "scripted:" + os.path.realpath(os.path.expanduser(path))
        return value


class ClusterSection(_Section):
    """Scale-out (specs/scale-out.md): with ``redis_url`` set the event log and
    the shared state live in Redis and this process is one replica of many."""

    redis_url: str | None = Field(default=None, pattern=r"^(redis|rediss|unix)://")
    # Default: <hostname>-<pid> (server/cluster.py); unique among the replicas.
    replica_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    # A session's lease lapses this long after its owner's last renewal.
    lease_ttl_ms: int = Field(default=10_000, ge=300, le=600_000)


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
    cluster: ClusterSection = Field(default_factory=ClusterSection)
    model: ModelSection = Field(default_factory=ModelSection)
    # MCP servers whose tools join every session as mcp_{server}_{tool} (specs/mcp.md).
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    # The execution pipeline (specs/pipeline.md): rules no model or user token
    # can loosen, lifecycle hooks, permission profiles and token budgets.
    guardrails: GuardrailConfig = Field(default_factory=GuardrailConfig)
    hooks: HooksConfig = Field(default_factory=HooksConfig)
    profiles: dict[str, ProfileConfig] = Field(default_factory=dict)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    # Named agents (specs/agents.md): prompt, tools, profile, model, step
    # limit; built in: build, plan, explore, test, review.
    agents: dict[str, AgentConfig] = Field(default_factory=dict)

    _profile_names = field_validator("profiles")(check_profile_names)

    @field_validator("agents")
    @classmethod
    def _agents(cls, value: dict[str, AgentConfig], info: ValidationInfo) -> dict[str, AgentConfig]:
        # ``profiles`` is declared first, so it is validated and present here
        # (absent only when it failed itself: then its own error is reported).
        profiles = info.data.get("profiles")
        problems = check_agents(value, profiles if isinstance(profiles, dict) else {})
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @field_validator("mcp_servers")
    @classmethod
    def _mcp_names(cls, value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in value:
            check_server_name(name)
        return value

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

    @property
    def protected(self) -> Protected:
        """What no workspace may touch (server/roots.py)."""
        return Protected(str(self.data_dir), self.source_files)


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
    "TOOLRELAY_REDIS_URL": "cluster.redis_url",
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
    (dotted keys, e.g. from CLI flags). Raises ConfigInvalid naming the key."""
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
        raise ConfigInvalid(_describe(exc, source, origins)) from None
    if path is not None:
        config._source_files = (os.path.realpath(os.path.expanduser(os.fspath(path))),)
    check_configured_roots(config)
    return config


def check_configured_roots(config: Config) -> None:
    """ConfigInvalid naming the key of the first allowed root that is ``/``,
    holds a protected path, or lies inside one (server/roots.py)."""
    keyed: list[tuple[str, str]] = [
        (f"workspaces.allowed_roots.{i}", r) for i, r in enumerate(config.workspaces.allowed_roots)
    ]
    for t_index, token in enumerate(config.auth.tokens):
        keyed += [
            (f"auth.tokens.{t_index}.allowed_roots.{i}", r)
            for i, r in enumerate(token.allowed_roots)
        ]
    if config.model.scripts_dir is not None:
        keyed.append(("model.scripts_dir", config.model.scripts_dir))
    protected = config.protected
    for key, root in keyed:
        problem = protected.overlap(real(root))
        if problem is not None:
            raise ConfigInvalid(f"invalid configuration: {key}: {problem}")


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigInvalid(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigInvalid(f"config file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigInvalid(
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
    # describe_errors never echoes an input: a token field's value is a secret.
    def where(err: ErrorDetails) -> str:
        key = dotted_location(err, top_level="(top level)")
        origin = origins.get(key)
        return f"{key} (from {origin})" if origin else key

    def message(err: ErrorDetails) -> str:
        if err["type"] == "string_too_short" and dotted_location(err).endswith(".token"):
            return "tokens must be at least 16 characters"
        return plain_message(err)

    lines = describe_errors(exc, prefix="  ", where=where, message=message)
    return "\n".join([f"invalid configuration ({source}):", *lines])
