"""The pipeline names no built-in tool: what a call would do is what its tool
declares (``BaseTool.effects``), never a branch on a tool's name.

Every string literal in ``dispatcher/pipeline/*.py`` that is not a docstring
is searched for the name of a built-in tool: a name with an underscore
(``write_file``) anywhere as a whole word; one that is also an English word
(``shell``, ``grep``) when the literal is that name (or starts with it and a
colon, a summary's prefix), so that prose in a message does not count. The one
exception is profiles.py's built-in profile tool lists, which are
configuration data (which tools a profile shows), not behaviour keyed on a
name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from dispatcher.tools import builtin_tool_factories, knowledge_tool_factories
from dispatcher.tools.agents import DispatchSubagentTool

PIPELINE = Path(__file__).resolve().parents[3] / "dispatcher" / "pipeline"
# Configuration data: the built-in profiles' tool lists.
EXEMPT = {"profiles.py"}


def builtin_names() -> set[str]:
    factories = [
        *builtin_tool_factories(shell_enabled=True, delete_enabled=True),
        *knowledge_tool_factories(memory_enabled=True),
    ]
    names = {factory.definition.name for factory in factories}  # type: ignore[attr-defined]
    return names | {DispatchSubagentTool.definition.name}


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring nodes of the module, its classes and functions."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def tool_names_in(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every tool name inside a non-docstring string literal
    (see the module docstring)."""
    coined = sorted(n for n in names if "_" in n)
    plain = {n for n in names if "_" not in n}
    word = re.compile(r"\b(" + "|".join(re.escape(n) for n in coined) + r")\b")
    tree = ast.parse(source)
    docs = _docstrings(tree)
    hits: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
            hits.extend((node.lineno, m.group(1)) for m in word.finditer(text))
            head = text.split(":", 1)[0].strip()
            if head in plain:
                hits.append((node.lineno, head))
    return hits


def test_no_pipeline_module_names_a_built_in_tool() -> None:
    names = builtin_names()
    assert {"write_file", "apply_patch", "shell", "git_branch"} <= names
    found = {
        f"{path.name}:{line} names {name!r}"
        for path in sorted(PIPELINE.glob("*.py"))
        if path.name not in EXEMPT
        for line, name in tool_names_in(path.read_text(encoding="utf-8"), names)
    }
    assert not found, "the pipeline branches on tool names:\n" + "\n".join(sorted(found))


def test_the_check_sees_a_name_and_skips_docstrings() -> None:
    source = (
        '"""Docstrings may say write_file."""\n'
        "def f(name):\n"
        '    """So may this shell."""\n'
        '    return name == "write_file" or name in ("shell", "run_command")\n'
        'MESSAGE = "where the shell evaluates it"\n'
        'SUMMARY = "shell: " + "x"\n'
    )
    assert sorted(tool_names_in(source, {"write_file", "shell", "run_command"})) == [
        (4, "run_command"),
        (4, "shell"),
        (4, "write_file"),
        (6, "shell"),
    ]
