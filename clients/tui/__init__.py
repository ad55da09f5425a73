"""The terminal client (``toolrelay tui``), built on Textual.

``run(argv)`` is the command's entry; :class:`~clients.tui.app.ToolrelayTUI`
is the app itself, importable for embedding and for tests.
"""

from clients.tui.cli import run

__all__ = ["run"]
