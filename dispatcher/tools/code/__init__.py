"""Code intelligence: symbols, references and imports parsed with tree-sitter.

``tools`` holds the four read-only tools, ``index`` the shared per-workspace
index they answer from, ``resolve`` where an import points, ``extract`` what
one file defines, uses and imports, ``languages`` the grammars (one wheel per
language, nothing downloaded). The server uses the family through this
package only: the tools, and ``note_modified`` (the dispatcher's
``on_files_modified``: how the index learns which files tool calls modified).
"""

from __future__ import annotations

from dispatcher.tools.code.index import note_modified
from dispatcher.tools.code.tools import (
    CODE_TOOLS,
    DependencyGraphTool,
    FindReferencesTool,
    FindSymbolTool,
    ListSymbolsTool,
)

__all__ = [
    "CODE_TOOLS",
    "DependencyGraphTool",
    "FindReferencesTool",
    "FindSymbolTool",
    "ListSymbolsTool",
    "note_modified",
]
