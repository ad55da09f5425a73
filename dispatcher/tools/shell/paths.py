"""The paths a shell command line names: its argument words, redirection
targets, ``VAR=value`` assignments and the values of the call's ``env``,
normalised to workspace-relative form and, through the workspace, the files
they lead to (symbolic links followed).

The shell tool declares them as its call's ``command_paths``
(``ToolEffects``), and the guardrails refuse a command naming a protected
file whether it reads or writes it. It reads the command through the
lexer's public ``parse``: the same reading the rating makes. What no static
reading can see (a program computing a name) is left to confirmation and
the sandbox, which binds protected files read-only.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import posixpath
import shlex
from collections.abc import Mapping

import bracex
from wcmatch import glob as wcglob

from dispatcher.tools.shell.script import parse
from dispatcher.tools.shell.tokens import ShellSyntaxInvalid, Word

# Shell words looked at per command: a huge generated command line must not
# make the check slow.
MAX_WORDS = 512
MAX_NESTED_SCRIPTS = 4
# Names one brace or glob word may stand for (bounded work per call).
MAX_EXPANSIONS = 256
# Braces are expanded before globbing (bracex), so the glob step sees none;
# as in bash by default, `*` skips dot files (`.e*` still names `.env`).
GLOB_FLAGS = 0


def shell_call_paths(
    command: str, cwd: str, workspace_root: str | None, env: Mapping[str, object] | None = None
) -> tuple[str, ...]:
    """The paths ``command``'s words name, then those its ``env`` values name:
    ``{"command": "cp a $F", "env": {"F": ".env"}}`` names ``.env`` as surely
    as writing it out (the lexer cannot see ``$F``). The values are read as
    the words of a separate no-op command, so nothing in the command (an open
    here-document, a trailing backslash) can swallow them."""
    found = dict.fromkeys(command_paths(command, cwd, workspace_root))
    if env:
        words = " ".join(shlex.quote(str(v)) for v in env.values())
        found.update(dict.fromkeys(command_paths(f": {words}", cwd, workspace_root)))
    return tuple(found)


def command_paths(command: str, cwd: str = ".", workspace_root: str | None = None) -> list[str]:
    """Workspace-relative paths that the argument words and redirection
    targets of ``command`` name (``./a``, ``a/../b`` normalised; absolute
    paths inside ``workspace_root`` made relative; ``--opt=path`` and
    ``VAR=path`` split). With ``workspace_root``, a name that resolves
    through a symbolic link also yields the path it leads to. Words inside
    nested scripts (``sh -c '...'``, ``$(...)``) count too. Words whose value
    cannot be known statically are skipped. An unreadable command yields
    nothing here: the shell tool refuses it anyway."""
    words: list[tuple[str, str]] = []
    root = os.path.realpath(workspace_root) if workspace_root else None
    _collect_words(command, cwd or ".", words, 0, root)
    found: dict[str, None] = {}
    for text, where in words[:MAX_WORDS]:
        for candidate in _expanded(_word_variants(text), where, root):
            rel = _relative(candidate, where, root)
            if rel is None:
                continue
            found.setdefault(rel, None)
            if root is not None:
                real = os.path.realpath(os.path.join(root, rel))
                if real == root or real.startswith(root + os.sep):
                    found.setdefault(os.path.relpath(real, root).replace(os.sep, "/"), None)
    return list(found)


def _collect_words(
    command: str, cwd: str, out: list[tuple[str, str]], depth: int, root: str | None = None
) -> None:
    """(word, the directory it is relative to) of every argument and
    redirection target; a static ``cd dir`` moves the directory for the
    commands after it (an absolute one too, when it lies in ``root``)."""
    if depth > MAX_NESTED_SCRIPTS or len(out) >= MAX_WORDS:
        return
    try:
        script = parse(command, depth)
    except ShellSyntaxInvalid:
        return
    for inner in script.substitutions:
        _collect_words(inner, cwd, out, depth + 1, root)
    for pipeline in script.pipelines:
        for cmd in pipeline.commands:
            args: list[Word] = cmd.words[1:]
            targets = [r.target for r in cmd.redirects if r.target is not None]
            # `F=.env cmd`: an assignment before the program names a path too.
            heads = cmd.words[:1] if cmd.words and "=" in cmd.words[0].text else []
            for word in [*heads, *args, *targets]:
                if word.dynamic:
                    continue
                out.append((word.text, cwd))
                # sh -c 'cat .env', bash -lc "...": read the inner script too.
                if any(c.isspace() for c in word.text):
                    _collect_words(word.text, cwd, out, depth + 1, root)
            head = cmd.words[0] if cmd.words else None
            if head is not None and head.text in ("cd", "pushd") and len(args) == 1:
                moved = _relative(args[0].text, cwd, root)
                if moved is not None and not args[0].dynamic:
                    cwd = moved


def _word_variants(text: str) -> list[str]:
    variants = [text]
    if "=" in text:
        variants.append(text.split("=", 1)[1])
    if ":" in text:
        # `git show HEAD:.env`, `scp a:b`: the part after the colon is a path.
        variants.append(text.split(":", 1)[1])
    return [v for v in variants if v and "\x00" not in v]


def _expanded(variants: list[str], cwd: str, root: str | None) -> list[str]:
    """``variants`` plus what the shell would make of them: braces expanded
    (``.{env,x}``, textual, so a file not yet there counts) and glob words
    (``.e*``, ``secret*/key.pem``) matched against the workspace as it is
    now. Bounded: a word yields at most MAX_EXPANSIONS names."""
    out: list[str] = []
    for text in variants:
        out.append(text)
        if "{" in text:
            with contextlib.suppress(ValueError, RecursionError, bracex.ExpansionLimitException):
                out.extend(bracex.expand(text, limit=MAX_EXPANSIONS))
    if root is None:
        return out
    globbed: list[str] = []
    for text in out:
        if "{" in text or not any(c in text for c in "*?["):
            continue
        rel = _relative(text, cwd, root)
        if rel is None:
            continue
        with contextlib.suppress(OSError, ValueError, RecursionError):
            names = wcglob.iglob(rel, root_dir=root, flags=GLOB_FLAGS, limit=MAX_EXPANSIONS)
            # Absolute, so the caller does not join them to ``cwd`` a second time.
            globbed.extend(root + "/" + n for n in itertools.islice(names, MAX_EXPANSIONS))
    return out + globbed


def _relative(text: str, cwd: str, root: str | None) -> str | None:
    if text.startswith("~"):
        return None
    if text.startswith("/"):
        if root is None:
            return None
        norm = posixpath.normpath(text)
        if norm == root:
            return "."
        if not norm.startswith(root + "/"):
            return None
        return norm[len(root) + 1 :]
    rel = posixpath.normpath(posixpath.join(cwd or ".", text))
    if rel == ".." or rel.startswith("../"):
        return None
    return rel
