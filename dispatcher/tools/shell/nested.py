"""Where a command line holds another one, read statically: the script a
shell runs (``sh -c 'script' name a b`` and its ``$0 $1 ...``), ``eval``'s
and ``watch``'s command, whether an interpreter runs what comes on its
stdin, and find's starting points (what ``{}`` stands for in ``-exec``).
The rules (rules.py) analyse what these name as command lines of their own.
"""

from __future__ import annotations

from dispatcher.tools.shell.families import SCRIPT_RUNNERS, SHELLS, is_python
from dispatcher.tools.shell.tokens import Word


def find_starts(texts: list[str]) -> list[str]:
    """find's starting points (the words before the first expression)."""
    starts: list[str] = []
    for t in texts:
        if t in ("-H", "-L", "-P") or t.startswith(("-D", "-O")):
            continue
        if t.startswith("-") or t in ("(", "!", ","):
            break
        starts.append(t)
    return starts or ["."]


def shell_positional(prog: str, args: list[Word]) -> list[str] | None:
    """``sh -c 'script' name a b``: the script's ``$0 $1 ...`` are ``name a b``."""
    if prog not in SHELLS:
        return None
    texts = [a.text for a in args]
    for k, t in enumerate(texts):
        if t.startswith("-") and not t.startswith("--") and "c" in t[1:]:
            rest = [x for x in texts[k + 1 :] if not x.startswith(("-", "+"))]
            return rest[1:] if len(rest) > 1 else None
    return None


def nested_script(prog: str, args: list[Word]) -> str | None:
    """The command string a shell, eval or watch will run, if there is one."""
    if prog == "eval":
        return " ".join(a.text for a in args)
    if prog == "watch":
        rest = _skip_options(args, frozenset({"-n", "--interval", "-d", "-q"}))
        return " ".join(a.text for a in rest) if rest else None
    if prog in SHELLS:
        has_c = False
        for a in args:
            t = a.text
            if t.startswith("-") and not t.startswith("--") and "c" in t[1:]:
                has_c = True
            elif has_c and not t.startswith(("-", "+")):
                return t
        return "" if has_c else None
    return None


def reads_script_from_stdin(prog: str, args: list[Word]) -> bool:
    """An interpreter with no script argument (or ``-s``/``-``) runs its stdin."""
    if prog not in SHELLS and prog not in SCRIPT_RUNNERS and not is_python(prog):
        return False
    positional = [a.text for a in args if not a.text.startswith("-") or a.text == "-"]
    flags = [a.text for a in args if a.text.startswith("-")]
    if "-s" in flags or "-" in positional:
        return True
    if any(f in ("--version", "-V", "--help", "-h") for f in flags):
        return False
    if prog not in SHELLS and any(f in ("-c", "-e", "-m", "-r", "-E") for f in flags):
        return False
    return not positional


def _skip_options(args: list[Word], takes_value: frozenset[str]) -> list[Word]:
    """``args`` past their leading options (and the values of ``takes_value``)."""
    i = 0
    while i < len(args) and args[i].text.startswith("-"):
        i += 2 if args[i].text in takes_value else 1
    return args[i:]
