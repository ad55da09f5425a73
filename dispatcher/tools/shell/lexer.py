"""A POSIX-shell lexer, just deep enough to see which programs a command
line runs and with which arguments (the parser on top is script.py).

It undoes what a shell undoes before running anything, so tricks that hide a
word from a naive pattern match do not hide it from the blocklist: quoting
(``"r""m"``, ``r''m``), backslashes (``r\\m``), ANSI-C strings
(``$'\\x72m'``), line continuations, ``$IFS`` used as a space, positional
parameters that expand to nothing in ``sh -c`` (``r$@m``), variables assigned
earlier in the same line (``a=rm; $a -rf /``), and ``$(echo rm)`` style
substitutions whose output is fixed. Whatever cannot be known statically is
marked *dynamic*. Command substitutions, process substitutions, here-docs and
here-strings keep their inner text so the rules can analyse it as a script.

Anything the lexer cannot read with confidence (an unclosed quote or
parenthesis) raises ShellSyntaxInvalid: the caller refuses such a command
rather than guess how the real shell would read it.
"""

from __future__ import annotations

import re

from dispatcher.tools.shell.scan import matching_brace, matching_paren, substitutions_in_text
from dispatcher.tools.shell.tokens import REDIRECT_OPS, Op, ShellSyntaxInvalid, Token, Word

_OPERATORS = (
    "<<<", "<<-", "&>>", ";;&",
    "&&", "||", "|&", ";;", ";&", ">>", ">|", ">&", "<&", "<<", "<>", "&>",
    "|", "&", ";", "(", ")", "<", ">",
)  # fmt: skip
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_ANSI_ESCAPES = {
    "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n",
    "r": "\r", "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?",
}  # fmt: skip
_MAX_NESTING = 16


