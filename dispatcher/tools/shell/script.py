"""The parser of the shell rules: a command line as pipelines of simple
commands, each with its words and redirections, plus the functions it
defines and the inner command lines of its substitutions.

It reads the lexer's tokens (lexer.py) and builds just enough structure for
the rules to see which programs run with which arguments; it does not
evaluate control flow. A ``set -- args`` binds ``$1 ...`` and the line is
read again with them, so ``set -- rm -rf /; "$@"`` shows ``rm``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dispatcher.tools.shell.lexer import Lexer
from dispatcher.tools.shell.tokens import REDIRECT_OPS, Op, ShellSyntaxInvalid, Token, Word


@dataclass(slots=True)
class Redirect:
    """A redirection of a simple command (target word; here-doc body if any)."""

    op: str
    fd: str | None
    target: Word | None
    heredoc: str | None = None


@dataclass(slots=True)
class Command:
    """A simple command: its words (assignments included) and redirections."""

    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)


@dataclass(slots=True)
class Pipeline:
    """Simple commands joined by ``|``."""

    commands: list[Command] = field(default_factory=list)


@dataclass(slots=True)
class FunctionDef:
    """A shell function: its name and the words and operators of its body."""

    name: str
    body_words: list[str]
    body_ops: set[str]


@dataclass(slots=True)
class Script:
    """A parsed command line."""

    pipelines: list[Pipeline]
    functions: list[FunctionDef]
    # Inner command lines found anywhere ($(...), `...`, <(...)), to analyse too.
    substitutions: list[str]


def parse(command: str, depth: int = 0, positional: list[str] | None = None) -> Script:
    """Split ``command`` into pipelines of simple commands.

    ``positional``: the script's ``$0 $1 ...`` (``sh -c 'script' name a b``).
    A ``set -- a b`` inside the script sets ``$1 ...`` too: the script is read
    a second time with them bound, so ``set -- rm -rf /; "$@"`` shows ``rm``."""
    params = list(positional or [])
    zero = {"0": params[0]} if params else {}
    lexer = Lexer(command, {**zero, **_positional_vars(params[1:])}, depth)
    tokens = lexer.run()
    set_args = _set_arguments(tokens)
    if set_args:
        lexer = Lexer(command, {**zero, **_positional_vars(set_args)}, depth)
        tokens = lexer.run()
    built = _Builder()
    i = 0
    while i < len(tokens):
        i = built.take(tokens, i)
    built.finish_pipeline()
    # `function name { ... }` (bash) has no parentheses.
    for k, tok in enumerate(tokens[:-1]):
        nxt = tokens[k + 1]
        if isinstance(tok, Word) and tok.text == "function" and isinstance(nxt, Word):
            built.functions.append(_function_body(nxt.text, tokens, k + 2))
    return Script(built.pipelines, built.functions, lexer.subs)


@dataclass(slots=True)
class _Builder:
    """Pipelines and functions, built one token at a time."""

    pipelines: list[Pipeline] = field(default_factory=list)
    functions: list[FunctionDef] = field(default_factory=list)
    pipe: Pipeline = field(default_factory=Pipeline)
    cmd: Command = field(default_factory=Command)

    def take(self, tokens: list[Token], i: int) -> int:
        """Add ``tokens[i]`` (and a redirection's target, a function's
        ``()``); return the index of the next token to take."""
        tok = tokens[i]
        if isinstance(tok, Word):
            self.cmd.words.append(tok)
        elif tok.op in REDIRECT_OPS:
            target = tokens[i + 1] if i + 1 < len(tokens) else None
            if not isinstance(target, Word):
                raise ShellSyntaxInvalid(f"the redirection {tok.op!r} has no target")
            self.cmd.redirects.append(Redirect(tok.op, tok.fd, target, tok.heredoc))
            return i + 2
        elif tok.op in ("|", "|&"):
            self.finish_command()
        elif tok.op == "(" and self._opens_function(tokens, i):
            name = self.cmd.words[-1].text
            self.functions.append(_function_body(name, tokens, i + 2))
            self.cmd = Command()
            return i + 2
        else:
            self.finish_pipeline()
        return i + 1

    def _opens_function(self, tokens: list[Token], i: int) -> bool:
        """``name ()`` or ``function name ()``: a function definition, not a subshell."""
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        return (
            isinstance(nxt, Op)
            and nxt.op == ")"
            and len(self.cmd.words) in (1, 2)
            and (len(self.cmd.words) == 1 or self.cmd.words[0].text == "function")
        )

    def finish_command(self) -> None:
        if self.cmd.words or self.cmd.redirects:
            self.pipe.commands.append(self.cmd)
        self.cmd = Command()

    def finish_pipeline(self) -> None:
        self.finish_command()
        if self.pipe.commands:
            self.pipelines.append(self.pipe)
        self.pipe = Pipeline()


def _function_body(name: str, tokens: list[Token], start: int) -> FunctionDef:
    """The words and operators of a function body starting at ``start``."""
    depth = 0
    words: list[str] = []
    ops: set[str] = set()
    for tok in tokens[start:]:
        if isinstance(tok, Word):
            if tok.text == "{":
                depth += 1
                continue
            if tok.text == "}":
                depth -= 1
                if depth <= 0:
                    break
                continue
            words.append(tok.text)
        else:
            if tok.op == "(":
                depth += 1
            elif tok.op == ")":
                depth -= 1
                if depth < 0:
                    break
            ops.add(tok.op)
    return FunctionDef(name, words, ops)


def _positional_vars(params: list[str]) -> dict[str, str]:
    if not params:
        return {}
    found = {str(k): v for k, v in enumerate(params, start=1)}
    found["@"] = found["*"] = " ".join(params)
    return found


def _set_arguments(tokens: list[Token]) -> list[str]:
    """The positional parameters a ``set [options] [--] args`` in ``tokens`` assigns
    (the last such ``set`` wins; all of them seen is an over-approximation)."""
    found: list[str] = []
    for k, tok in enumerate(tokens):
        if not (isinstance(tok, Word) and tok.text == "set" and not tok.quoted):
            continue
        if k > 0 and isinstance(tokens[k - 1], Word):
            continue  # not in command position
        args: list[str] = []
        for nxt in tokens[k + 1 :]:
            if not isinstance(nxt, Word):
                break
            args.append(nxt.text)
        if "--" in args:
            found = args[args.index("--") + 1 :]
            continue
        i = 0
        while i < len(args) and args[i][:1] in ("-", "+"):
            i += 2 if args[i] in ("-o", "+o") else 1
        if args[i:]:
            found = args[i:]
    return found
