"""Model selection: model strings, environment handling, defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.anthropic_adapter import AnthropicAdapter
from adapters.errors import AdapterMisconfigured
from adapters.openai_adapter import OpenAIAdapter
from adapters.registry import (
    DEFAULT_ANTHROPIC_MODEL,
    DEFAULT_OPENAI_MODEL,
    create_adapter,
    default_model,
    parse_model,
)
from adapters.scripted import ScriptedAdapter
from tests.adapters.helpers import collect, final, request, user
from tests.fakes.fake_providers import FakeProviderServer, Reply


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "scripted"),
        ({"OPENAI_API_KEY": "k"}, f"openai/{DEFAULT_OPENAI_MODEL}"),
        ({"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}, f"anthropic/{DEFAULT_ANTHROPIC_MODEL}"),
        ({"ANTHROPIC_AUTH_TOKEN": "t"}, f"anthropic/{DEFAULT_ANTHROPIC_MODEL}"),
        ({"TOOLRELAY_MODEL": " openai/gpt-x ", "ANTHROPIC_API_KEY": "k"}, "openai/gpt-x"),
        ({"TOOLRELAY_MODEL": "", "ANTHROPIC_API_KEY": ""}, "scripted"),
        ({"OPENAI_BASE_URL": "http://localhost:11434/v1"}, "scripted"),
    ],
)
def test_default_model(env: dict[str, str], expected: str) -> None:
    assert default_model(env) == expected


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("scripted", ("scripted", "")),
        ("scripted:demo/script.yaml", ("scripted", "demo/script.yaml")),
        ("anthropic/claude-x", ("anthropic", "claude-x")),
        ("openai/gpt-x", ("openai", "gpt-x")),
        ("openai-compatible/meta-llama/Llama-3-8B", ("openai-compatible", "meta-llama/Llama-3-8B")),
    ],
)
def test_parse_model(model: str, expected: tuple[str, str]) -> None:
    assert parse_model(model) == expected


@pytest.mark.parametrize(
    "model", ["", "claude-x", "anthropic/", "gemini/pro", "scripted:", "openai", "/gpt"]
)
def test_bad_model_strings_are_named(model: str) -> None:
    with pytest.raises(AdapterMisconfigured) as caught:
        create_adapter(model, env={"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"})
    assert repr(model) in str(caught.value)


def test_scripted_needs_nothing(tmp_path: Path) -> None:
    assert isinstance(create_adapter("scripted", env={}), ScriptedAdapter)
    script = tmp_path / "s.yaml"
    script.write_text("- hi\n")
    made = create_adapter(f"scripted:{script}", env={})
    assert isinstance(made, ScriptedAdapter)
    # Deferred: the file is read when the model first streams, off the event loop.
    assert made.name == f"scripted:{script}"


@pytest.mark.parametrize(
    ("model", "missing"),
    [
        ("anthropic/claude-x", "ANTHROPIC_API_KEY"),
        ("openai/gpt-x", "OPENAI_API_KEY"),
        ("openai-compatible/llama", "OPENAI_BASE_URL"),
    ],
)
def test_missing_configuration_is_named(model: str, missing: str) -> None:
    with pytest.raises(AdapterMisconfigured) as caught:
        create_adapter(model, env={})
    assert missing in str(caught.value)
    assert repr(model) in str(caught.value)


async def test_env_points_the_sdks_at_their_endpoints(fake_provider: FakeProviderServer) -> None:
    env = fake_provider.env(api_key="from-env")
    fake_provider.plan(Reply.text("anthropic here"), Reply.text("openai here"))
    for model, expected in (
        ("anthropic/claude-x", "anthropic here"),
        ("openai/gpt-x", "openai here"),
    ):
        adapter = create_adapter(model, env=env)
        assert isinstance(adapter, AnthropicAdapter | OpenAIAdapter)
        assert adapter.name == model
        assert final(await collect(adapter, request(user("hi")))).message.text() == expected
        await adapter.aclose()
    sent = fake_provider.requests
    assert [r.body["model"] for r in sent] == ["claude-x", "gpt-x"]
    assert all(r.headers["authorization"] == "Bearer from-env" for r in sent)


async def test_openai_compatible_uses_base_url_without_a_key(
    fake_provider: FakeProviderServer,
) -> None:
    adapter = create_adapter(
        "openai-compatible/llama-3", env={}, base_url=fake_provider.openai_base_url
    )
    fake_provider.plan(Reply.text("local"))
    assert final(await collect(adapter, request(user("hi")))).message.text() == "local"
    assert isinstance(adapter, OpenAIAdapter)
    await adapter.aclose()
    (sent,) = fake_provider.requests
    assert sent.body["model"] == "llama-3"
    assert sent.body["max_tokens"] == 4096


async def test_arguments_override_the_environment(fake_provider: FakeProviderServer) -> None:
    env = {"ANTHROPIC_API_KEY": "env-key", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/nowhere"}
    adapter = create_adapter(
        "anthropic/claude-x", env=env, api_key="arg-key", base_url=fake_provider.anthropic_base_url
    )
    fake_provider.plan(Reply.text("ok"))
    await collect(adapter, request(user("hi")))
    assert isinstance(adapter, AnthropicAdapter)
    await adapter.aclose()
    assert fake_provider.requests[0].headers["authorization"] == "Bearer arg-key"


def test_the_given_env_is_the_whole_truth(monkeypatch: pytest.MonkeyPatch) -> None:
    # A key in the process environment must not leak into an explicit env.
    monkeypatch.setenv("OPENAI_API_KEY", "process-key")
    with pytest.raises(AdapterMisconfigured):
        create_adapter("openai/gpt-x", env={})
    assert isinstance(create_adapter("openai/gpt-x"), OpenAIAdapter)
