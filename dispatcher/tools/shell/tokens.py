"""The words and operators a shell command line is made of, and the error
raised when a line cannot be read with confidence. The lexer (lexer.py)
produces them; the parser (script.py) and the rules read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

REDIRECT_OPS = frozenset({"<<<", "<<-", "&>>", ">>", ">|", ">&", "<&", "<<", "<>", "&>", "<", ">"})


class ShellSyntaxInvalid(ValueError):
    """The command cannot be read with confidence."""


@dataclass(slots=True)
class Word:
    """One shell word after quote removal and the expansions we can know."""

    text: str
    dynamic: bool = False
    substitutions: list[str] = field(default_factory=list)
    quoted: bool = False


@dataclass(slots=True)
class Op:
    """An operator; for here-docs, ``heredoc`` holds the body."""

    op: str
    fd: str | None = None
    heredoc: str | None = None


Token = Word | Op
