"""git_status, git_diff, git_log (read) and git_commit, git_branch (write):
thin tools over the git CLI with structured output. See runner.py for how
git is run and why the read tools can declare ``read``.

Each tool gives the model readable text and clients the same facts as
``ToolOutput.data``, described by the tool's ``output_schema`` (the
``*_OUTPUT`` schemas of outputs.py); ``metadata`` keeps only operational
facts (git_diff: whether the diff text was cut).

The read tools live in read_tools.py, git_commit in commit.py, git_branch
in branch.py, their output schemas in outputs.py; this module names them
all."""

from __future__ import annotations

from dispatcher.tools.git.branch import GitBranchTool
from dispatcher.tools.git.commit import GitCommitTool
from dispatcher.tools.git.read_tools import GitDiffTool, GitLogTool, GitStatusTool

__all__ = ["GitBranchTool", "GitCommitTool", "GitDiffTool", "GitLogTool", "GitStatusTool"]
