"""Fixtures and helpers for the agent-loop tests.

The server runs as a real subprocess (``tests.harness``); its model adapters
use the real anthropic/openai SDKs, pointed by ``ANTHROPIC_BASE_URL`` /
``OPENAI_BASE_URL`` (with dummy keys) at the fake provider server on
127.0.0.1 that the test process runs (``tests.fakes``). Tests plan the fake's
replies and read back the request bodies the SDKs sent.

Import the fixtures into a test module::

    from tests.server.agent_loop_support import (  # noqa: F401
        agent_server, fake_provider, fake_provider_server, provider)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.fakes.fake_providers import FakeProviderServer, RecordedRequest
from tests.fakes.fixtures import fake_provider, fake_provider_server
from tests.harness import ServerProcess
from tests.server.agent_loop_tools import AGENT_LOOP_PLUGINS
from tests.server.plugin_tools import PLUGINS

__all__ = [
    "AGENT_CONFIG",
    "MODELS",
    "agent_env",
    "agent_server",
    "fake_provider",
    "fake_provider_server",
    "message_turn",
    "provider",
    "system_prompt_sent",
    "tool_names_offered",
    "tool_results_sent",
    "user_texts_sent",
]

# One model string per provider protocol the fake speaks.
MODELS = {"anthropic": "anthropic/claude-fake-1", "openai": "openai/gpt-fake-1"}
AGENT_CONFIG: dict[str, Any] = {
    "plugins": {"import_paths": [*PLUGINS, *AGENT_LOOP_PLUGINS], "entry_points": False}
}


def agent_env(fake: FakeProviderServer) -> dict[str, str]:
    """The server's environment: both SDKs pointed at the fake, payloads checked."""
    # TOOLRELAY_EVENT_DEBUG: the bus validates every payload, so a malformed event fails.
    return {**fake.env(api_key="dummy-test-key"), "TOOLRELAY_EVENT_DEBUG": "1"}


@pytest.fixture(scope="module")
def agent_server(
    tmp_path_factory: pytest.TempPathFactory, fake_provider_server: FakeProviderServer
) -> Iterator[ServerProcess]:
    """One server per test module (sessions keep tests apart)."""
    srv = ServerProcess(
        tmp_path_factory.mktemp("agent"),
        config=AGENT_CONFIG,
        env=agent_env(fake_provider_server),
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(params=sorted(MODELS))
def provider(request: pytest.FixtureRequest) -> str:
    """Each test using it runs once per provider protocol."""
    name: str = request.param
    return name


async def message_turn(http: httpx2.AsyncClient, session_id: str, text: str) -> str:
    response = await http.post(f"/sessions/{session_id}/turns", json={"message": text})
    assert response.status_code == 202, response.text
    turn_id: str = response.json()["turn_id"]
    return turn_id


# -- reading what the SDKs sent -----------------------------------------------------------


def tool_results_sent(request: RecordedRequest) -> dict[str, tuple[str, bool]]:
    """Every tool result in a request body: tool_use id -> (text, is_error)."""
    found: dict[str, tuple[str, bool]] = {}
    messages: list[dict[str, Any]] = request.body["messages"]
    if request.protocol == "anthropic":
        for message in messages:
            if message["role"] != "user" or isinstance(message["content"], str):
                continue
            for block in message["content"]:
                if block.get("type") == "tool_result":
                    text = "".join(c.get("text", "") for c in block.get("content", []))
                    found[block["tool_use_id"]] = (text, bool(block.get("is_error", False)))
        return found
    for message in messages:
        if message["role"] == "tool":
            content = message["content"]
            text = content if isinstance(content, str) else "".join(p["text"] for p in content)
            # Chat Completions has no error flag: the adapter marks errors in the text.
            found[message["tool_call_id"]] = (
                text.removeprefix("ERROR: "),
                text.startswith("ERROR: "),
            )
    return found


def system_prompt_sent(request: RecordedRequest) -> str:
    if request.protocol == "anthropic":
        system = request.body.get("system", "")
        if isinstance(system, list):
            return "".join(block.get("text", "") for block in system)
        return str(system)
    first = request.body["messages"][0]
    assert first["role"] == "system", first
    return str(first["content"])


def tool_names_offered(request: RecordedRequest) -> list[str]:
    tools: list[dict[str, Any]] = request.body.get("tools", [])
    if request.protocol == "anthropic":
        return [t["name"] for t in tools]
    return [t["function"]["name"] for t in tools]


def user_texts_sent(request: RecordedRequest) -> list[str]:
    """Every text block of the user messages in a request body, in order (block by
    block: the Anthropic wire merges consecutive user messages into one)."""
    texts: list[str] = []
    for message in request.body["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            texts.append(content)
        else:
            texts.extend(b["text"] for b in content if b.get("type") == "text")
    return texts
