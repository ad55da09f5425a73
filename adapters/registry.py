"""Choosing and building a model adapter from a model string.

Model strings:

* ``anthropic/<model>`` -- Anthropic; key from ``ANTHROPIC_API_KEY`` (or
  ``ANTHROPIC_AUTH_TOKEN``), endpoint from ``ANTHROPIC_BASE_URL``;
* ``openai/<model>`` -- OpenAI; key from ``OPENAI_API_KEY``, endpoint from
  ``OPENAI_BASE_URL``;
* ``openai-compatible/<model>`` -- any Chat Completions server (vLLM, Ollama,
  LM Studio); needs a base_url (``OPENAI_BASE_URL`` or the ``base_url``
  argument); the key is optional;
* ``scripted`` -- the offline demo rules; ``scripted:<path>`` plays a script.

Variables are read from ``env`` (default: the process environment) and passed
to the SDKs explicitly, so a given ``env`` is the whole truth.

The server removes provider keys from its own environment at start-up (no
child process may inherit them); it hands them to :func:`keep_provider_keys`
first, and "the process environment" here means the environment as it was,
keys included.
"""

from __future__ import annotations

import os
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass

import httpx2

from adapters.base import ModelAdapter
from adapters.errors import AdapterMisconfigured
from adapters.retry import RetryPolicy
from adapters.scripted import ScriptedAdapter

PROVIDERS = ("anthropic", "openai", "openai-compatible")
# The one provider map: the adapter module each provider needs (importing it
# loads the provider's SDK; the agent loop does that off the event loop).
ADAPTER_MODULES = {
    "anthropic": "adapters.anthropic_adapter",
    "openai": "adapters.openai_adapter",
    "openai-compatible": "adapters.openai_adapter",
}
# What each provider needs from the server's environment (any one of them).
PROVIDER_SETTINGS = {
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
    "openai": ("OPENAI_API_KEY",),
    "openai-compatible": ("OPENAI_BASE_URL",),
}
DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-5"
DEFAULT_OPENAI_MODEL = "gpt-5.4"
ANTHROPIC_DEFAULT_BASE_URL = "https://api.anthropic.com"
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Local servers ignore the key but the SDK insists on a non-empty one.
COMPATIBLE_PLACEHOLDER_KEY = "not-needed"

# Variables the adapters read that hold secrets.
SECRET_ENV_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY")
_kept_keys: dict[str, str] = {}


def is_secret_env_var(name: str) -> bool:
    """Whether an environment variable holds a provider secret: the ones the
    adapters read, and any other ``*_API_KEY`` (some SDK or tool's)."""
    return name in SECRET_ENV_VARS or name.endswith("_API_KEY")


def keep_provider_keys(values: Mapping[str, str]) -> None:
    """Remember the provider keys among ``values`` (read from the environment
    before it was scrubbed) for adapters built later."""
    _kept_keys.update({k: v for k, v in values.items() if k in SECRET_ENV_VARS and v})


def process_environment() -> Mapping[str, str]:
    """The process environment with the kept provider keys (a live view)."""
    return ChainMap(os.environ, _kept_keys)


def _environment(env: Mapping[str, str] | None) -> Mapping[str, str]:
    # ``os.environ`` itself (what callers pass to mean "the process's") gets the
    # kept keys too: once scrubbed it no longer holds them.
    return process_environment() if env is None or env is os.environ else env


_FORMS = (
    "'anthropic/<model>', 'openai/<model>', 'openai-compatible/<model>', "
    "'scripted' or 'scripted:<script path>'"
)


def default_model(env: Mapping[str, str] | None = None) -> str:
    """TOOLRELAY_MODEL if set, else Anthropic or OpenAI when their key is set, else scripted."""
    env = _environment(env)
    chosen = env.get("TOOLRELAY_MODEL", "").strip()
    if chosen:
        return chosen
    if env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_AUTH_TOKEN"):
        return f"anthropic/{DEFAULT_ANTHROPIC_MODEL}"
    if env.get("OPENAI_API_KEY"):
        return f"openai/{DEFAULT_OPENAI_MODEL}"
    return "scripted"


