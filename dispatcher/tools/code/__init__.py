"""Code intelligence: symbols, references and imports parsed with tree-sitter.

``tools`` holds the four read-only tools, ``index`` the shared per-workspace
index they answer from, ``extract`` what one file defines, uses and imports,
``languages`` the grammars (one wheel per language, nothing downloaded).
"""

from __future__ import annotations

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
]
