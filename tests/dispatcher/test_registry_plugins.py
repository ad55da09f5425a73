"""Registration rules and plugin loading (import paths and entry points)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dispatcher import ToolDispatcher, ToolRegistrationError, load_plugins
from protocol.canonical import SideEffects, ToolDefinition
from tests.dispatcher.support import EchoTool, schema


def test_duplicate_names_are_refused(dispatcher: ToolDispatcher) -> None:
    dispatcher.register(EchoTool)
    with pytest.raises(ToolRegistrationError, match="already registered"):
        dispatcher.register(EchoTool)


def test_unregister(dispatcher: ToolDispatcher) -> None:
    dispatcher.register(EchoTool)
    dispatcher.unregister("echo")
    assert dispatcher.names() == []
    with pytest.raises(KeyError):
        dispatcher.unregister("echo")


def test_bad_schema_is_refused_with_the_tool_name(dispatcher: ToolDispatcher) -> None:
    class Bad(EchoTool):
        definition = ToolDefinition(
            name="bad",
            description="x",
            input_schema={"type": "object", "properties": {"a": {"anyOf": []}}},
            side_effects=SideEffects.NONE,
        )

    with pytest.raises(ToolRegistrationError, match=r"tool 'bad': anyOf at '/properties/a/anyOf'"):
        dispatcher.register(Bad)


@pytest.mark.parametrize(
    "factory",
    [
        pytest.param(lambda: object(), id="no-definition"),
        pytest.param(42, id="not-callable"),
    ],
)
def test_malformed_factories_are_refused(dispatcher: ToolDispatcher, factory: Any) -> None:
    with pytest.raises(ToolRegistrationError):
        dispatcher.register(factory)


def test_sync_execute_is_refused(dispatcher: ToolDispatcher) -> None:
    class Sync:
        definition = EchoTool.definition

        def execute(self, input: dict[str, Any], context: Any) -> None: ...

        async def cancel(self) -> bool:
            return False

    with pytest.raises(ToolRegistrationError, match="async execute"):
        dispatcher.register(Sync)  # type: ignore[arg-type]


def test_factory_that_raises_is_reported(dispatcher: ToolDispatcher) -> None:
    def boom() -> Any:
        raise RuntimeError("no config")

    with pytest.raises(ToolRegistrationError, match="RuntimeError: no config"):
        dispatcher.register(boom)


def test_path_fields_must_exist_in_schema(dispatcher: ToolDispatcher) -> None:
    class Paths(EchoTool):
        path_fields = ("nowhere",)

    with pytest.raises(ToolRegistrationError, match="nowhere"):
        dispatcher.register(Paths)


def test_timeouts_default_by_side_effect(dispatcher: ToolDispatcher) -> None:
    class Exec(EchoTool):
        definition = ToolDefinition(
            name="exec", description="x", input_schema=schema(), side_effects=SideEffects.EXECUTE
        )

    dispatcher.register(EchoTool)
    dispatcher.register(Exec)
    reg = dispatcher._registry  # the defaults are a documented contract
    assert reg.get("echo").timeout == 60  # type: ignore[union-attr]
    assert reg.get("exec").timeout == 600  # type: ignore[union-attr]


PLUGIN_SOURCE = textwrap.dedent(
    """
    from typing import Any
    from protocol.canonical import SideEffects, ToolDefinition
    from dispatcher import ToolOutput

    class Greeter:
        definition = ToolDefinition(
            name="{name}",
            description="Greets.",
            input_schema={{"type": "object", "properties": {{}}}},
            side_effects=SideEffects.NONE,
        )

        async def execute(self, input: dict[str, Any], context: Any) -> ToolOutput:
            return ToolOutput.text("hello")

        async def cancel(self) -> bool:
            return False

    def make_tool() -> Greeter:
        return Greeter()
    """
)


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "good_plugin.py").write_text(PLUGIN_SOURCE.format(name="greet"))
    (tmp_path / "ep_plugin.py").write_text(PLUGIN_SOURCE.format(name="greet_ep"))
    (tmp_path / "broken_plugin.py").write_text("raise ImportError('missing dependency foo')\n")
    # A real installed distribution, as importlib.metadata discovers it.
    dist = tmp_path / "toolrelay_test_plugins-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: toolrelay-test-plugins\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[toolrelay.tools]\ngreet_ep = ep_plugin:make_tool\nghost = ep_plugin:does_not_exist\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("good_plugin", "ep_plugin", "broken_plugin"):
            sys.modules.pop(name, None)


def test_broken_plugins_are_reported_and_others_load(
    dispatcher: ToolDispatcher, plugin_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    errors = load_plugins(
        dispatcher,
        import_paths=["good_plugin:make_tool", "broken_plugin:make_tool", "no_colon_here"],
    )
    assert {"greet", "greet_ep"} <= set(dispatcher.names())
    by_source = {e.source: e.reason for e in errors}
    assert "missing dependency foo" in by_source["broken_plugin:make_tool"]
    assert "package.module:factory" in by_source["no_colon_here"]
    ghost = [s for s in by_source if s.startswith("entry point ghost")]
    assert ghost and "does_not_exist" in by_source[ghost[0]]
    assert "broken_plugin" in caplog.text


def test_plugin_registering_a_taken_name_is_reported(
    dispatcher: ToolDispatcher, plugin_dir: Path
) -> None:
    errors = load_plugins(
        dispatcher,
        import_paths=["good_plugin:make_tool", "good_plugin:make_tool"],
        entry_points_group=None,
    )
    assert dispatcher.names() == ["greet"]
    assert len(errors) == 1 and "already registered" in errors[0].reason
