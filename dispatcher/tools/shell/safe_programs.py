"""The option table's complete entries: every program the shell rates
``safe``, with every option from its manual (see programs.py for the
sources and how to add one), and find's expression. An option missing here
makes a command not safe rather than guessed at, so these entries are
exhaustive by design.
"""

from __future__ import annotations

from dispatcher.tools.shell.options import Effect, FindSpec, Spec
from dispatcher.tools.shell.table_shorthand import (
    CI,
    HELP,
    LITERAL,
    RUN,
    SYS,
    WO,
    C,
    F,
    R,
    W,
    fx,
    spec,
)

_DIGESTS = spec("bctwz", "binary check tag text zero ignore-missing quiet status strict warn")
_GREP = spec(
    "0123456789A:B:C:D:EFGHIJLPRTUVX:abcd:e:f:hiLlm:noqRrsuvwxyZz",
    "extended-regexp fixed-strings fixed-regexp basic-regexp perl-regexp regexp= file= "
    "ignore-case no-ignore-case word-regexp line-regexp null-data no-messages invert-match "
    "max-count= byte-offset line-number line-buffered with-filename no-filename label= "
    "only-matching quiet silent binary-files= text directories= devices= recursive "
    "dereference-recursive include= exclude= exclude-from= exclude-dir= files-without-match "
    "files-with-matches count initial-tab null before-context= after-context= context= "
    "group-separator= no-group-separator color:: colour:: binary unix-byte-offsets",
    effects={**fx(R, "f", "file", "exclude-from"), **fx(F, "R", "dereference-recursive")},
    numbers=True,
)

