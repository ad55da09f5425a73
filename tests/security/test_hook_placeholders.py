"""Attack: the model names the edited file, and a hook command an admin wrote
carries it through ``{file}``, however the admin quoted it: bare
(`ruff check {file}`), in double quotes (`ruff check "{file}"`) or in single
quotes (`ruff check '{file}'`). A name like ``a"; touch pwned; ".py``,
``$(touch pwned).py`` or ``'; touch pwned #.py`` must reach the hook's
program as exactly that name, as data: it never runs anything.

Real ``sh`` processes through HookRunner (a property test over names built
from shell metacharacters and injection fragments, for each quoting style),
the same through real bubblewrap, and one end-to-end run: a real server, a
client-played write of such a file, a post_tool_use hook in the sandbox.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from dispatcher.pipeline.hooks import HookContext, HookEvent, HookRunner, HooksConfig
from dispatcher.sandbox import Sandbox, SandboxConfig, probe
from tests.harness import InProcessServer
from tests.server.support import new_session, result_text, start_turn, use, wait_turn

# Each prints the arguments its program got, one ``<...>`` line each, NUL-free.
STYLES = {
    "bare": "printf '<%s>\\n' {file} > seen.txt",
    "double": "printf '<%s>\\n' \"{file}\" > seen.txt",
    "single": "printf '<%s>\\n' '{file}' > seen.txt",
    "double, inside a word": "printf '<%s>\\n' \"x{file}y\" > seen.txt",
    "single, inside a word": "printf '<%s>\\n' 'x{file}y' > seen.txt",
    "in a command substitution": "printf '<%s>\\n' \"$(printf %s {file})\" > seen.txt",
}
# What the program must have received for a file ``name`` in each style.
EXPECTED = {
    "bare": "{arg}",
    "double": "{arg}",
    "single": "{arg}",
    "double, inside a word": "x{arg}y",
    "single, inside a word": "x{arg}y",
    # $(...) drops trailing newlines, as it would for any value.
    "in a command substitution": "{arg_stripped}",
}
ATTACKS = [
    'a"; touch pwned; ".py',
    "$(touch pwned).py",
    "'; touch pwned #.py",
    "`touch pwned`.py",
    "a'\"$(touch pwned)\"'b.py",
    'x\\"; touch pwned; \\".py',
    "--config=evil.toml",
    "-rf",
    "a\n touch pwned\n.py",
    "*.py",
]
FRAGMENTS = [
    '"',
    "'",
    "\\",
    "$(touch pwned)",
    "`touch pwned`",
    "; touch pwned;",
    "'; touch pwned #",
    '"; touch pwned; "',
    "${IFS}",
    "$1",
    "{file}",
    "|touch pwned",
    "&& touch pwned",
    "\n",
    "-",
    "*",
    "~",
    ".py",
]
META = "\"'\\$`;&|<>(){}[]*?!#~=% \t\n-abc"
NAMES = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(alphabet=META, min_size=1, max_size=4)),
    min_size=1,
    max_size=6,
).map("".join)


def _expected(style: str, name: str) -> list[str]:
    arg = "./" + name if name.startswith("-") else name
    text = EXPECTED[style].format(arg=arg, arg_stripped=arg.rstrip("\n"))
    return f"<{text}>".split("\n")


async def _run_hook(ws: Path, style: str, name: str, sandbox: Sandbox | None) -> None:
    for leftover in ("seen.txt", "pwned"):
        (ws / leftover).unlink(missing_ok=True)
    hooks = HooksConfig.model_validate(
        {"post_tool_use": [{"name": "args", "command": STYLES[style]}]}
    )
    context = HookContext(session_id="s", workspace=str(ws), tool_name="write_file", file=name)
    [result] = await HookRunner(hooks).run(HookEvent.POST_TOOL_USE, context, sandbox=sandbox)
    assert not (ws / "pwned").exists(), f"{style}: the file name {name!r} ran a command"
    assert result.exit_code == 0, (style, name, result)
    seen = (ws / "seen.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert seen == _expected(style, name), (style, name)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return tmp_path.resolve()


@pytest.fixture
def split(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace and, beside it (never inside), a server's data."""
    root = tmp_path.resolve()
    (root / "ws").mkdir()
    return root / "ws", root / "server"


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("name", ATTACKS)
async def test_an_attacking_name_is_data_in_every_quoting(ws: Path, style: str, name: str) -> None:
    await _run_hook(ws, style, name, None)


@pytest.mark.parametrize("style", sorted(STYLES))
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(name=NAMES)
async def test_any_name_is_data_in_every_quoting(ws: Path, style: str, name: str) -> None:
    await _run_hook(ws, style, name, None)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")
@pytest.mark.parametrize("style", ["bare", "double", "single"])
async def test_in_the_sandbox_too(ws: Path, style: str) -> None:
    bwrap, why = probe()
    if bwrap is None:
        pytest.skip(f"bubblewrap does not work here: {why}")
    sandbox = Sandbox(SandboxConfig(bwrap), str(ws))
    for name in ATTACKS[:4]:
        await _run_hook(ws, style, name, sandbox)


@pytest.mark.parametrize(
    ("command", "said"),
    [
        ("echo `cat {file}`", "backquotes"),
        ("echo $(( {file} + 1 ))", "arithmetic"),
        ("echo ${x:-{file}}", "${...}"),
        ("cat <<EOF\n{file}\nEOF", "here-document"),
        ("echo \\{file}", "backslash"),
        ("echo '{file}", "unterminated"),
    ],
)
def test_a_placeholder_where_it_cannot_be_data_is_refused_at_load(command: str, said: str) -> None:
    with pytest.raises(ValidationError) as caught:
        HooksConfig.model_validate({"post_tool_use": [{"name": "bad", "command": command}]})
    assert said in str(caught.value)


# -- end to end: the model's write, the admin's hook, a real server --------------


@pytest.mark.skipif(
    shutil.which("bwrap") is None or probe()[0] is None, reason="bubblewrap does not work here"
)
async def test_a_written_file_name_does_not_run_in_the_post_edit_hook(
    split: tuple[Path, Path],
) -> None:
    workspace, server_root = split
    config = {
        "policy": {"default": {"write": "auto"}},
        "hooks": {
            "post_tool_use": [
                {
                    "name": "lint",
                    # The server's config file reads as empty in the sandbox.
                    "command": "printf '<%s>\\n' \"{file}\" '{file}' {file} >> seen.txt; "
                    f"test -s {server_root / 'config.yaml'} && echo UNSANDBOXED >> seen.txt; "
                    "exit 0",
                    "matcher": "write_file",
                }
            ]
        },
    }
    names = ['a"; touch pwned; ".py', "$(touch pwned).py", "'; touch pwned #.py"]
    with InProcessServer(server_root, config=config) as srv:
        async with srv.client("alice") as http:
            sid = await new_session(http, workspace)
            uses = [use(f"w{i}", "write_file", path=n, content="x\n") for i, n in enumerate(names)]
            turn = await wait_turn(http, sid, await start_turn(http, sid, *uses))
    assert turn["status"] == "completed", turn
    assert all(not r["is_error"] for r in turn["results"]), [
        result_text(r) for r in turn["results"]
    ]
    assert not (workspace / "pwned").exists()
    seen = (workspace / "seen.txt").read_text(encoding="utf-8").splitlines()
    assert sorted(seen) == sorted(f"<{n}>" for n in names for _ in range(3))