class Lexer:
    """One pass over a command line's source, producing its tokens (``run``)
    and the inner command lines of its substitutions (``subs``)."""

    def __init__(self, src: str, variables: dict[str, str], depth: int) -> None:
        if depth > _MAX_NESTING:
            raise ShellSyntaxInvalid("substitutions are nested too deeply")
        self.src = src
        self.n = len(src)
        self.vars = variables
        self.depth = depth
        self.tokens: list[Token] = []
        self.subs: list[str] = []
        self.parts: list[str] | None = None
        self.dynamic = False
        self.quoted = False
        self.word_subs: list[str] = []
        self.pending_heredocs: list[tuple[Op, bool]] = []
        self.heredoc_waiting: tuple[Op, bool] | None = None
        self.ready_heredocs: list[tuple[Op, str, bool]] = []

    # -- words ------------------------------------------------------------

    def _start(self) -> list[str]:
        if self.parts is None:
            self.parts = []
            self.dynamic = False
            self.quoted = False
            self.word_subs = []
        return self.parts

    def _end(self) -> None:
        if self.parts is None:
            return
        word = Word("".join(self.parts), self.dynamic, self.word_subs, self.quoted)
        self.parts = None
        if self.heredoc_waiting is not None:
            op, strip = self.heredoc_waiting
            self.heredoc_waiting = None
            self.ready_heredocs.append((op, word.text, strip))
        match = _ASSIGNMENT.match(word.text)
        if match and not word.dynamic:
            # Remembered for later expansions; over-approximates scope, which
            # only ever makes the blocklist see more, never less.
            self.vars[match[1]] = match[2]
        self.tokens.append(word)
        self._printf_assignment()

    def _printf_assignment(self) -> None:
        """``printf -v NAME FORMAT [ARG]`` assigns too (``printf -v c rm; $c -rf /``)."""
        tail = self.tokens[-5:]
        texts = [t.text if isinstance(t, Word) else None for t in tail]
        for start in (len(texts) - 4, len(texts) - 5):
            if start < 0 or texts[start : start + 2] != ["printf", "-v"]:
                continue
            name, fmt, *rest = texts[start + 2 :]
            if name is None or fmt is None or not _NAME.fullmatch(name):
                return
            if not rest and "%" not in fmt and "\\" not in fmt:
                self.vars[name] = fmt
            elif rest and rest[0] is not None and fmt in ("%s", "%b"):
                self.vars[name] = rest[0]
            elif not rest:
                # A format we do not emulate: the variable's value is unknown.
                self.vars.pop(name, None)
            return

    def _insert_split(self, text: str) -> None:
        """An unquoted expansion: its whitespace separates words."""
        pieces = re.split(r"[ \t\n]+", text)
        for k, piece in enumerate(pieces):
            if k > 0:
                self._end()
            if piece:
                self._start().append(piece)

    # -- main loop --------------------------------------------------------

    def run(self) -> list[Token]:
        i = 0
        src = self.src
        while i < self.n:
            c = src[i]
            if c == "\\":
                if i + 1 < self.n and src[i + 1] == "\n":
                    i += 2
                    continue
                if i + 1 >= self.n:
                    i += 1
                    continue
                self._start().append(src[i + 1])
                self.quoted = True
                i += 2
            elif c in " \t":
                self._end()
                i += 1
            elif c == "\n":
                self._end()
                self.tokens.append(Op("\n"))
                i = self._read_heredocs(i + 1)
            elif c == "#" and self.parts is None:
                nl = src.find("\n", i)
                i = self.n if nl == -1 else nl
            elif c in "<>" and i + 1 < self.n and src[i + 1] == "(":
                close = matching_paren(src, i + 2)
                inner = src[i + 2 : close]
                self._start().append(f"/dev/fd/{'in' if c == '<' else 'out'}")
                self.dynamic = True
                self.word_subs.append(inner)
                self.subs.append(inner)
                i = close + 1
            elif c in ";&|()<>":
                i = self._operator(i)
            elif c == "'":
                close = src.find("'", i + 1)
                if close == -1:
                    raise ShellSyntaxInvalid("a single quote is not closed")
                self._start().append(src[i + 1 : close])
                self.quoted = True
                i = close + 1
            elif c == '"':
                i = self._double_quoted(i + 1)
            elif c == "$":
                i = self._dollar(i, quoted=False)
            elif c == "`":
                i = self._backtick(i, quoted=False)
            else:
                self._start().append(c)
                i += 1
        self._end()
        if self.heredoc_waiting is not None:
            raise ShellSyntaxInvalid("a here-document has no delimiter")
        self._flush_heredocs_at_eof()
        return self.tokens

    def _operator(self, i: int) -> int:
        op = next(o for o in _OPERATORS if self.src.startswith(o, i))
        fd = None
        if op in REDIRECT_OPS and self.parts is not None and not self.quoted:
            text = "".join(self.parts)
            if text.isdigit() and not self.dynamic:
                fd = text
                self.parts = None
        self._end()
        token = Op(op, fd)
        self.tokens.append(token)
        if op in ("<<", "<<-"):
            self.heredoc_waiting = (token, op == "<<-")
        return i + len(op)

    def _read_heredocs(self, i: int) -> int:
        """After a newline: the bodies of here-docs opened on the line just ended."""
        for op, delimiter, strip in self.ready_heredocs:
            body: list[str] = []
            while i < self.n:
                nl = self.src.find("\n", i)
                end = self.n if nl == -1 else nl
                line = self.src[i:end]
                i = end + 1
                if (line.lstrip("\t") if strip else line) == delimiter:
                    break
                body.append(line)
            op.heredoc = "\n".join(body)
            # An unquoted delimiter lets $(...) and `...` run inside the body;
            # always treating them as live only ever makes the rules see more.
            self.subs.extend(substitutions_in_text(op.heredoc))
        self.ready_heredocs = []
        return min(i, self.n)

    def _flush_heredocs_at_eof(self) -> None:
        for op, _, _ in self.ready_heredocs:
            op.heredoc = ""
        self.ready_heredocs = []

    # -- quoting ----------------------------------------------------------

    def _double_quoted(self, i: int) -> int:
        parts = self._start()
        self.quoted = True
        src = self.src
        while i < self.n:
            c = src[i]
            if c == '"':
                return i + 1
            if c == "\\" and i + 1 < self.n:
                nxt = src[i + 1]
                if nxt == "\n":
                    i += 2
                    continue
                parts.append(nxt if nxt in '$`"\\' else c + nxt)
                i += 2
            elif c == "$":
                i = self._dollar(i, quoted=True)
            elif c == "`":
                i = self._backtick(i, quoted=True)
            else:
                parts.append(c)
                i += 1
        raise ShellSyntaxInvalid("a double quote is not closed")

    def _ansi_c(self, i: int) -> int:
        """``$'...'`` starting at the quote; returns the index after it."""
        out: list[str] = []
        src = self.src
        i += 1
        while i < self.n:
            c = src[i]
            if c == "'":
                self._start().append("".join(out))
                self.quoted = True
                return i + 1
            if c == "\\" and i + 1 < self.n:
                nxt = src[i + 1]
                if nxt in _ANSI_ESCAPES:
                    out.append(_ANSI_ESCAPES[nxt])
                    i += 2
                elif nxt == "x":
                    m = re.match(r"[0-9a-fA-F]{1,2}", src[i + 2 :])
                    out.append(chr(int(m[0], 16)) if m else "\\x")
                    i += 2 + (len(m[0]) if m else 0)
                elif nxt in "uU":
                    m = re.match(r"[0-9a-fA-F]{1,8}", src[i + 2 :])
                    out.append(chr(min(int(m[0], 16), 0x10FFFF)) if m else "\\" + nxt)
                    i += 2 + (len(m[0]) if m else 0)
                elif nxt in "01234567":
                    m = re.match(r"[0-7]{1,3}", src[i + 1 :])
                    assert m is not None
                    out.append(chr(int(m[0], 8) & 0xFF))
                    i += 1 + len(m[0])
                elif nxt == "c" and i + 2 < self.n:
                    out.append(chr(ord(src[i + 2]) & 0x1F))
                    i += 3
                else:
                    out.append(c + nxt)
                    i += 2
            else:
                out.append(c)
                i += 1
        raise ShellSyntaxInvalid("a $'...' string is not closed")

    # -- expansions -------------------------------------------------------

    def _dollar(self, i: int, *, quoted: bool) -> int:
        src = self.src
        nxt = src[i + 1] if i + 1 < self.n else ""
        if src.startswith("$((", i):
            close = matching_paren(src, i + 2)
            if not src.startswith(")", close + 1):
                raise ShellSyntaxInvalid("an arithmetic expansion is not closed")
            self._start()
            self.dynamic = True
            return close + 2
        if nxt == "(":
            close = matching_paren(src, i + 2)
            self._substitution(src[i + 2 : close], quoted)
            return close + 1
        if nxt == "{":
            close = matching_brace(src, i + 2)
            self._parameter(src[i + 2 : close], quoted)
            return close + 1
        if nxt == "'" and not quoted:
            return self._ansi_c(i + 1)
        if nxt == '"' and not quoted:
            return self._double_quoted(i + 2)
        m = _NAME.match(src, i + 1)
        if m:
            self._parameter(m[0], quoted)
            return m.end()
        if nxt and (nxt.isdigit() or nxt in "@*#?$!-"):
            self._parameter(nxt, quoted)
            return i + 2
        self._start().append("$")
        return i + 1

    def _parameter(self, expr: str, quoted: bool) -> None:
        m = re.match(r"#?([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(.*)$", expr, re.DOTALL)
        name, rest = (m[1], m[2]) if m else (expr, "")
        if name == "IFS":
            # The classic "rm${IFS}-rf${IFS}/": unquoted it separates words.
            if quoted:
                self._start().append(" ")
            else:
                self._end()
            return
        value: str | None
        if name == "HOME":
            value = "~"
        elif name in self.vars:
            value = self.vars[name]
        elif (name.isdigit() and name != "0") or name in ("@", "*"):
            value = ""  # no positional parameters in `sh -c '...'`
        elif rest[:2] in (":-", ":=") or rest[:1] in ("-", "="):
            # Unset variable with a default: the default is what runs.
            default = rest[2:] if rest.startswith(":") else rest[1:]
            value = _static_text(default, dict(self.vars), self.depth)
        else:
            value = None
        if expr.startswith("#") or (rest and not rest.startswith((":-", ":=", "-", "="))):
            value = None  # lengths and pattern edits: not worth emulating
        if value is None:
            self._start()
            self.dynamic = True
            self._append_marker(f"${{{name}}}")
            return
        if quoted and name != "@":
            self._start().append(value)
        else:
            # "$@" expands to one word per positional parameter.
            self._insert_split(value)

    def _append_marker(self, marker: str) -> None:
        self._start().append(marker)

    def _backtick(self, i: int, *, quoted: bool) -> int:
        src = self.src
        j = i + 1
        inner: list[str] = []
        while j < self.n:
            c = src[j]
            if c == "\\" and j + 1 < self.n and src[j + 1] in "`\\$":
                inner.append(src[j + 1])
                j += 2
                continue
            if c == "`":
                self._substitution("".join(inner), quoted)
                return j + 1
            inner.append(c)
            j += 1
        raise ShellSyntaxInvalid("a backquote is not closed")

    def _substitution(self, inner: str, quoted: bool) -> None:
        self.subs.append(inner)
        output = _static_echo(inner, dict(self.vars), self.depth + 1)
        if output is None:
            self._start()
            self.dynamic = True
            self.word_subs.append(inner)
            self._append_marker("$(...)")
            return
        self.word_subs.append(inner)
        if quoted:
            self._start().append(output)
        else:
            self._insert_split(output)


