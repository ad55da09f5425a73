"""The option table: for every program the shell rates ``safe`` or ``dev``,
its options as getopt reads them and the ones that write a file, read one
its value names, follow links, run another program or change the machine.

This table is the source of truth for the rating of options (see
dispatcher/tools/shell/options.py for how arguments are read against it,
dispatcher/tools/shell/rules.py for what each effect does to the rating).
Entries of programs rated ``safe`` are *complete*: every option of the
program, from its manual (``man sort``, ``sort --help``; GNU coreutils 9,
grep 3, diffutils 3, util-linux 2.38, procps 4, file 5, ripgrep 13/14,
jq 1.6/1.7), so an option the table does not know makes the command not
safe rather than guessed at. Entries of dev programs list only the options
with effects (and the ones taking values that precede them), to name what
they write (``Analysis.writes``).

To add a program: write its Spec in safe_programs.py or dev_programs.py
from its manual (the short optstring exactly as its source passes it to
getopt, every long name with ``=``/``::`` for values), mark its effects,
add it to SAFE_COMMANDS or DEV_COMMANDS in families.py, and add its
write/run/read options to the corpus of
tests/dispatcher/tools/test_shell_rating_traced.py, which runs every
command rated safe under strace.

The table is split by what an entry promises: safe_programs.py holds the
complete entries (and find's expression), dev_programs.py the partial ones
(and pip's and git's subcommand options); table_shorthand.py the notation
both are written in.
"""

from __future__ import annotations

from dispatcher.tools.shell.dev_programs import DEV_SPECS, GIT, GIT_GREP, PIP
from dispatcher.tools.shell.safe_programs import FIND, SAFE_SPECS

__all__ = ["DEV_SPECS", "FIND", "GIT", "GIT_GREP", "PIP", "SAFE_SPECS"]
