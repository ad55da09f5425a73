"""BaseTool's default effects (by class and path fields) and a protocol-only
plugin's own ``effects`` seen through the registry's adapter."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from dispatcher import ToolDispatcher, ToolOutput, WorkspaceFileAPI
from dispatcher.registry import ProtocolToolAdapter
from dispatcher.tool import BaseTool, ToolEffects
from protocol.canonical import SideEffects, ToolDefinition

SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
    "additionalProperties": False,
}


def tool_of(side_effects: SideEffects, path_fields: tuple[str, ...] = ()) -> BaseTool:
    class Made(BaseTool):
        definition = ToolDefinition(
            name="made", description="x", input_schema=SCHEMA, side_effects=side_effects
        )

    made = Made()
    made.path_fields = path_fields
    return made


@pytest.fixture
def ws(tmp_path: Path) -> WorkspaceFileAPI:
    (tmp_path / "real.txt").write_text("x")
    os.symlink("real.txt", tmp_path / "alias")
    return WorkspaceFileAPI(str(tmp_path))


@pytest.mark.parametrize("side_effects", [SideEffects.NONE, SideEffects.READ])
async def test_none_and_read_tools_change_nothing(
    ws: WorkspaceFileAPI, side_effects: SideEffects
) -> None:
    effects = await tool_of(side_effects, ("path",)).effects({"path": "a", "n": 1}, ws)
    assert effects == ToolEffects(summary='made(path="a", n=1)')


async def test_a_write_tool_writes_its_path_fields_through_links(ws: WorkspaceFileAPI) -> None:
    effects = await tool_of(SideEffects.WRITE, ("path",)).effects({"path": "./alias"}, ws)
    assert effects.writes == ("alias", "real.txt") and not effects.unknown


@pytest.mark.parametrize(
    ("side_effects", "path_fields"),
    [
        (SideEffects.WRITE, ()),
        (SideEffects.EXECUTE, ()),
        (SideEffects.EXECUTE, ("path",)),
        (SideEffects.NETWORK, ("path",)),
    ],
)
async def test_other_tools_cannot_say(
    ws: WorkspaceFileAPI, side_effects: SideEffects, path_fields: tuple[str, ...]
) -> None:
    effects = await tool_of(side_effects, path_fields).effects({"path": "a"}, ws)
    assert effects.unknown and effects.modified == ()


class _Plugin:
    definition = ToolDefinition(
        name="plug", description="x", input_schema=SCHEMA, side_effects=SideEffects.WRITE
    )

    async def execute(self, input: dict[str, Any], context: Any) -> ToolOutput:
        return ToolOutput.text("ok")

    async def cancel(self) -> bool:
        return True


class _PlainEffects(_Plugin):
    def effects(self, input: dict[str, Any], workspace: WorkspaceFileAPI) -> ToolEffects:
        return ToolEffects(writes=("out.txt",), lines_changed=3)


class _AsyncEffects(_Plugin):
    async def effects(
        self, input: dict[str, Any], workspace: WorkspaceFileAPI, *, sandbox: Any = None
    ) -> ToolEffects:
        return ToolEffects(deletes=("gone.txt",))


class _WrongAnswer(_Plugin):
    def effects(self, input: dict[str, Any], workspace: WorkspaceFileAPI) -> object:
        return {"writes": ["x"]}


async def test_a_protocol_plugin_declares_its_own_effects_plain_or_async(
    ws: WorkspaceFileAPI,
) -> None:
    plain = await ProtocolToolAdapter(_PlainEffects()).effects({}, ws)
    assert plain.writes == ("out.txt",) and plain.lines_changed == 3
    awaited = await ProtocolToolAdapter(_AsyncEffects()).effects({}, ws, sandbox=None)
    assert awaited.deletes == ("gone.txt",)
    # An answer the pipeline cannot read is as good as none.
    assert (await ProtocolToolAdapter(_WrongAnswer()).effects({}, ws)).unknown
    # Without an effects method: the default (a write tool without path fields).
    assert (await ProtocolToolAdapter(_Plugin()).effects({}, ws)).unknown


def test_the_registry_wraps_a_protocol_plugin_with_its_effects() -> None:
    dispatcher = ToolDispatcher()
    dispatcher.register(_PlainEffects)
    entry = dispatcher._registry.get("plug")  # the adapter is the registry's business
    assert entry is not None and isinstance(entry.stateless, ProtocolToolAdapter)
