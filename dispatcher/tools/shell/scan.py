"""Scanning shell source for where a construct ends: the ``)`` closing a
``$(``, the ``}`` closing a ``${``, the quote closing a double-quoted string,
and the inner commands of a here-doc body. Each raises ShellSyntaxInvalid
rather than guess where an unclosed construct would end.
"""

from __future__ import annotations

from dispatcher.tools.shell.tokens import ShellSyntaxInvalid


def matching_paren(src: str, start: int) -> int:
    """Index of the ')' closing a '(' just before ``start``, skipping quotes."""
    depth = 1
    i = start
    n = len(src)
    while i < n:
        c = src[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            close = src.find("'", i + 1)
            if close == -1:
                raise ShellSyntaxInvalid("a single quote is not closed")
            i = close + 1
            continue
        if c == '"':
            i = skip_double(src, i + 1)
            continue
        if c == "`":
            close = src.find("`", i + 1)
            if close == -1:
                raise ShellSyntaxInvalid("a backquote is not closed")
            i = close + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ShellSyntaxInvalid("a parenthesis is not closed")


def matching_brace(src: str, start: int) -> int:
    """Index of the '}' closing a '{' just before ``start``."""
    depth = 1
    i = start
    while i < len(src):
        c = src[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ShellSyntaxInvalid("a ${...} expansion is not closed")


def skip_double(src: str, i: int) -> int:
    """Index just after the '"' closing a double-quoted string whose text starts at ``i``."""
    while i < len(src):
        c = src[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i + 1
        if c == "$" and src.startswith("$(", i):
            i = matching_paren(src, i + 2) + 1
            continue
        i += 1
    raise ShellSyntaxInvalid("a double quote is not closed")


def substitutions_in_text(text: str) -> list[str]:
    """The inner commands of every ``$(...)`` and backquote in ``text``, where
    quotes are literal characters (a here-doc body)."""
    found: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if text.startswith("$((", i):
            i += 3
            continue
        if text.startswith("$(", i):
            try:
                close = matching_paren(text, i + 2)
            except ShellSyntaxInvalid:
                found.append(text[i + 2 :])
                break
            found.append(text[i + 2 : close])
            i = close + 1
            continue
        if c == "`":
            close = text.find("`", i + 1)
            found.append(text[i + 1 : close if close != -1 else len(text)])
            i = len(text) if close == -1 else close + 1
            continue
        i += 1
    return found
