"""The option table's partial entries: programs the shell rates ``dev``
(builders, formatters, test runners, pagers and process listings), listing
only the options with effects (and the value-taking ones that may precede
them) to name what they write; and pip's and git's options after their
subcommand.
"""

from __future__ import annotations

from dispatcher.tools.shell.options import Spec
from dispatcher.tools.shell.table_shorthand import CI, KO, PARTIAL, RUN, SYS, WO, C, R, W, fx, spec

# Rated dev or more whatever their options: only the options with effects
# (and the value-taking ones that may come before them) are listed.
DEV_SPECS: dict[str, Spec] = {
    # read, but never safe (READ_BUT_DEV)
    "less": spec(
        "b:h:j:k:o:O:p:P:t:T:x:y:z:#:",
        "log-file= LOG-FILE= lesskey-file= tag=",
        effects={**fx(W, "o", "O", "log-file", "LOG-FILE"), **fx(R, "k", "lesskey-file")},
        **PARTIAL,
    ),
    "man": spec(
        "C:M:P:H::L:m:S:s:e:p:r:R:",
        "config-file= manpath= pager= html:: "
        "locale= systems= sections= extension= preprocessor= prompt= recode=",
        effects={
            **fx(RUN, "P", "pager", "H", "html", "p", "preprocessor"),
            **fx(R, "C", "config-file"),
        },
        **PARTIAL,
    ),
    "info": spec(
        "d:f:n:o:",
        "directory= file= node= output= dribble= restore=",
        effects={**fx(W, "o", "output", "dribble"), **fx(R, "restore")},
        **PARTIAL,
    ),
    "cloc": spec(
        "",
        "report-file= out= sql= write-lang-def= write-lang-def-incl-dup= "
        "extract-with= list-file= exclude-list-file= read-lang-def= "
        "force-lang-def= read-binary-files",
        effects={
            **fx(W, "report-file", "out", "sql", "write-lang-def", "write-lang-def-incl-dup"),
            **fx(RUN, "extract-with"),
            **fx(R, "list-file", "exclude-list-file", "read-lang-def", "force-lang-def"),
        },
        **PARTIAL,
    ),
    "atop": spec("w:r:", "", effects=fx(W, "w"), **PARTIAL),
    "fuser": spec("k", "kill", effects=fx(SYS, "k", "kill"), **PARTIAL),
    "top": spec("b:d:n:o:p:u:U:w::", "", **PARTIAL),
    # writers and builders (DEV_COMMANDS)
    "tee": spec("aip", "append ignore-interrupts output-error::", operands_written=0),
    "mkdir": spec("m:pvZ", "mode= parents verbose context::", operands_written=0),
    "touch": spec(
        "acd:fhmr:t:",
        "time= date= reference= no-create no-dereference",
        effects=fx(R, "r", "reference"),
        operands_written=0,
    ),
    "pytest": spec(
        "c:k:m:n:o:p:r:",
        "junitxml= junit-xml= resultlog= basetemp= log-file= "
        "rootdir= confcutdir= override-ini= text",
        effects={
            **fx(W, "junitxml", "junit-xml", "resultlog", "log-file"),
            **fx(CI, "basetemp"),
            **fx(R, "c"),
        },
        **PARTIAL,
    ),
    "mypy": spec(
        "c:m:p:",
        "junit-xml= cache-dir= config-file= python-executable= "
        "html-report= txt-report= xml-report= linecount-report= "
        "linecoverage-report= lineprecision-report= any-exprs-report= "
        "cobertura-xml-report= xslt-html-report= xslt-txt-report=",
        effects={
            **fx(W, "junit-xml"),
            **fx(RUN, "python-executable"),
            **fx(R, "config-file"),
            **fx(
                CI,
                "cache-dir",
                "html-report",
                "txt-report",
                "xml-report",
                "linecount-report",
                "linecoverage-report",
                "lineprecision-report",
                "any-exprs-report",
                "cobertura-xml-report",
                "xslt-html-report",
                "xslt-txt-report",
            ),
        },
        **PARTIAL,
    ),
    "ruff": spec(
        "o:",
        "output-file= cache-dir= config= fix diff check",
        effects={
            **fx(W, "o", "output-file"),
            **fx(CI, "cache-dir"),
            **fx(R, "config"),
            **fx(WO, "fix"),
            **fx(KO, "diff", "check"),
        },
        operands_written=1,
        **PARTIAL,
    ),
    "black": spec(
        "c:l:t:W:",
        "check diff code= config= line-length= target-version=",
        effects={**fx(KO, "check", "diff", "c", "code"), **fx(R, "config")},
        operands_written=0,
        **PARTIAL,
    ),
    "isort": spec(
        "cd",
        "check-only check diff stdout settings-path= settings-file=",
        effects={
            **fx(KO, "c", "d", "check-only", "check", "diff", "stdout"),
            **fx(R, "settings-path", "settings-file"),
        },
        operands_written=0,
        **PARTIAL,
    ),
    "rustfmt": spec(
        "",
        "check emit= config-path=",
        effects={**fx(KO, "check", "emit"), **fx(R, "config-path")},
        operands_written=0,
        **PARTIAL,
    ),
    "gofmt": spec("lwdes", "", effects=fx(WO, "w"), operands_written=0, **PARTIAL),
    "prettier": spec(
        "cw",
        "write check list-different cache-location= config= ignore-path= plugin=",
        effects={
            **fx(WO, "w", "write"),
            **fx(W, "cache-location"),
            **fx(R, "config", "ignore-path"),
        },
        operands_written=0,
        **PARTIAL,
    ),
    "eslint": spec(
        "c:f:o:",
        "fix fix-dry-run output-file= cache-location= config= "
        "format= rulesdir= resolve-plugins-relative-to=",
        effects={
            **fx(WO, "fix"),
            **fx(W, "o", "output-file"),
            **fx(CI, "cache-location"),
            **fx(R, "c", "config"),
        },
        operands_written=0,
        **PARTIAL,
    ),
    "flake8": spec(
        "",
        "output-file= config= append-config= tee",
        effects={**fx(W, "output-file"), **fx(R, "config", "append-config")},
        **PARTIAL,
    ),
    "pylint": spec(
        "", "output= rcfile=", effects={**fx(W, "output"), **fx(R, "rcfile")}, **PARTIAL
    ),
    "pyright": spec(
        "p:",
        "project= createstub= pythonpath= outputjson",
        effects={**fx(C, "createstub"), **fx(RUN, "pythonpath"), **fx(R, "p", "project")},
        **PARTIAL,
    ),
    "tsc": spec(
        "p:",
        "outDir= outFile= declarationDir= tsBuildInfoFile= project=",
        effects={
            **fx(CI, "outDir", "declarationDir"),
            **fx(W, "outFile", "tsBuildInfoFile"),
            **fx(R, "p", "project"),
        },
        abbreviations=False,
        **PARTIAL,
    ),
    "coverage": spec(
        "d:o:",
        "data-file= directory= rcfile=",
        effects={**fx(W, "o", "data-file"), **fx(CI, "d", "directory"), **fx(R, "rcfile")},
        **PARTIAL,
    ),
    "ctest": spec(
        "O:",
        "output-log= output-junit=",
        effects=fx(W, "O", "output-log", "output-junit"),
        **PARTIAL,
    ),
    "make": spec(
        "C:f:I:j::l::o:W:E:O::",
        "directory= file= makefile= include-dir= "
        "old-file= assume-old= what-if= new-file= assume-new= eval=",
        effects=fx(R, "f", "file", "makefile"),
        **PARTIAL,
    ),
    "ninja": spec("C:f:j:k:l:d:t:w:", "", effects=fx(R, "f"), **PARTIAL),
    "cmake": spec("B:S:D:P:C:G:T:A:U:", "", effects={**fx(CI, "B"), **fx(RUN, "P")}, **PARTIAL),
    "mvn": spec(
        "f:l:s:",
        "file= log-file= settings=",
        effects={**fx(W, "l", "log-file"), **fx(R, "f", "file", "s", "settings")},
        **PARTIAL,
    ),
    "jest": spec(
        "c:",
        "outputFile= coverageDirectory= config=",
        effects={**fx(W, "outputFile"), **fx(CI, "coverageDirectory"), **fx(R, "c", "config")},
        abbreviations=False,
        **PARTIAL,
    ),
    "vitest": spec(
        "c:",
        "outputFile= config=",
        effects={**fx(W, "outputFile"), **fx(R, "c", "config")},
        abbreviations=False,
        **PARTIAL,
    ),
}
# No options with effects known beyond building (their recipes run anyway):
# meson, gradle, gradlew, tox, nox, shellcheck, bazel, sbt, dotnet, mocha,
# py.test (pytest's), plus the process listings and pagers below.
for _name in ("meson", "gradle", "gradlew", "tox", "nox", "shellcheck", "bazel", "sbt",
              "dotnet", "mocha", "ps", "pgrep", "pidof", "htop", "pstree", "lsof", "w",
              "who", "more", "most", "pg"):  # fmt: skip
    DEV_SPECS[_name] = Spec(complete=False)
