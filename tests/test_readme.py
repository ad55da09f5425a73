"""README's snippets work as written: every config snippet loads with the
server's own loader, the plugin example registers its tool from the import
path its config snippet names, and the Configuration section names every
top-level key of the config file."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dispatcher import ToolDispatcher, load_plugins
from server.config import Config, load_config
from tests.dispatcher.support import RecordingPublisher
from tests.harness import REPO_ROOT

README = REPO_ROOT / "README.md"
# A fence's info string ("yaml", "yaml prometheus.yml") and its body.
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks(language: str) -> list[tuple[str, str]]:
    """(info string, body) of each README block whose language is ``language``."""
    text = README.read_text(encoding="utf-8")
    return [
        (info.strip(), body) for info, body in FENCE.findall(text) if info.split()[:1] == [language]
    ]


# Plain ```yaml blocks are toolrelay config files; another tool's file is
# labelled with its name (```yaml prometheus.yml).
CONFIGS = [body for info, body in blocks("yaml") if info == "yaml"]


def test_the_readme_has_config_snippets() -> None:
    assert len(CONFIGS) >= 3, "expected the MCP, configuration and plugin snippets"
    for info, body in blocks("yaml"):
        assert isinstance(yaml.safe_load(body), dict), f"```{info} does not parse: {body}"


@pytest.mark.parametrize("snippet", CONFIGS, ids=[f"snippet-{i}" for i in range(len(CONFIGS))])
def test_each_config_snippet_loads(snippet: str, tmp_path: Path) -> None:
    path = tmp_path / "toolrelay.yaml"
    path.write_text(snippet, encoding="utf-8")
    config = load_config(path, env={})  # ConfigInvalid (naming the key) if not
    # Whatever the snippet sets is really set, not silently dropped.
    assert config.model_dump(exclude_unset=True).keys() >= yaml.safe_load(snippet).keys()


@pytest.fixture
def plugin_package(tmp_path: Path) -> Iterator[Path]:
    """README's tool example saved as mypkg/tools.py, importable."""
    (example,) = [body for _, body in blocks("python") if "class WordCount" in body]
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "tools.py").write_text(example, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("mypkg.tools", "mypkg"):
            sys.modules.pop(name, None)


def test_the_plugin_example_loads_from_its_config_snippet(
    plugin_package: Path, tmp_path: Path
) -> None:
    # The plugin section's own snippet: plugins and nothing else.
    (snippet,) = [body for body in CONFIGS if yaml.safe_load(body).keys() == {"plugins"}]
    path = tmp_path / "plugins.yaml"
    path.write_text(snippet, encoding="utf-8")
    config = load_config(path, env={})
    dispatcher = ToolDispatcher(RecordingPublisher())
    errors = load_plugins(
        dispatcher, import_paths=config.plugins.import_paths, entry_points_group=None
    )
    assert errors == []
    assert "word_count" in dispatcher.names()


def test_the_configuration_section_names_every_top_level_key() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    missing = [key for key in Config.model_fields if f"`{key}`" not in section]
    assert missing == [], f"README's Configuration section does not name {missing}"
