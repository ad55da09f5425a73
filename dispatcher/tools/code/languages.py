"""The tree-sitter grammars the code tools parse, and which files they parse.

Each grammar comes from its own wheel (tree-sitter-python, -javascript,
-typescript, -go, -rust, -java), which ships the compiled grammar: nothing is
downloaded at first use (tree-sitter-language-pack does, and fails offline).
Languages and queries are built once per process; parsers once per thread,
because a ``tree_sitter.Parser`` must not be shared between threads.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass

from dispatcher.errors import ToolExecutionError
from protocol.extras import MissingExtra

# The grammars are the optional 'code' extra: without it the server still
# starts and registers the code tools, whose calls then fail naming the extra.
try:
    import tree_sitter
    import tree_sitter_go
    import tree_sitter_java
    import tree_sitter_javascript
    import tree_sitter_python
    import tree_sitter_rust
    import tree_sitter_typescript
except ImportError:
    _installed = False
else:
    _installed = True

# File name suffix -> language name.
EXTENSIONS: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".jsx": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
}


def _grammars() -> dict[str, Callable[[], object]]:
    """Language name -> the function of its wheel that returns the grammar."""
    return {
        "python": tree_sitter_python.language,
        "javascript": tree_sitter_javascript.language,
        "typescript": tree_sitter_typescript.language_typescript,
        "tsx": tree_sitter_typescript.language_tsx,
        "go": tree_sitter_go.language,
        "rust": tree_sitter_rust.language,
        "java": tree_sitter_java.language,
    }


# What each language captures. ``@def.<kind>`` marks a definition node (its
# name is its ``name`` field); ``@ref`` every identifier-like token; the
# ``@import*`` captures the nodes the import extraction reads.
_JS_DEFS = """
(class_declaration name: (_) @name) @def.class
(function_declaration name: (_) @name) @def.function
(generator_function_declaration name: (_) @name) @def.function
(method_definition name: (_) @name) @def.method
(variable_declarator name: (identifier) @name
  value: [(arrow_function) (function_expression)]) @def.function
(import_statement source: (string) @import)
(export_statement source: (string) @import)
(call_expression function: (identifier) @_req arguments: (arguments . (string) @import)
  (#eq? @_req "require"))
"""
_TS_DEFS = (
    _JS_DEFS
    + """
(abstract_class_declaration name: (_) @name) @def.class
(interface_declaration name: (_) @name) @def.interface
(type_alias_declaration name: (_) @name) @def.type
(enum_declaration name: (_) @name) @def.enum
(type_identifier) @ref
"""
)
_JS_REFS = """
(identifier) @ref
(property_identifier) @ref
(shorthand_property_identifier) @ref
(shorthand_property_identifier_pattern) @ref
"""

QUERIES: dict[str, str] = {
    "python": """
(class_definition name: (identifier) @name) @def.class
(function_definition name: (identifier) @name) @def.function
(identifier) @ref
(import_statement) @import.py
(import_from_statement) @import.py
""",
    "javascript": _JS_DEFS + _JS_REFS,
    "typescript": _TS_DEFS + _JS_REFS,
    "tsx": _TS_DEFS + _JS_REFS,
    "go": """
(function_declaration name: (identifier) @name) @def.function
(method_declaration name: (field_identifier) @name) @def.method
(type_spec name: (type_identifier) @name) @def.type
(identifier) @ref
(type_identifier) @ref
(field_identifier) @ref
(package_identifier) @ref.pkg
(import_spec path: (_) @import)
""",
    "rust": """
(function_item name: (identifier) @name) @def.function
(struct_item name: (type_identifier) @name) @def.struct
(enum_item name: (type_identifier) @name) @def.enum
(trait_item name: (type_identifier) @name) @def.trait
(type_item name: (type_identifier) @name) @def.type
(mod_item name: (identifier) @name) @def.module
(identifier) @ref
(type_identifier) @ref
(field_identifier) @ref
(use_declaration argument: (_) @import.use)
""",
    "java": """
(class_declaration name: (identifier) @name) @def.class
(interface_declaration name: (identifier) @name) @def.interface
(enum_declaration name: (identifier) @name) @def.enum
(record_declaration name: (identifier) @name) @def.class
(method_declaration name: (identifier) @name) @def.method
(constructor_declaration name: (identifier) @name) @def.constructor
(identifier) @ref
(type_identifier) @ref
(import_declaration) @import.java
""",
}


@dataclass(frozen=True, slots=True)
class Grammar:
    """One language's compiled grammar and its query."""

    name: str
    language: tree_sitter.Language
    query: tree_sitter.Query

    def cursor(self) -> tree_sitter.QueryCursor:
        """A fresh cursor over this grammar's query (one per parsed file)."""
        return tree_sitter.QueryCursor(self.query)


def language_for(path: str) -> str | None:
    """The language of a file, by its suffix, or None if no grammar parses it."""
    dot = path.rfind(".")
    if dot <= path.rfind("/"):
        return None
    return EXTENSIONS.get(path[dot:].lower())


def require_grammars() -> None:
    """Raise the tool error naming the 'code' extra unless its grammars import."""
    if not _installed:
        raise ToolExecutionError(str(MissingExtra("code")))


@functools.cache
def grammar(name: str) -> Grammar:
    """The grammar ``name`` (built once per process)."""
    require_grammars()
    language = tree_sitter.Language(_grammars()[name]())
    return Grammar(name, language, tree_sitter.Query(language, QUERIES[name]))


_local = threading.local()


def parser(name: str) -> tree_sitter.Parser:
    """This thread's parser for language ``name``."""
    require_grammars()
    parsers: dict[str, tree_sitter.Parser] | None = getattr(_local, "parsers", None)
    if parsers is None:
        parsers = _local.parsers = {}
    found = parsers.get(name)
    if found is None:
        found = parsers[name] = tree_sitter.Parser(grammar(name).language)
    return found
