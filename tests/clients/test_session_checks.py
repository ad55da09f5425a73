"""Session creation refuses what cannot work, naming what is missing, and the
SDK carries the server's words."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.sdk import InvalidRequest, ToolrelayClient


@pytest.mark.parametrize(
    ("model", "missing"),
    [
        ("anthropic/claude-x", "ANTHROPIC_API_KEY"),
        ("openai/gpt-x", "OPENAI_API_KEY"),
        ("openai-compatible/local", "OPENAI_BASE_URL"),
        ("gemini/pro", "anthropic/<model>"),  # an unknown provider lists the known forms
    ],
)
async def test_a_model_the_server_cannot_serve_is_a_422(
    sdk: ToolrelayClient, workspace: Path, model: str, missing: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await sdk.create_session(workspace, model=model)
    assert refused.value.status == 422
    assert missing in refused.value.server_message and model in refused.value.server_message
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["error"]["field"] == "model"
    real = str(workspace.resolve())  # noqa: ASYNC240 (tmp dir, instant)
    assert not [s for s in await sdk.list_sessions() if s.workspace == real]
