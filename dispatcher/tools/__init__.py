"""The built-in toolset: files, edits, patches, search, shell, git.

Each tool is a class with a ``definition`` and a zero-argument constructor,
so the class itself is the factory the dispatcher registers. The tools are
documented in specs/tools.md.
"""

from __future__ import annotations

from dispatcher.tool import ToolFactory
from dispatcher.tools.code import CODE_TOOLS
from dispatcher.tools.files.edit import DeleteFileTool, PatchFileTool, ReadFileTool, WriteFileTool
from dispatcher.tools.files.listing import FindFilesTool, ListDirTool
from dispatcher.tools.git.tools import (
    GitBranchTool,
    GitCommitTool,
    GitDiffTool,
    GitLogTool,
    GitStatusTool,
)
from dispatcher.tools.knowledge.memory import MEMORY_TOOLS
from dispatcher.tools.knowledge.retrieve_doc import RetrieveDocTool
from dispatcher.tools.patch.apply_patch import ApplyPatchTool
from dispatcher.tools.search.grep import GrepTool
from dispatcher.tools.search.search_code import SearchCodeTool
from dispatcher.tools.shell.tool import RunCommandTool, ShellTool

FILE_TOOLS: tuple[ToolFactory, ...] = (
    ReadFileTool,
    WriteFileTool,
    PatchFileTool,
    ApplyPatchTool,
    ListDirTool,
    FindFilesTool,
)
SEARCH_TOOLS: tuple[ToolFactory, ...] = (SearchCodeTool, GrepTool)
GIT_TOOLS: tuple[ToolFactory, ...] = (
    GitStatusTool,
    GitDiffTool,
    GitLogTool,
    GitCommitTool,
    GitBranchTool,
)
SHELL_TOOLS: tuple[ToolFactory, ...] = (ShellTool, RunCommandTool)


def builtin_tool_factories(
    *, shell_enabled: bool = True, delete_enabled: bool = False
) -> list[ToolFactory]:
    """Every built-in tool to register: delete_file only when the workspace
    allows deletion, shell/run_command only when commands are enabled."""
    factories: list[ToolFactory] = [*FILE_TOOLS, *SEARCH_TOOLS, *GIT_TOOLS]
    if delete_enabled:
        factories.append(DeleteFileTool)
    if shell_enabled:
        factories.extend(SHELL_TOOLS)
    return factories


def knowledge_tool_factories(*, memory_enabled: bool = True) -> list[ToolFactory]:
    """The code-intelligence tools, retrieve_doc and (when the server has a
    memory store) the memory tools; registered beside the built-in set."""
    factories: list[ToolFactory] = [*CODE_TOOLS, RetrieveDocTool]
    if memory_enabled:
        factories.extend(MEMORY_TOOLS)
    return factories


__all__ = [
    "ApplyPatchTool",
    "DeleteFileTool",
    "FindFilesTool",
    "GitBranchTool",
    "GitCommitTool",
    "GitDiffTool",
    "GitLogTool",
    "GitStatusTool",
    "GrepTool",
    "ListDirTool",
    "PatchFileTool",
    "ReadFileTool",
    "RunCommandTool",
    "SearchCodeTool",
    "ShellTool",
    "WriteFileTool",
    "builtin_tool_factories",
    "knowledge_tool_factories",
]
