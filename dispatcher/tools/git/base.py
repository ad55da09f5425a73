"""What every git tool shares: the runner of its git command, kept so that
``cancel()`` can stop the command in flight."""

from __future__ import annotations

from dispatcher.tool import BaseTool, ToolContext
from dispatcher.tools.git.runner import GitRunner


class GitTool(BaseTool):
    """Shared cancel(): stop the git command in flight."""

    def __init__(self) -> None:
        self._git: GitRunner | None = None

    def _runner(self, context: ToolContext, *, writable: bool = False) -> GitRunner:
        self._git = GitRunner.of(context, writable=writable)
        return self._git

    async def cancel(self) -> bool:
        return await self._git.terminate() if self._git is not None else False