SAFE_SPECS: dict[str, Spec] = {
    # -- coreutils ----------------------------------------------------------
    "ls": spec(
        "abcdfghiklmnopqrstuvw:xABCDFGHI:LNQRST:UXZ1",
        "all almost-all author escape block-size= ignore-backups color:: directory dired "
        "classify:: file-type format= full-time group-directories-first no-group "
        "human-readable si dereference-command-line dereference-command-line-symlink-to-dir "
        "hide= hyperlink:: indicator-style= inode ignore= kibibytes dereference "
        "numeric-uid-gid literal hide-control-chars show-control-chars quote-name "
        "quoting-style= reverse recursive size sort= time= time-style= tabsize= width= "
        "context zero",
        effects=fx(F, "L", "dereference"),
    ),
    "cat": spec(
        "benstuvAET",
        "show-all number-nonblank show-ends number squeeze-blank show-tabs show-nonprinting",
    ),
    "head": spec("c:n:qvz", "bytes= lines= quiet silent verbose zero-terminated", numbers=True),
    "tail": spec(
        "c:n:fFqs:vz",
        "bytes= follow:: lines= max-unchanged-stats= pid= quiet silent retry sleep-interval= "
        "verbose zero-terminated presume-input-pipe",
        numbers=True,
    ),
    "wc": spec(
        "clLmw",
        "bytes chars lines files0-from= max-line-length words total=",
        effects=fx(R, "files0-from"),
    ),
    "grep": _GREP,
    "egrep": _GREP,
    "fgrep": _GREP,
    "stat": spec(
        "c:fLt",
        "dereference file-system cached= format= printf= terse",
        effects=fx(F, "L", "dereference"),
    ),
    "du": spec(
        "0abd:chHklmst:xB:DLPSX:",
        "null all apparent-size block-size= bytes total dereference-args max-depth= "
        "summarize files0-from= human-readable inodes dereference count-links "
        "no-dereference separate-dirs si threshold= time:: time-style= exclude-from= "
        "exclude= one-file-system",
        effects={**fx(F, "L", "dereference"), **fx(R, "files0-from", "X", "exclude-from")},
    ),
    "df": spec(
        "aB:iF:hHklmPTt:vx:",
        "all block-size= inodes human-readable si local no-sync sync output:: portability "
        "print-type total type= exclude-type=",
    ),
    "sort": spec(
        "bcCdfghik:mMno:rRsS:t:T:uVy:z",
        "ignore-leading-blanks check:: compress-program= debug dictionary-order files0-from= "
        "general-numeric-sort human-numeric-sort ignore-case ignore-nonprinting key= merge "
        "month-sort numeric-sort output= parallel= random-sort random-source= reverse sort= "
        "stable buffer-size= field-separator= temporary-directory= unique version-sort "
        "zero-terminated batch-size=",
        effects={
            **fx(W, "o", "output"),
            **fx(CI, "T", "temporary-directory"),
            **fx(RUN, "compress-program"),
            **fx(R, "files0-from", "random-source"),
        },
    ),
    "uniq": spec(
        "cdDf:is:uw:z",
        "count repeated all-repeated:: skip-fields= skip-chars= unique group:: ignore-case "
        "check-chars= zero-terminated",
        numbers=True,
        operands_written=1,
    ),
    "cut": spec(
        "b:c:d:f:nsz",
        "bytes= characters= delimiter= fields= complement only-delimited output-delimiter= "
        "zero-terminated",
    ),
    "tr": spec("AcCdst", "complement delete squeeze-repeats truncate-set1", permute=False),
    "cmp": spec("bci:ln:sv", "print-bytes print-chars ignore-initial= verbose bytes= quiet silent"),
    "basename": spec("as:z", "multiple suffix= zero"),
    "dirname": spec("z", "zero"),
    "realpath": spec(
        "eLmPqsz",
        "canonicalize-existing canonicalize-missing logical physical quiet relative-to= "
        "relative-base= strip no-symlinks zero",
    ),
    "readlink": spec(
        "efmnqsvz",
        "canonicalize canonicalize-existing canonicalize-missing no-newline quiet silent "
        "verbose zero",
    ),
    "seq": spec("f:s:w", "format= separator= equal-width", permute=False, numbers=True),
    "nl": spec(
        "h:b:f:v:i:pl:s:w:n:d:",
        "body-numbering= section-delimiter= footer-numbering= header-numbering= "
        "line-increment= join-blank-lines= number-format= no-renumber number-separator= "
        "starting-line-number= number-width=",
    ),
    "od": spec(
        "A:aBbcDdeFfHhIij:LlN:OoS:st:vw::Xx",
        "address-radix= endian= skip-bytes= read-bytes= format= output-duplicates strings:: "
        "traditional width::",
    ),
    "md5sum": _DIGESTS,
    "sha1sum": _DIGESTS,
    "sha256sum": _DIGESTS,
    "sha512sum": _DIGESTS,
    "cksum": spec(
        "a:bcl:tzw",
        "algorithm= base64 check length= raw tag untagged zero ignore-missing quiet status "
        "strict warn debug binary text",
    ),
    "printenv": spec("0", "null"),
    "whoami": spec("", ""),
    "id": spec("agnruzGZ", "context group groups name real user zero"),
    "uname": spec(
        "asnrvmpio",
        "all kernel-name sysname nodename kernel-release release kernel-version machine "
        "processor hardware-platform operating-system",
    ),
    "nproc": spec("", "all ignore="),
    "tac": spec("brs:", "before regex separator="),
    "fold": spec("bsw:", "bytes spaces width=", numbers=True),
    "expand": spec("it:", "initial tabs=", numbers=True),
    "comm": spec("123z", "check-order nocheck-order output-delimiter= total zero-terminated"),
    "join": spec(
        "a:e:i1:2:j:o:t:v:z", "ignore-case check-order nocheck-order header zero-terminated"
    ),
    "paste": spec("d:sz", "delimiters= serial zero-terminated"),
    "sleep": spec("", ""),
    "date": spec(
        "d:f:I::r:Rs:u",
        "date= debug file= iso-8601:: resolution rfc-email rfc-822 rfc-2822 rfc-3339= "
        "reference= set= utc universal",
        effects={**fx(SYS, "s", "set"), **fx(R, "f", "file", "r", "reference")},
        note="an operand that is not a +FORMAT sets the clock (see rules.py)",
    ),
    "diff": spec(
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
            **fx(F, "r", "recursive"),
            **fx(HELP, "l", "paginate"),  # pipes its output through pr
            **fx(R, "from-file", "to-file", "X", "exclude-from"),
        },
        numbers=True,
    ),
    # -- util-linux, procps, binutils, file, hostname, debianutils ---------
    "hexdump": spec(
        "bcCde:f:L::n:os:vxXhV",
        "one-byte-octal one-byte-hex one-byte-char canonical two-bytes-decimal "
        "two-bytes-octal two-bytes-hex color:: format= format-file= length= skip= "
        "no-squeezing",
        effects=fx(R, "f", "format-file"),
    ),
    "column": spec(
        "c:dE:eH:hi:Jl:LN:n:O:o:p:R:r:s:T:tVW:x",
        "columns= table table-name= table-order= table-columns= table-column= "
        "table-columns-limit= table-noextreme= table-noheadings table-header-as-columns "
        "table-header-repeat table-hide= table-right= table-truncate= table-wrap= "
        "keep-empty-lines json tree= tree-id= tree-parent= output-width= "
        "output-separator= separator= fillrows",
    ),
    "rev": spec("0hV", "zero"),
    "locale": spec("acmkvV", "all-locales charmaps category-name keyword-name verbose usage"),
    "uptime": spec("chpsrV", "container pretty since raw"),
    "free": spec(
        "bkmghltvwc:s:V",
        "bytes kilo mega giga tera peta kibi mebi gibi tebi pebi human si lohi line total "
        "committed seconds= count= wide",
    ),
    "strings": spec(
        "adfhHn:wot:e:T:Vvs:U:",
        "all data print-file-name bytes= radix= target= encoding= include-all-whitespace "
        "output-separator= unicode=",
        numbers=True,
    ),
    "file": spec(
        "bcCde:Ef:F:hiklLm:nNpP:rsSvzZ0",
        "magic-file= uncompress uncompress-noreport brief checking-printout exclude= "
        "exclude-quiet= files-from= separator= mime mime-type mime-encoding apple extension "
        "keep-going list dereference no-dereference no-buffer no-pad print0 preserve-date "
        "parameter= raw special-files no-sandbox compile debug",
        effects={
            **fx(C, "C", "compile"),  # writes <magic>.mgc into the working folder
            **fx(HELP, "z", "Z", "uncompress", "uncompress-noreport"),
            **fx(R, "m", "magic-file", "f", "files-from"),
            # restores each operand's access time: a write of its metadata
            **fx(WO, "p", "preserve-date"),
        },
    ),
    "hostname": spec(
        "aAbdfF:hiIsvVy",
        "alias all-fqdns boot domain file= fqdn long ip-address all-ip-addresses short yp "
        "nis verbose",
        effects=fx(SYS, "b", "boot", "F", "file"),
        operands=SYS,
    ),
    "which": Spec("as", (), permute=False, abbreviations=False, note="debianutils: getopts"),
    # -- searchers ------------------------------------------------------------
    "rg": spec(
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
            **fx(RUN, "pre", "hostname-bin"),
            **fx(HELP, "z", "search-zip"),
            **fx(F, "L", "follow"),
            **fx(R, "f", "file", "ignore-file"),
        },
        note="ripgrep takes no abbreviations; reading them anyway only sees more",
    ),
    "ag": spec(
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
            **fx(RUN, "pager"),
            **fx(HELP, "z", "search-zip"),
            **fx(F, "f", "follow"),
            **fx(R, "p", "path-to-ignore"),
        },
    ),
    "fd": spec(
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
            **fx(RUN, "x", "X", "exec", "exec-batch"),
            **fx(HELP, "l", "list-details"),  # runs ls -l on each result
            **fx(F, "L", "follow"),
            **fx(R, "ignore-file"),
        },
    ),
    "tokei": spec(
        "c:e:fi:lo:s:t:vCn:V",
        "columns= exclude= files input= languages output= sort= types= verbose hidden "
        "no-ignore no-ignore-parent no-ignore-dot no-ignore-vcs compact num-format= rsort=",
        effects=fx(R, "i", "input"),
    ),
    "tree": spec(
        "adfghiklnpqrstuvxACDFJNQRSUXH:I:L:o:P:T:",
        "help version inodes device noreport nolinks dirsfirst filesfirst filelimit= "
        "charset= fromfile fromtabfile prune matchdirs ignore-case info infofile= "
        "gitignore gitfile= du si timefmt= sort= hyperlink scheme= authority= metafirst "
        "opt-toggle icons",
        effects={
            **fx(W, "o"),
            **fx(F, "l"),
            **fx(C, "R"),  # writes 00Tree.html in every folder (with -H)
            **fx(R, "fromfile", "fromtabfile", "infofile", "gitfile"),
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
        effects=fx(R, "L", "slurpfile", "rawfile"),
        abbreviations=False,
        two_values=frozenset({"arg", "argjson", "slurpfile", "rawfile"}),
        note="jq's own parser: no abbreviations, --arg NAME VALUE",
    ),
    # -- shell builtins and programs without options ---------------------------
    "echo": LITERAL,
    "printf": LITERAL,
    "true": LITERAL,
    "false": LITERAL,
    ":": LITERAL,
    "test": LITERAL,
    "[": LITERAL,
    "pwd": spec("LP", "logical physical", permute=False),
    "type": Spec("afptP", (), permute=False, abbreviations=False),
}

# find: primaries and how many values each takes (-1: up to ``;`` or ``+``).
FIND = FindSpec(
    primaries={
        **dict.fromkeys(
            [
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
            ],
            0,
        ),
        **dict.fromkeys(
            [
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
            ],
            1,
        ),
        "-fprintf": 2,
        **dict.fromkeys(("-exec", "-execdir", "-ok", "-okdir"), -1),
        **{f"-newer{x}{y}": 1 for x in "aBcmt" for y in "aBcmt"},
    },
    effects={
        **fx(W, "-fprint", "-fprint0", "-fprintf", "-fls"),
        **fx(RUN, "-exec", "-execdir", "-ok", "-okdir"),
        **fx(Effect.DELETES, "-delete"),
        **fx(F, "-L", "-H", "-follow"),
        **fx(R, "-files0-from", "-newer", "-anewer", "-cnewer", "-samefile"),
    },
    leading=frozenset({"-H", "-L", "-P", "-D"}),
)
