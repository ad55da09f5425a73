"""The structured output of the git tools (``ToolOutput.data``), one schema
per tool: what clients read besides the model's text."""

from __future__ import annotations

from dispatcher.tools.shapes import (
    BOOLEAN,
    COUNT,
    PATH,
    STRING,
    array,
    nullable,
    record,
)

# The change words of parse._STATUS_WORDS, plus what untracked/ignored entries carry.
_CHANGE = {"type": "string", "description": "modified, added, deleted, renamed, ... or unmodified."}
STATUS_OUTPUT = record(
    {
        "branch": record(
            {
                "head": nullable("string", "Current branch; null when HEAD is detached."),
                "oid": nullable("string", "HEAD commit; null before the first commit."),
                "upstream": nullable("string"),
                "ahead": nullable("integer", "Commits ahead of upstream (null: no upstream)."),
                "behind": nullable("integer", "Commits behind upstream (null: no upstream)."),
            }
        ),
        "entries": array(
            record(
                {
                    "path": PATH,
                    "kind": {
                        "type": "string",
                        "enum": [
                            "changed",
                            "renamed",
                            "copied",
                            "unmerged",
                            "untracked",
                            "ignored",
                        ],
                    },
                    "index": _CHANGE,
                    "worktree": _CHANGE,
                    "orig_path": nullable("string", "The path before a rename or copy."),
                }
            )
        ),
        "clean": BOOLEAN,
    }
)
DIFF_OUTPUT = record(
    {
        "files": array(
            record(
                {
                    "path": PATH,
                    "old_path": nullable("string", "The path before a rename."),
                    "added": nullable("integer", "Lines added; null for a binary file."),
                    "removed": nullable("integer", "Lines removed; null for a binary file."),
                    "binary": BOOLEAN,
                }
            ),
            "Every changed file, even when the diff text was truncated.",
        ),
        "staged": BOOLEAN,
        "ref": nullable("string"),
    }
)
COMMIT_RECORD = record(
    {
        "sha": STRING,
        "short": STRING,
        "author": STRING,
        "email": STRING,
        "date": {"type": "string", "format": "date-time", "description": "Author date."},
        "parents": array(STRING),
        "subject": STRING,
        "body": STRING,
    }
)
LOG_OUTPUT = record({"commits": array(COMMIT_RECORD, "Newest first."), "count": COUNT})
_COMMITTED_FILE = record(
    {
        "status": {"type": "string", "description": "git's name-status letter (A, M, D, R, C...)."},
        "path": PATH,
        "old_path": STRING,
    },
    optional=["old_path"],
)
COMMIT_OUTPUT = record(
    {"sha": STRING, "branch": nullable("string"), "files": array(_COMMITTED_FILE)}
)
BRANCH_OUTPUT = record(
    {
        "action": {"type": "string", "enum": ["list", "create", "switch", "delete"]},
        "name": STRING,
        "branches": array(
            record(
                {
                    "name": STRING,
                    "commit": STRING,
                    "current": BOOLEAN,
                    "upstream": nullable("string"),
                }
            ),
            "Present for action list.",
        ),
        "files_changed": array(PATH, "Present for action switch."),
    },
    optional=["name", "branches", "files_changed"],
)
