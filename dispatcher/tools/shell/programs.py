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

To add a program: write its Spec here from its manual (the short optstring
exactly as its source passes it to getopt, every long name with ``=``/``::``
for values), mark its effects, add it to SAFE_COMMANDS or DEV_COMMANDS in
rules.py, and add its write/run/read options to the corpus of
tests/dispatcher/tools/test_shell_rating_traced.py, which runs every
command rated safe under strace.
"""

from __future__ import annotations

from typing import Any

from dispatcher.tools.shell.options import Effect, FindSpec, Spec

W, C, CI, R = Effect.WRITES, Effect.CREATES, Effect.CREATES_IN, Effect.READS
RUN, HELP, F, SYS = Effect.RUNS, Effect.HELPERS, Effect.FOLLOWS, Effect.SYSTEM
WO, KO = Effect.WRITES_OPERANDS, Effect.KEEPS_OPERANDS
HV = ("help", "version")


def _fx(effect: Effect, *names: str) -> dict[str, Effect]:
    return dict.fromkeys(names, effect)


def _spec(short: str, long: str, **kw: Any) -> Spec:
    """A Spec from an optstring and a space-separated list of long names."""
    return Spec(short, tuple(long.split()) + HV, **kw)


_LITERAL = Spec(literal=True)
_DIGESTS = _spec("bctwz", "binary check tag text zero ignore-missing quiet status strict warn")
_GREP = _spec(
    "0123456789A:B:C:D:EFGHIJLPRTUVX:abcd:e:f:hiLlm:noqRrsuvwxyZz",
    "extended-regexp fixed-strings fixed-regexp basic-regexp perl-regexp regexp= file= "
    "ignore-case no-ignore-case word-regexp line-regexp null-data no-messages invert-match "
    "max-count= byte-offset line-number line-buffered with-filename no-filename label= "
    "only-matching quiet silent binary-files= text directories= devices= recursive "
    "dereference-recursive include= exclude= exclude-from= exclude-dir= files-without-match "
    "files-with-matches count initial-tab null before-context= after-context= context= "
    "group-separator= no-group-separator color:: colour:: binary unix-byte-offsets",
    effects={**_fx(R, "f", "file", "exclude-from"), **_fx(F, "R", "dereference-recursive")},
    numbers=True,
)

SAFE_SPECS: dict[str, Spec] = {
    # -- coreutils ----------------------------------------------------------
    "ls": _spec(
        "abcdfghiklmnopqrstuvw:xABCDFGHI:LNQRST:UXZ1",
        "all almost-all author escape block-size= ignore-backups color:: directory dired "
        "classify:: file-type format= full-time group-directories-first no-group "
        "human-readable si dereference-command-line dereference-command-line-symlink-to-dir "
        "hide= hyperlink:: indicator-style= inode ignore= kibibytes dereference "
        "numeric-uid-gid literal hide-control-chars show-control-chars quote-name "
        "quoting-style= reverse recursive size sort= time= time-style= tabsize= width= "
        "context zero",
        effects=_fx(F, "L", "dereference"),
    ),
    "cat": _spec(
        "benstuvAET",
        "show-all number-nonblank show-ends number squeeze-blank show-tabs show-nonprinting",
    ),
    "head": _spec("c:n:qvz", "bytes= lines= quiet silent verbose zero-terminated", numbers=True),
    "tail": _spec(
        "c:n:fFqs:vz",
        "bytes= follow:: lines= max-unchanged-stats= pid= quiet silent retry sleep-interval= "
        "verbose zero-terminated presume-input-pipe",
        numbers=True,
    ),
    "wc": _spec(
        "clLmw",
        "bytes chars lines files0-from= max-line-length words total=",
        effects=_fx(R, "files0-from"),
    ),
    "grep": _GREP,
    "egrep": _GREP,
    "fgrep": _GREP,
    "stat": _spec(
        "c:fLt",
        "dereference file-system cached= format= printf= terse",
        effects=_fx(F, "L", "dereference"),
    ),
    "du": _spec(
        "0abd:chHklmst:xB:DLPSX:",
        "null all apparent-size block-size= bytes total dereference-args max-depth= "
        "summarize files0-from= human-readable inodes dereference count-links "
        "no-dereference separate-dirs si threshold= time:: time-style= exclude-from= "
        "exclude= one-file-system",
        effects={**_fx(F, "L", "dereference"), **_fx(R, "files0-from", "X", "exclude-from")},
    ),
    "df": _spec(
        "aB:iF:hHklmPTt:vx:",
        "all block-size= inodes human-readable si local no-sync sync output:: portability "
        "print-type total type= exclude-type=",
    ),
    "sort": _spec(
        "bcCdfghik:mMno:rRsS:t:T:uVy:z",
        "ignore-leading-blanks check:: compress-program= debug dictionary-order files0-from= "
        "general-numeric-sort human-numeric-sort ignore-case ignore-nonprinting key= merge "
        "month-sort numeric-sort output= parallel= random-sort random-source= reverse sort= "
        "stable buffer-size= field-separator= temporary-directory= unique version-sort "
        "zero-terminated batch-size=",
        effects={
            **_fx(W, "o", "output"),
            **_fx(CI, "T", "temporary-directory"),
            **_fx(RUN, "compress-program"),
            **_fx(R, "files0-from", "random-source"),
        },
    ),
    "uniq": _spec(
        "cdDf:is:uw:z",
        "count repeated all-repeated:: skip-fields= skip-chars= unique group:: ignore-case "
        "check-chars= zero-terminated",
        numbers=True,
        operands_written=1,
    ),
    "cut": _spec(
        "b:c:d:f:nsz",
        "bytes= characters= delimiter= fields= complement only-delimited output-delimiter= "
        "zero-terminated",
    ),
    "tr": _spec("AcCdst", "complement delete squeeze-repeats truncate-set1", permute=False),
    "cmp": _spec(
        "bci:ln:sv", "print-bytes print-chars ignore-initial= verbose bytes= quiet silent"
    ),
    "basename": _spec("as:z", "multiple suffix= zero"),
    "dirname": _spec("z", "zero"),
    "realpath": _spec(
        "eLmPqsz",
        "canonicalize-existing canonicalize-missing logical physical quiet relative-to= "
        "relative-base= strip no-symlinks zero",
    ),
    "readlink": _spec(
        "efmnqsvz",
        "canonicalize canonicalize-existing canonicalize-missing no-newline quiet silent "
        "verbose zero",
    ),
    "seq": _spec("f:s:w", "format= separator= equal-width", permute=False, numbers=True),
    "nl": _spec(
        "h:b:f:v:i:pl:s:w:n:d:",
        "body-numbering= section-delimiter= footer-numbering= header-numbering= "
        "line-increment= join-blank-lines= number-format= no-renumber number-separator= "
        "starting-line-number= number-width=",
    ),
    "od": _spec(
        "A:aBbcDdeFfHhIij:LlN:OoS:st:vw::Xx",
        "address-radix= endian= skip-bytes= read-bytes= format= output-duplicates strings:: "
        "traditional width::",
    ),
    "md5sum": _DIGESTS,
    "sha1sum": _DIGESTS,
    "sha256sum": _DIGESTS,
    "sha512sum": _DIGESTS,
    "cksum": _spec(
        "a:bcl:tzw",
        "algorithm= base64 check length= raw tag untagged zero ignore-missing quiet status "
        "strict warn debug binary text",
    ),
    "printenv": _spec("0", "null"),
    "whoami": _spec("", ""),
    "id": _spec("agnruzGZ", "context group groups name real user zero"),
    "uname": _spec(
        "asnrvmpio",
        "all kernel-name sysname nodename kernel-release release kernel-version machine "
        "processor hardware-platform operating-system",
    ),
    "nproc": _spec("", "all ignore="),
    "tac": _spec("brs:", "before regex separator="),
    "fold": _spec("bsw:", "bytes spaces width=", numbers=True),
    "expand": _spec("it:", "initial tabs=", numbers=True),
    "comm": _spec("123z", "check-order nocheck-order output-delimiter= total zero-terminated"),
    "join": _spec(
        "a:e:i1:2:j:o:t:v:z", "ignore-case check-order nocheck-order header zero-terminated"
    ),
    "paste": _spec("d:sz", "delimiters= serial zero-terminated"),
    "sleep": _spec("", ""),
    "date": _spec(
        "d:f:I::r:Rs:u",
        "date= debug file= iso-8601:: resolution rfc-email rfc-822 rfc-2822 rfc-3339= "
        "reference= set= utc universal",
        effects={**_fx(SYS, "s", "set"), **_fx(R, "f", "file", "r", "reference")},
        note="an operand that is not a +FORMAT sets the clock (see rules.py)",
    ),
    "diff": _spec(
        "0123456789abBcC:dD:eEfF:hHiI:lL:nNpPqrsS:tTuU:vwW:x:X:yZ",
        "normal brief report-identical-files context:: unified:: ed rcs side-by-side "
        "width= left-column suppress-common-lines show-c-function show-function-line= "
        "label= expand-tabs initial-tab tabsize= suppress-blank-empty paginate recursive "
        "no-dereference new-file unidirectional-new-file ignore-file-name-case "
        "no-ignore-file-name-case exclude= exclude-from= starting-file= from-file= to-file= "
        "ignore-case ignore-tab-expansion ignore-trailing-space ignore-space-change "
        "ignore-all-space ignore-blank-lines ignore-matching-lines= text strip-trailing-cr "
        "ifdef= old-group-format= new-group-format= unchanged-group-format= "
        "changed-group-format= line-format= old-line-format= new-line-format= "
        "unchanged-line-format= minimal horizon-lines= speed-large-files color:: palette= "
        "binary",
        effects={
            **_fx(F, "r", "recursive"),
            **_fx(HELP, "l", "paginate"),  # pipes its output through pr
            **_fx(R, "from-file", "to-file", "X", "exclude-from"),
        },
        numbers=True,
    ),
    # -- util-linux, procps, binutils, file, hostname, debianutils ---------
    "hexdump": _spec(
        "bcCde:f:L::n:os:vxXhV",
        "one-byte-octal one-byte-hex one-byte-char canonical two-bytes-decimal "
        "two-bytes-octal two-bytes-hex color:: format= format-file= length= skip= "
        "no-squeezing",
        effects=_fx(R, "f", "format-file"),
    ),
    "column": _spec(
        "c:dE:eH:hi:Jl:LN:n:O:o:p:R:r:s:T:tVW:x",
        "columns= table table-name= table-order= table-columns= table-column= "
        "table-columns-limit= table-noextreme= table-noheadings table-header-as-columns "
        "table-header-repeat table-hide= table-right= table-truncate= table-wrap= "
        "keep-empty-lines json tree= tree-id= tree-parent= output-width= "
        "output-separator= separator= fillrows",
    ),
    "rev": _spec("0hV", "zero"),
    "locale": _spec("acmkvV", "all-locales charmaps category-name keyword-name verbose usage"),
    "uptime": _spec("chpsrV", "container pretty since raw"),
    "free": _spec(
        "bkmghltvwc:s:V",
        "bytes kilo mega giga tera peta kibi mebi gibi tebi pebi human si lohi line total "
        "committed seconds= count= wide",
    ),
    "strings": _spec(
        "adfhHn:wot:e:T:Vvs:U:",
        "all data print-file-name bytes= radix= target= encoding= include-all-whitespace "
        "output-separator= unicode=",
        numbers=True,
    ),
    "file": _spec(
        "bcCde:Ef:F:hiklLm:nNpP:rsSvzZ0",
        "magic-file= uncompress uncompress-noreport brief checking-printout exclude= "
        "exclude-quiet= files-from= separator= mime mime-type mime-encoding apple extension "
        "keep-going list dereference no-dereference no-buffer no-pad print0 preserve-date "
        "parameter= raw special-files no-sandbox compile debug",
        effects={
            **_fx(C, "C", "compile"),  # writes <magic>.mgc into the working folder
            **_fx(HELP, "z", "Z", "uncompress", "uncompress-noreport"),
            **_fx(R, "m", "magic-file", "f", "files-from"),
            # restores each operand's access time: a write of its metadata
            **_fx(WO, "p", "preserve-date"),
        },
    ),
    "hostname": _spec(
        "aAbdfF:hiIsvVy",
        "alias all-fqdns boot domain file= fqdn long ip-address all-ip-addresses short yp "
        "nis verbose",
        effects=_fx(SYS, "b", "boot", "F", "file"),
        operands=SYS,
    ),
    "which": Spec("as", (), permute=False, abbreviations=False, note="debianutils: getopts"),
    # -- searchers ------------------------------------------------------------
    "rg": _spec(
        "A:B:bC:cd:E:e:f:Fg:hHiIj:lLm:M:nNop:PqQr:sSt:T:uUvVwxz0a.",
        "after-context= auto-hybrid-regex before-context= binary block-buffered byte-offset "
        "case-sensitive color= colors= column context= context-separator= "
        "no-context-separator count count-matches crlf debug dfa-size-limit= encoding= "
        "engine= field-context-separator= field-match-separator= file= files "
        "files-with-matches files-without-match fixed-strings follow generate= glob= "
        "glob-case-insensitive heading hidden hostname-bin= hyperlink-format= iglob= "
        "ignore-case ignore-file= ignore-file-case-insensitive include-zero invert-match "
        "json line-buffered line-number line-regexp max-columns= max-columns-preview "
        "max-count= max-depth= max-filesize= mmap multiline multiline-dotall no-config "
        "no-filename no-heading no-ignore no-ignore-dot no-ignore-exclude no-ignore-files "
        "no-ignore-global no-ignore-messages no-ignore-parent no-ignore-vcs "
        "no-line-number no-messages no-mmap no-pcre2-unicode pcre2-unicode no-require-git "
        "no-unicode "
        "null null-data one-file-system only-matching passthru passthrough "
        "path-separator= pcre2 pcre2-version pre= pre-glob= pretty quiet "
        "regex-size-limit= regexp= replace= search-zip smart-case sort= sortr= "
        "sort-files stats text threads= trim type= type-add= type-clear= type-list "
        "type-not= unicode unrestricted vimgrep with-filename word-regexp no-binary "
        "no-block-buffered no-byte-offset no-column no-context-separator "
        "no-crlf no-encoding no-fixed-strings no-follow no-glob-case-insensitive "
        "no-hidden no-ignore-file-case-insensitive no-include-zero no-invert-match "
        "no-line-buffered no-max-columns-preview no-multiline no-multiline-dotall "
        "no-one-file-system no-pcre2 no-pre no-search-zip no-sort-files no-stats no-text "
        "no-trim auto-hybrid-regex no-auto-hybrid-regex",
        effects={
            **_fx(RUN, "pre", "hostname-bin"),
            **_fx(HELP, "z", "search-zip"),
            **_fx(F, "L", "follow"),
            **_fx(R, "f", "file", "ignore-file"),
        },
        note="ripgrep takes no abbreviations; reading them anyway only sees more",
    ),
    "ag": _spec(
        "A:aB:C:cDfG:g:hHiLlm:noQp:rsStuUvVwWz0",
        "after= all-types all-text before= context= count color color-line-number= "
        "color-match= color-path= column debug depth= file-search-regex= files-with-matches "
        "files-without-matches filename fixed-strings follow group heading hidden ignore= "
        "ignore-dir= ignore-case invert-match line-numbers list-file-types literal "
        "max-count= mmap no-mmap multiline no-multiline nobreak no-color no-filename "
        "no-follow nogroup noheading no-numbers numbers null only-matching pager= "
        "parallel passthrough path-to-ignore= print-long-lines print0 recurse "
        "no-recurse search-binary search-files search-zip silent skip-vcs-ignores "
        "smart-case stats stats-only unrestricted vimgrep word-regexp workers= "
        "case-sensitive ackmate ackmate-dir-filter= width=",
        effects={
            **_fx(RUN, "pager"),
            **_fx(HELP, "z", "search-zip"),
            **_fx(F, "f", "follow"),
            **_fx(R, "p", "path-to-ignore"),
        },
    ),
    "fd": _spec(
        "HIuspFagLc:d:t:e:E:S:o:x:X:j:l0q1h",
        "hidden no-ignore no-ignore-vcs no-ignore-parent no-global-ignore-file "
        "unrestricted case-sensitive ignore-case glob regex fixed-strings and= "
        "absolute-path relative-path list-details follow full-path print0 max-results= "
        "quiet show-errors base-directory= path-separator= search-path= color= "
        "max-depth= min-depth= exact-depth= type= extension= exclude= size= "
        "changed-within= changed-before= newer= older= owner= format= exec= exec-batch= "
        "batch-size= ignore-file= threads= strip-cwd-prefix:: one-file-system prune "
        "hyperlink:: no-require-git",
        effects={
            **_fx(RUN, "x", "X", "exec", "exec-batch"),
            **_fx(HELP, "l", "list-details"),  # runs ls -l on each result
            **_fx(F, "L", "follow"),
            **_fx(R, "ignore-file"),
        },
    ),
    "tokei": _spec(
        "c:e:fi:lo:s:t:vCn:V",
        "columns= exclude= files input= languages output= sort= types= verbose hidden "
        "no-ignore no-ignore-parent no-ignore-dot no-ignore-vcs compact num-format= rsort=",
        effects=_fx(R, "i", "input"),
    ),
    "tree": _spec(
        "adfghiklnpqrstuvxACDFJNQRSUXH:I:L:o:P:T:",
        "help version inodes device noreport nolinks dirsfirst filesfirst filelimit= "
        "charset= fromfile fromtabfile prune matchdirs ignore-case info infofile= "
        "gitignore gitfile= du si timefmt= sort= hyperlink scheme= authority= metafirst "
        "opt-toggle icons",
        effects={
            **_fx(W, "o"),
            **_fx(F, "l"),
            **_fx(C, "R"),  # writes 00Tree.html in every folder (with -H)
            **_fx(R, "fromfile", "fromtabfile", "infofile", "gitfile"),
        },
        note="tree's own parser: values are the next word; read as getopt, it sees more",
    ),
    "jq": Spec(
        "srjacnCMRSheVf" + "L:",
        (
            "slurp",
            "raw-input",
            "null-input",
            "compact-output",
            "tab",
            "indent=",
            "color-output",
            "monochrome-output",
            "ascii-output",
            "unbuffered",
            "sort-keys",
            "raw-output",
            "raw-output0",
            "join-output",
            "from-file",
            "exit-status",
            "seq",
            "stream",
            "stream-errors",
            "arg=",
            "argjson=",
            "slurpfile=",
            "rawfile=",
            "args",
            "jsonargs",
            "help",
            "version",
            "build-configuration",
            "debug-dump-disasm",
            "debug-trace",
            "run-tests",
        ),
        effects=_fx(R, "L", "slurpfile", "rawfile"),
        abbreviations=False,
        two_values=frozenset({"arg", "argjson", "slurpfile", "rawfile"}),
        note="jq's own parser: no abbreviations, --arg NAME VALUE",
    ),
    # -- shell builtins and programs without options ---------------------------
    "echo": _LITERAL,
    "printf": _LITERAL,
    "true": _LITERAL,
    "false": _LITERAL,
    ":": _LITERAL,
    "test": _LITERAL,
    "[": _LITERAL,
    "pwd": _spec("LP", "logical physical", permute=False),
    "type": Spec("afptP", (), permute=False, abbreviations=False),
}

# find: primaries and how many values each takes (-1: up to ``;`` or ``+``).
FIND = FindSpec(
    primaries={
        **dict.fromkeys(
            (
                "-daystart",
                "-depth",
                "-follow",
                "-ignore_readdir_race",
                "-mount",
                "-noignore_readdir_race",
                "-noleaf",
                "-xdev",
                "-empty",
                "-executable",
                "-false",
                "-nogroup",
                "-nouser",
                "-readable",
                "-true",
                "-writable",
                "-delete",
                "-ls",
                "-print",
                "-print0",
                "-prune",
                "-quit",
                "-not",
                "-and",
                "-or",
                "-a",
                "-o",
                "-help",
                "--help",
                "-version",
                "--version",
            ),
            0,
        ),
        **dict.fromkeys(
            (
                "-maxdepth",
                "-mindepth",
                "-amin",
                "-anewer",
                "-atime",
                "-cmin",
                "-cnewer",
                "-ctime",
                "-fstype",
                "-gid",
                "-group",
                "-ilname",
                "-iname",
                "-inum",
                "-ipath",
                "-iregex",
                "-iwholename",
                "-links",
                "-lname",
                "-mmin",
                "-mtime",
                "-name",
                "-newer",
                "-path",
                "-perm",
                "-regex",
                "-regextype",
                "-samefile",
                "-size",
                "-type",
                "-uid",
                "-used",
                "-user",
                "-wholename",
                "-xtype",
                "-context",
                "-printf",
                "-fprint",
                "-fprint0",
                "-fls",
                "-files0-from",
                "-warn",
                "-nowarn",
            ),
            1,
        ),
        "-fprintf": 2,
        **dict.fromkeys(("-exec", "-execdir", "-ok", "-okdir"), -1),
        **{f"-newer{x}{y}": 1 for x in "aBcmt" for y in "aBcmt"},
    },
    effects={
        **_fx(W, "-fprint", "-fprint0", "-fprintf", "-fls"),
        **_fx(RUN, "-exec", "-execdir", "-ok", "-okdir"),
        **_fx(Effect.DELETES, "-delete"),
        **_fx(F, "-L", "-H", "-follow"),
        **_fx(R, "-files0-from", "-newer", "-anewer", "-cnewer", "-samefile"),
    },
    leading=frozenset({"-H", "-L", "-P", "-D"}),
)

# Rated dev or more whatever their options: only the options with effects
# (and the value-taking ones that may come before them) are listed.
_PARTIAL = {"complete": False}
DEV_SPECS: dict[str, Spec] = {
    # read, but never safe (READ_BUT_DEV)
    "less": _spec(
        "b:h:j:k:o:O:p:P:t:T:x:y:z:#:",
        "log-file= LOG-FILE= lesskey-file= tag=",
        effects={**_fx(W, "o", "O", "log-file", "LOG-FILE"), **_fx(R, "k", "lesskey-file")},
        **_PARTIAL,
    ),
    "man": _spec(
        "C:M:P:H::L:m:S:s:e:p:r:R:",
        "config-file= manpath= pager= html:: "
        "locale= systems= sections= extension= preprocessor= prompt= recode=",
        effects={
            **_fx(RUN, "P", "pager", "H", "html", "p", "preprocessor"),
            **_fx(R, "C", "config-file"),
        },
        **_PARTIAL,
    ),
    "info": _spec(
        "d:f:n:o:",
        "directory= file= node= output= dribble= restore=",
        effects={**_fx(W, "o", "output", "dribble"), **_fx(R, "restore")},
        **_PARTIAL,
    ),
    "cloc": _spec(
        "",
        "report-file= out= sql= write-lang-def= write-lang-def-incl-dup= "
        "extract-with= list-file= exclude-list-file= read-lang-def= "
        "force-lang-def= read-binary-files",
        effects={
            **_fx(W, "report-file", "out", "sql", "write-lang-def", "write-lang-def-incl-dup"),
            **_fx(RUN, "extract-with"),
            **_fx(R, "list-file", "exclude-list-file", "read-lang-def", "force-lang-def"),
        },
        **_PARTIAL,
    ),
    "atop": _spec("w:r:", "", effects=_fx(W, "w"), **_PARTIAL),
    "fuser": _spec("k", "kill", effects=_fx(SYS, "k", "kill"), **_PARTIAL),
    "top": _spec("b:d:n:o:p:u:U:w::", "", **_PARTIAL),
    # writers and builders (DEV_COMMANDS)
    "tee": _spec("aip", "append ignore-interrupts output-error::", operands_written=0),
    "mkdir": _spec("m:pvZ", "mode= parents verbose context::", operands_written=0),
    "touch": _spec(
        "acd:fhmr:t:",
        "time= date= reference= no-create no-dereference",
        effects=_fx(R, "r", "reference"),
        operands_written=0,
    ),
    "pytest": _spec(
        "c:k:m:n:o:p:r:",
        "junitxml= junit-xml= resultlog= basetemp= log-file= "
        "rootdir= confcutdir= override-ini= text",
        effects={
            **_fx(W, "junitxml", "junit-xml", "resultlog", "log-file"),
            **_fx(CI, "basetemp"),
            **_fx(R, "c"),
        },
        **_PARTIAL,
    ),
    "mypy": _spec(
        "c:m:p:",
        "junit-xml= cache-dir= config-file= python-executable= "
        "html-report= txt-report= xml-report= linecount-report= "
        "linecoverage-report= lineprecision-report= any-exprs-report= "
        "cobertura-xml-report= xslt-html-report= xslt-txt-report=",
        effects={
            **_fx(W, "junit-xml"),
            **_fx(RUN, "python-executable"),
            **_fx(R, "config-file"),
            **_fx(
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
        **_PARTIAL,
    ),
    "ruff": _spec(
        "o:",
        "output-file= cache-dir= config= fix diff check",
        effects={
            **_fx(W, "o", "output-file"),
            **_fx(CI, "cache-dir"),
            **_fx(R, "config"),
            **_fx(WO, "fix"),
            **_fx(KO, "diff", "check"),
        },
        operands_written=1,
        **_PARTIAL,
    ),
    "black": _spec(
        "c:l:t:W:",
        "check diff code= config= line-length= target-version=",
        effects={**_fx(KO, "check", "diff", "c", "code"), **_fx(R, "config")},
        operands_written=0,
        **_PARTIAL,
    ),
    "isort": _spec(
        "cd",
        "check-only check diff stdout settings-path= settings-file=",
        effects={
            **_fx(KO, "c", "d", "check-only", "check", "diff", "stdout"),
            **_fx(R, "settings-path", "settings-file"),
        },
        operands_written=0,
        **_PARTIAL,
    ),
    "rustfmt": _spec(
        "",
        "check emit= config-path=",
        effects={**_fx(KO, "check", "emit"), **_fx(R, "config-path")},
        operands_written=0,
        **_PARTIAL,
    ),
    "gofmt": _spec("lwdes", "", effects=_fx(WO, "w"), operands_written=0, **_PARTIAL),
    "prettier": _spec(
        "cw",
        "write check list-different cache-location= config= ignore-path= plugin=",
        effects={
            **_fx(WO, "w", "write"),
            **_fx(W, "cache-location"),
            **_fx(R, "config", "ignore-path"),
        },
        operands_written=0,
        **_PARTIAL,
    ),
    "eslint": _spec(
        "c:f:o:",
        "fix fix-dry-run output-file= cache-location= config= "
        "format= rulesdir= resolve-plugins-relative-to=",
        effects={
            **_fx(WO, "fix"),
            **_fx(W, "o", "output-file"),
            **_fx(CI, "cache-location"),
            **_fx(R, "c", "config"),
        },
        operands_written=0,
        **_PARTIAL,
    ),
    "flake8": _spec(
        "",
        "output-file= config= append-config= tee",
        effects={**_fx(W, "output-file"), **_fx(R, "config", "append-config")},
        **_PARTIAL,
    ),
    "pylint": _spec(
        "", "output= rcfile=", effects={**_fx(W, "output"), **_fx(R, "rcfile")}, **_PARTIAL
    ),
    "pyright": _spec(
        "p:",
        "project= createstub= pythonpath= outputjson",
        effects={**_fx(C, "createstub"), **_fx(RUN, "pythonpath"), **_fx(R, "p", "project")},
        **_PARTIAL,
    ),
    "tsc": _spec(
        "p:",
        "outDir= outFile= declarationDir= tsBuildInfoFile= project=",
        effects={
            **_fx(CI, "outDir", "declarationDir"),
            **_fx(W, "outFile", "tsBuildInfoFile"),
            **_fx(R, "p", "project"),
        },
        abbreviations=False,
        **_PARTIAL,
    ),
    "coverage": _spec(
        "d:o:",
        "data-file= directory= rcfile=",
        effects={**_fx(W, "o", "data-file"), **_fx(CI, "d", "directory"), **_fx(R, "rcfile")},
        **_PARTIAL,
    ),
    "ctest": _spec(
        "O:",
        "output-log= output-junit=",
        effects=_fx(W, "O", "output-log", "output-junit"),
        **_PARTIAL,
    ),
    "make": _spec(
        "C:f:I:j::l::o:W:E:O::",
        "directory= file= makefile= include-dir= "
        "old-file= assume-old= what-if= new-file= assume-new= eval=",
        effects=_fx(R, "f", "file", "makefile"),
        **_PARTIAL,
    ),
    "ninja": _spec("C:f:j:k:l:d:t:w:", "", effects=_fx(R, "f"), **_PARTIAL),
    "cmake": _spec("B:S:D:P:C:G:T:A:U:", "", effects={**_fx(CI, "B"), **_fx(RUN, "P")}, **_PARTIAL),
    "mvn": _spec(
        "f:l:s:",
        "file= log-file= settings=",
        effects={**_fx(W, "l", "log-file"), **_fx(R, "f", "file", "s", "settings")},
        **_PARTIAL,
    ),
    "jest": _spec(
        "c:",
        "outputFile= coverageDirectory= config=",
        effects={**_fx(W, "outputFile"), **_fx(CI, "coverageDirectory"), **_fx(R, "c", "config")},
        abbreviations=False,
        **_PARTIAL,
    ),
    "vitest": _spec(
        "c:",
        "outputFile= config=",
        effects={**_fx(W, "outputFile"), **_fx(R, "c", "config")},
        abbreviations=False,
        **_PARTIAL,
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
PIP = _spec(
    "vqVlueo" + "f:i:r:",
    "verbose quiet log= log-file= no-input proxy= retries= timeout= exists-action= "
    "trusted-host= cert= client-cert= cache-dir= no-cache-dir disable-pip-version-check "
    "no-color no-python-version-warning use-feature= use-deprecated= isolated python= "
    "require-virtualenv debug root-user-action= keyring-provider= outdated uptodate "
    "editable local user path= pre format= not-required exclude-editable "
    "include-editable exclude= index-url= extra-index-url= no-index find-links= files "
    "all requirement= verbose",
    effects={
        **_fx(W, "log", "log-file"),
        **_fx(CI, "cache-dir"),
        **_fx(RUN, "python"),
        **_fx(R, "cert", "client-cert", "r", "requirement"),
    },
)

# git, after its subcommand: options that write, run or read (a partial
# table: git is dev at least from the shell). ``text`` is listed so that
# ``--text`` is not read as an abbreviation of ``--textconv``.
GIT = _spec(
    "o:O:",
    "output= output-directory= ext-diff textconv upload-pack= receive-pack= exec= text "
    "open-files-in-pager::",
    effects={
        **_fx(W, "output"),
        **_fx(CI, "o", "output-directory"),
        **_fx(
            RUN,
            "ext-diff",
            "textconv",
            "upload-pack",
            "receive-pack",
            "exec",
            "open-files-in-pager",
        ),
        **_fx(R, "O"),
    },
    complete=False,
    abbreviations=False,
)
GIT_GREP = _spec(
    "O::",
    "open-files-in-pager:: ext-grep text textconv",
    effects=_fx(RUN, "O", "open-files-in-pager", "textconv"),
    complete=False,
    abbreviations=False,
)

__all__ = ["DEV_SPECS", "FIND", "GIT", "GIT_GREP", "PIP", "SAFE_SPECS"]