def _static_text(text: str, variables: dict[str, str], depth: int) -> str | None:
    """``text`` as one word after expansion, or None if anything is dynamic."""
    try:
        tokens = Lexer(text, variables, depth + 1).run()
    except ShellSyntaxInvalid:
        return None
    words = [t for t in tokens if isinstance(t, Word)]
    if any(isinstance(t, Op) for t in tokens) or any(w.dynamic for w in words):
        return None
    return " ".join(w.text for w in words)


def _static_echo(inner: str, variables: dict[str, str], depth: int) -> str | None:
    """The fixed output of ``echo ...``/``printf ...`` (without a format), else None."""
    try:
        tokens = Lexer(inner, variables, depth).run()
    except ShellSyntaxInvalid:
        return None
    while tokens and isinstance(tokens[-1], Op) and tokens[-1].op in ("\n", ";"):
        tokens.pop()
    if not tokens or any(isinstance(t, Op) for t in tokens):
        return None
    words = [t for t in tokens if isinstance(t, Word)]
    if any(w.dynamic for w in words):
        return None
    program = words[0].text.rsplit("/", 1)[-1]
    args = [w.text for w in words[1:]]
    if program == "echo":
        while args and args[0] in ("-n", "-e", "-E", "-ne", "-en"):
            args.pop(0)
        return " ".join(args)
    if program == "printf" and len(args) == 1 and "%" not in args[0] and "\\" not in args[0]:
        return args[0]
    return None


def tokenize(command: str, variables: dict[str, str] | None = None, depth: int = 0) -> list[Token]:
    """The words and operators of ``command``; raises ShellSyntaxInvalid."""
    return Lexer(command, {} if variables is None else variables, depth).run()