def parse_model(model: str) -> tuple[str, str]:
    """Split a model string into (provider, model id or script path); validate its form."""
    text = model.strip() if isinstance(model, str) else ""
    if text == "scripted":
        return "scripted", ""
    if text.startswith("scripted:"):
        path = text.removeprefix("scripted:").strip()
        if not path:
            raise AdapterMisconfigured(f"model {model!r}: 'scripted:' needs a script path")
        return "scripted", path
    provider, sep, name = text.partition("/")
    if not sep or provider not in PROVIDERS or not name.strip():
        raise AdapterMisconfigured(f"unknown model {model!r}: expected {_FORMS}")
    return provider, name.strip()


def create_adapter(
    model: str,
    *,
    env: Mapping[str, str] | None = None,
    api_key: str | None = None,
    base_url: str | None = None,
    timeout: float = 120.0,
    retry: RetryPolicy | None = None,
    http_client: httpx2.AsyncClient | None = None,
    delta_delay: float = 0.0,
) -> ModelAdapter:
    """Build the adapter for ``model``; arguments override what ``env`` says.

    ``delta_delay`` only affects the scripted model (pacing of its deltas).
    Raises AdapterMisconfigured naming the model string and what is missing.
    """
    env = _environment(env)
    provider, name = parse_model(model)
    if provider == "scripted":
        if name:
            # Read when it first streams, in a worker thread: this factory runs
            # on the server's event loop, and the file may be a client's choice.
            return ScriptedAdapter.deferred(name, delta_delay=delta_delay)
        return ScriptedAdapter(delta_delay=delta_delay)
    common = _Connection(timeout=timeout, retry=retry, http_client=http_client)
    if provider == "anthropic":
        return _anthropic_adapter(model, name, env, api_key, base_url, common)
    return _openai_adapter(model, provider, name, env, api_key, base_url, common)


@dataclass(frozen=True, slots=True)
class _Connection:
    """What every provider SDK adapter takes besides its credentials."""

    timeout: float
    retry: RetryPolicy | None
    http_client: httpx2.AsyncClient | None


def _anthropic_adapter(
    model: str,
    name: str,
    env: Mapping[str, str],
    api_key: str | None,
    base_url: str | None,
    common: _Connection,
) -> ModelAdapter:
    from adapters.anthropic_adapter import AnthropicAdapter

    key = api_key or env.get("ANTHROPIC_API_KEY") or None
    token = None if key else env.get("ANTHROPIC_AUTH_TOKEN") or None
    if key is None and token is None:
        raise AdapterMisconfigured(
            f"model {model!r} needs ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN) in the environment"
        )
    return AnthropicAdapter(
        name,
        api_key=key,
        auth_token=token,
        base_url=base_url or env.get("ANTHROPIC_BASE_URL") or ANTHROPIC_DEFAULT_BASE_URL,
        timeout=common.timeout,
        retry=common.retry,
        http_client=common.http_client,
    )


def _openai_adapter(
    model: str,
    provider: str,
    name: str,
    env: Mapping[str, str],
    api_key: str | None,
    base_url: str | None,
    common: _Connection,
) -> ModelAdapter:
    """OpenAI itself, or an OpenAI-compatible server (which must name its URL)."""
    from adapters.openai_adapter import OpenAIAdapter

    url = base_url or env.get("OPENAI_BASE_URL") or None
    key = api_key or env.get("OPENAI_API_KEY") or None
    if provider == "openai":
        if key is None:
            raise AdapterMisconfigured(f"model {model!r} needs OPENAI_API_KEY in the environment")
        url = url or OPENAI_DEFAULT_BASE_URL
    elif url is None:
        raise AdapterMisconfigured(
            f"model {model!r} needs a base_url: set OPENAI_BASE_URL to the server's /v1 URL"
        )
    return OpenAIAdapter(
        name,
        api_key=key or COMPATIBLE_PLACEHOLDER_KEY,
        base_url=url,
        provider=provider,
        timeout=common.timeout,
        retry=common.retry,
        http_client=common.http_client,
    )
