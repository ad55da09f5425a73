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
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import httpx2

from adapters.base import ModelAdapter
from adapters.errors import AdapterConfigError
from adapters.retry import RetryPolicy
from adapters.scripted import ScriptedAdapter

PROVIDERS = ("anthropic", "openai", "openai-compatible")
DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-5"
DEFAULT_OPENAI_MODEL = "gpt-5.4"
ANTHROPIC_DEFAULT_BASE_URL = "https://api.anthropic.com"
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Local servers ignore the key but the SDK insists on a non-empty one.
COMPATIBLE_PLACEHOLDER_KEY = "not-needed"

_FORMS = (
    "'anthropic/<model>', 'openai/<model>', 'openai-compatible/<model>', "
    "'scripted' or 'scripted:<script path>'"
)


def default_model(env: Mapping[str, str] | None = None) -> str:
    """TOOLRELAY_MODEL if set, else Anthropic or OpenAI when their key is set, else scripted."""
    env = os.environ if env is None else env
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
            raise AdapterConfigError(f"model {model!r}: 'scripted:' needs a script path")
        return "scripted", path
    provider, sep, name = text.partition("/")
    if not sep or provider not in PROVIDERS or not name.strip():
        raise AdapterConfigError(f"unknown model {model!r}: expected {_FORMS}")
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
    Raises AdapterConfigError naming the model string and what is missing.
    """
    env = os.environ if env is None else env
    provider, name = parse_model(model)
    if provider == "scripted":
        if name:
            return ScriptedAdapter.from_file(name, delta_delay=delta_delay)
        return ScriptedAdapter(delta_delay=delta_delay)
    if provider == "anthropic":
        from adapters.anthropic_adapter import AnthropicAdapter

        key = api_key or env.get("ANTHROPIC_API_KEY") or None
        token = None if key else env.get("ANTHROPIC_AUTH_TOKEN") or None
        if key is None and token is None:
            raise AdapterConfigError(
                f"model {model!r} needs ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN) in the "
                "environment"
            )
        return AnthropicAdapter(
            name,
            api_key=key,
            auth_token=token,
            base_url=base_url or env.get("ANTHROPIC_BASE_URL") or ANTHROPIC_DEFAULT_BASE_URL,
            timeout=timeout,
            retry=retry,
            http_client=http_client,
        )
    from adapters.openai_adapter import OpenAIAdapter

    url = base_url or env.get("OPENAI_BASE_URL") or None
    key = api_key or env.get("OPENAI_API_KEY") or None
    if provider == "openai":
        if key is None:
            raise AdapterConfigError(f"model {model!r} needs OPENAI_API_KEY in the environment")
        url = url or OPENAI_DEFAULT_BASE_URL
    elif url is None:
        raise AdapterConfigError(
            f"model {model!r} needs a base_url: set OPENAI_BASE_URL to the server's /v1 URL"
        )
    return OpenAIAdapter(
        name,
        api_key=key or COMPATIBLE_PLACEHOLDER_KEY,
        base_url=url,
        provider=provider,
        timeout=timeout,
        retry=retry,
        http_client=http_client,
    )
