"""Attack: the model names the edited file, and ``{file}`` puts that name
into an admin's hook command (`ruff check {file}`). A name must reach the
hook's program as one plain argument: never as shell syntax (``a;touch x``,
``$(...)``) and never as an option (``--config=evil.toml``, ``-rf``).

Real ``sh`` processes through HookRunner (no sandbox needed for this).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatcher.pipeline.hooks import HookContext, HookEvent, HookRunner, HooksConfig

NAMES = [
    "--config=evil.toml",
    "-rf",
    "a;touch pwned",
    "$(touch pwned)",
    "`touch pwned`",
    "it's here.py",
    "sp ace.py",
]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return tmp_path.resolve()


@pytest.mark.parametrize("name", NAMES)
async def test_file_reaches_the_hook_as_one_plain_argument(ws: Path, name: str) -> None:
    # Prints each argument it gets on its own line, so a split or an option shows.
    hooks = HooksConfig.model_validate(
        {"post_tool_use": [{"name": "args", "command": "printf '<%s>\\n' {file} > seen.txt"}]}
    )
    runner = HookRunner(hooks)
    context = HookContext(session_id="s", workspace=str(ws), tool_name="write_file", file=name)
    [result] = await runner.run(HookEvent.POST_TOOL_USE, context, sandbox=None)
    assert result.exit_code == 0, result
    seen = (ws / "seen.txt").read_text(encoding="utf-8").splitlines()
    expected = "./" + name if name.startswith("-") else name
    assert seen == [f"<{expected}>"]
    assert not (ws / "pwned").exists()
