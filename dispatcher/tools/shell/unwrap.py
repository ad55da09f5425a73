"""Finding the program a simple command runs: reserved words, ``VAR=value``
assignments and wrappers (``env``, ``command``, ``exec``, ``nohup``,
``timeout``, ``xargs`` ...) peeled off its words, with a note of what was
peeled. The rules rate what is left as the program, and lift the rating for
what was in front of it (programs obey their environment; most wrappers add
behaviour of their own).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from dispatcher.tools.shell.families import WRAPPERS
from dispatcher.tools.shell.lexer import tokenize
from dispatcher.tools.shell.tokens import Word

RESERVED = frozenset(
    {"{", "}", "!", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "time"}
)
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
_ENV_VALUED = ("-u", "--unset", "-C", "--chdir")
_ENV_SPLIT = ("-S", "--split-string")


@dataclass(slots=True)
class Unwrapped:
    """A simple command's words with what stands in front of the program peeled off."""

    argv: list[Word]
    wrappers: list[str] = field(default_factory=list)
    # A VAR=value in front of the program (or given to env, or env -i/-u).
    assigns: bool = False
    # What runs when argv is empty: env printing, `command -v`, nothing.
    label: str = "(no program)"


def program_name(word: Word) -> str:
    """The program a command word names, without its directory (``/bin/rm`` -> ``rm``)."""
    return posixpath.basename(word.text)


def unwrap(words: list[Word], depth: int = 0) -> list[Word]:
    """The words of the program that actually runs: reserved words,
    assignments and wrappers (env, command, exec, nohup, timeout ...) removed."""
    return unwrap_command(words, depth).argv


def unwrap_command(words: list[Word], depth: int) -> Unwrapped:
    """``words`` read as bash finds the program: what is peeled off, and the rest."""
    info = Unwrapped([])
    i = 0
    while i < len(words):
        w = words[i]
        if w.text == "function" and not w.quoted:
            i += 2  # `function name { body }`: the body follows
            continue
        if w.text in RESERVED and not w.quoted:
            i += 1
            continue
        if ASSIGNMENT.match(w.text):
            info.assigns = True
            i += 1
            continue
        name = posixpath.basename(w.text)
        if name == "env":
            info.wrappers.append("env")
            info.label = "env"
            i, split = _read_env_options(words, i + 1, info)
            if split is not None:
                # env -S 'rm -rf /' splits its argument into a command line.
                extra = [t for t in tokenize(split, depth=depth + 1) if isinstance(t, Word)]
                inner = unwrap_command(extra + words[i:], depth + 1)
                inner.wrappers[:0] = info.wrappers
                inner.assigns = True
                return inner
            continue
        if name == "command" and i + 1 < len(words) and words[i + 1].text in ("-v", "-V"):
            info.label = "command -v"
            return info  # only looks a name up
        wrapper = WRAPPERS.get(name)
        if wrapper is None or w.dynamic:
            info.argv = words[i:]
            return info
        info.wrappers.append(name)
        i = _skip_wrapper_options(words, i + 1, wrapper)
    return info


def _read_env_options(words: list[Word], i: int, info: Unwrapped) -> tuple[int, str | None]:
    """env's options from ``words[i]``: where its command starts, and the
    string of an ``-S``/``--split-string`` if there is one (the command then
    continues with that string's words)."""
    while i < len(words):
        opt = words[i].text
        if opt in _ENV_VALUED:
            info.assigns = True
            i += 2
        elif opt in _ENV_SPLIT:
            return i + 2, (words[i + 1].text if i + 1 < len(words) else "")
        elif opt.startswith(("-S", "--split-string=")):
            return i + 1, (opt.split("=", 1)[1] if opt.startswith("--") else opt[2:])
        elif opt == "--":
            return i + 1, None
        elif opt.startswith("-") or ASSIGNMENT.match(opt):
            info.assigns = True
            i += 1
        else:
            break
    return i, None


def _skip_wrapper_options(words: list[Word], i: int, wrapper: tuple[frozenset[str], int]) -> int:
    """Where the command behind a wrapper starts: past its options (and their
    values) and the positional arguments it takes first (``timeout 5``)."""
    takes_value, positionals = wrapper
    while i < len(words):
        opt = words[i].text
        if opt == "--":
            i += 1
            break
        if not opt.startswith("-") or opt == "-":
            break
        i += 2 if opt in takes_value else 1
    return i + positionals