DEV_SPECS["py.test"] = DEV_SPECS["pytest"]

# pip's read subcommands (list, show, freeze, check) with its general options.
PIP = spec(
    "vqVlueo" + "f:i:r:",
    "verbose quiet log= log-file= no-input proxy= retries= timeout= exists-action= "
    "trusted-host= cert= client-cert= cache-dir= no-cache-dir disable-pip-version-check "
    "no-color no-python-version-warning use-feature= use-deprecated= isolated python= "
    "require-virtualenv debug root-user-action= keyring-provider= outdated uptodate "
    "editable local user path= pre format= not-required exclude-editable "
    "include-editable exclude= index-url= extra-index-url= no-index find-links= files "
    "all requirement= verbose",
    effects={
        **fx(W, "log", "log-file"),
        **fx(CI, "cache-dir"),
        **fx(RUN, "python"),
        **fx(R, "cert", "client-cert", "r", "requirement"),
    },
)

# git, after its subcommand: options that write, run or read (a partial
# table: git is dev at least from the shell). ``text`` is listed so that
# ``--text`` is not read as an abbreviation of ``--textconv``.
GIT = spec(
    "o:O:",
    "output= output-directory= ext-diff textconv upload-pack= receive-pack= exec= text "
    "open-files-in-pager::",
    effects={
        **fx(W, "output"),
        **fx(CI, "o", "output-directory"),
        **fx(
            RUN,
            "ext-diff",
            "textconv",
            "upload-pack",
            "receive-pack",
            "exec",
            "open-files-in-pager",
        ),
        **fx(R, "O"),
    },
    complete=False,
    abbreviations=False,
)
GIT_GREP = spec(
    "O::",
    "open-files-in-pager:: ext-grep text textconv",
    effects=fx(RUN, "O", "open-files-in-pager", "textconv"),
    complete=False,
    abbreviations=False,
)
