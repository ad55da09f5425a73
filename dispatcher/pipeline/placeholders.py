"""Hook placeholders as data: ``{file}`` in a hook command reaches the command
as the value of an environment variable, never as text spliced into the
shell program.

The model chooses file names, so a name is hostile input: spliced into
``sh -c`` text it is shell syntax wherever the admin's quoting lets it be
(``a"; touch pwned; ".py`` inside ``"{file}"``). Instead, each placeholder
is replaced, once, when the config is loaded, by a reference to a variable
(``TOOLRELAY_FILE_ARG``), written for the quoting it stands in; the hook's
run sets the variable. The shell expands a variable's value but never reads
it as code, so whatever the name holds, the command receives exactly it:

===============================  =============================================
where ``{file}`` stands          what the command text gets
===============================  =============================================
unquoted (also inside ``$(...)``) ``"${TOOLRELAY_FILE_ARG}"``: one word, no
                                 splitting, no globbing
inside double quotes             ``${TOOLRELAY_FILE_ARG}``
inside single quotes             ``'"${TOOLRELAY_FILE_ARG}"'``: the single
                                 quotes are closed around a double-quoted
                                 reference (nothing expands inside them)
in a comment                     left as it is (never run)
===============================  =============================================

Where no reference can stand for plain data, the config is refused with the
reason: inside backquotes (their own, older quoting rules), ``${...}``,
arithmetic ``$((...))`` (the shell evaluates a value there), after a
here-document's ``<<`` (whose body the scanner does not follow), right after
a backslash, or when a quote or substitution is never closed.

The scanner reads the quoting as POSIX ``sh`` (dash on Debian) does, for
what matters here; where it could misjudge an exotic command (a ``case``
pattern's ``)`` inside ``$(...)``), the text it writes is still only a
reference to the variable: at worst a value is split or globbed as data,
never run. What this cannot cover: a hook that hands the text to a second
interpreter (``sh -c '... {file}'``, ``eval``, a ``sed`` script) makes that
interpreter read the value as code; write such hooks to read
``$TOOLRELAY_FILE`` themselves (specs/security.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# placeholder name -> the environment variable that carries its value
PLACEHOLDER_VARIABLES = {"file": "TOOLRELAY_FILE_ARG"}
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDER_VARIABLES) + r")\}")
# Characters after which a ``#`` starts a comment (it begins a word).
_WORD_BREAK = frozenset(" \t\n;&|()<>")
# Constructs inside which a placeholder is refused, and why.
_REFUSED_INSIDE = {
    "`": "inside backquotes (use $(...))",
    "${": "inside ${...}",
    "$((": "inside arithmetic $((...)), where the shell evaluates a value",
}


class PlaceholderError(ValueError):
    """A placeholder stands where no variable reference can be plain data."""


def bind_placeholders(command: str) -> str:
    """``command`` with each placeholder replaced by a reference to its
    variable, quoted for where it stands (the module docstring's table).
    Raises PlaceholderError, naming the place, where none can be data."""
    if _PLACEHOLDER.search(command) is None:
        return command
    return _Scanner(command).run()


@dataclass(slots=True)
class _Open:
    """A construct the scanner is inside: its opening token, and for ``$(``
    and ``$((`` how many parentheses are open."""

    kind: str
    depth: int = 0


class _Scanner:
    """One pass over a command, tracking the quoting at each character.

    ``stack`` holds the open constructs: ``"`` (double quotes), ``$(``
    (command substitution, with its parenthesis depth), `````, ``${`` and
    ``$((``. Single quotes and comments are read whole where they start."""

    def __init__(self, command: str) -> None:
        self.text = command
        self.i = 0
        self.out: list[str] = []
        self.stack: list[_Open] = []
        self.heredoc = False

    def run(self) -> str:
        text = self.text
        while self.i < len(text):
            if (match := _PLACEHOLDER.match(text, self.i)) is not None:
                self._placeholder(match)
                continue
            kind = self.stack[-1].kind if self.stack else None
            if kind == '"':
                self._in_double()
            elif kind in ("`", "${", "$(("):
                self._in_refused(kind)
            else:
                self._unquoted()
        if self.stack:
            self._refuse(len(text), f"after an unterminated {self.stack[-1].kind}")
        return "".join(self.out)

    # -- the contexts --------------------------------------------------------

    def _unquoted(self) -> None:
        text, i = self.text, self.i
        char = text[i]
        if char == "\\":
            self._escaped(i)
        elif char == "'":
            self._single_quoted(i)
        elif char == "#" and (i == 0 or text[i - 1] in _WORD_BREAK):
            end = text.find("\n", i)
            self._copy(len(text) if end < 0 else end)
        elif text.startswith("<<", i):
            self.heredoc = True
            self._copy(i + 2)
        elif self._opens(i):
            return
        elif char in "()" and self.stack and self.stack[-1].kind == "$(":
            self._paren(char)
        else:
            self._copy(i + 1)

    def _in_double(self) -> None:
        text, i = self.text, self.i
        char = text[i]
        if char == "\\":
            self._escaped(i)
        elif char == '"':
            self.stack.pop()
            self._copy(i + 1)
        elif not self._opens(i):
            self._copy(i + 1)

    def _in_refused(self, kind: str | None) -> None:
        """Inside backquotes, ``${...}`` or ``$((...))``: only their end matters
        (a placeholder here is refused in ``_placeholder``)."""
        text, i = self.text, self.i
        char = text[i]
        if char == "\\":
            self._copy(min(i + 2, len(text)))
        elif (kind == "`" and char == "`") or (kind == "${" and char == "}"):
            self.stack.pop()
            self._copy(i + 1)
        elif kind == "$((" and char in "()":
            self._paren(char)
        else:
            self._copy(i + 1)

    # -- pieces ----------------------------------------------------------------

    def _placeholder(self, match: re.Match[str]) -> None:
        kind = self.stack[-1].kind if self.stack else ""
        where = _REFUSED_INSIDE.get(kind)
        if where is not None:
            self._refuse(match.start(), where)
        if self.heredoc:
            self._refuse(match.start(), "after a here-document (<<), whose body is not followed")
        variable = PLACEHOLDER_VARIABLES[match.group(1)]
        self.out.append(f"${{{variable}}}" if kind == '"' else f'"${{{variable}}}"')
        self.i = match.end()

    def _single_quoted(self, start: int) -> None:
        """A whole '...' string; a placeholder in it closes the quotes around
        a double-quoted reference."""
        end = self.text.find("'", start + 1)
        if end < 0:
            self._refuse(start, "after an unterminated '")
        body = self.text[start + 1 : end]
        self.out.append(
            "'"
            + _PLACEHOLDER.sub(lambda m: f"'\"${{{PLACEHOLDER_VARIABLES[m.group(1)]}}}\"'", body)
            + "'"
        )
        self.i = end + 1

    def _escaped(self, i: int) -> None:
        if _PLACEHOLDER.match(self.text, i + 1) is not None:
            self._refuse(i + 1, "right after a backslash")
        self._copy(min(i + 2, len(self.text)))

    def _opens(self, i: int) -> bool:
        """Open a construct starting at ``i``, if one does."""
        text = self.text
        for token, kind, depth in (("$((", "$((", 2), ("$(", "$(", 1), ("${", "${", 0)):
            if text.startswith(token, i):
                self.stack.append(_Open(kind, depth))
                self._copy(i + len(token))
                return True
        if text[i] in '"`':
            self.stack.append(_Open(text[i]))
            self._copy(i + 1)
            return True
        return False

    def _paren(self, char: str) -> None:
        top = self.stack[-1]
        top.depth += 1 if char == "(" else -1
        if top.depth == 0:
            self.stack.pop()
        self._copy(self.i + 1)

    def _copy(self, end: int) -> None:
        self.out.append(self.text[self.i : end])
        self.i = end

    def _refuse(self, at: int, where: str) -> None:
        shown = self.text if len(self.text) <= 120 else self.text[:117] + "..."
        raise PlaceholderError(
            f"the placeholder at offset {at} of {shown!r} stands {where}: its value "
            "could not reach the command as plain data; put it unquoted or in plain "
            'double quotes ("{file}"), or read $TOOLRELAY_FILE in the command'
        )
