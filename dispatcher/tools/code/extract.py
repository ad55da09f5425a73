"""What one source file defines, uses and imports, read from its syntax tree.

One tree-sitter query per language (languages.py) captures definitions,
identifier-like tokens and import nodes; everything else here is reading
those nodes. No regular expression looks at source text: a name in a comment
or a string is not a reference, a name in a nested scope is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dispatcher.tools.code.languages import grammar, parser

if TYPE_CHECKING:  # the optional 'code' extra (languages.py)
    import tree_sitter

MAX_SIGNATURE = 200
# What a grammar's query captured: capture name -> nodes.
Captures = dict[str, list["tree_sitter.Node"]]

# Node types that hold methods (their functions become methods, named
# ``Container.name`` in ``qualified``).
_CONTAINERS = frozenset(
    {
        "class_definition",  # python
        "class_declaration",  # js, ts, java
        "abstract_class_declaration",
        "class",  # js class expression
        "interface_declaration",
        "enum_declaration",
        "record_declaration",
        "impl_item",  # rust
        "trait_item",
    }
)


@dataclass(frozen=True, slots=True)
class Symbol:
    """One definition: ``kind`` is class, function, method, constructor,
    interface, type, struct, enum, trait or module; lines are 1-based."""

    name: str
    kind: str
    line: int
    end_line: int
    column: int
    signature: str
    container: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kind": self.kind,
            "line": self.line,
            "end_line": self.end_line,
            "column": self.column,
            "signature": self.signature,
            "container": self.container,
        }


@dataclass(frozen=True, slots=True)
class Import:
    """One import as written: ``module`` is the imported module or path (a
    Python relative import keeps its dots); ``names`` what ``from ... import``
    named; ``kind`` says how to resolve it (``mod`` is Rust's ``mod x;``)."""

    module: str
    line: int
    names: tuple[str, ...] = ()
    kind: str = "import"


@dataclass(slots=True)
class FileFacts:
    """What the index keeps of one file."""

    language: str
    symbols: list[Symbol] = field(default_factory=list)
    # name -> sorted, distinct 1-based lines where it is used (definitions excluded)
    references: dict[str, tuple[int, ...]] = field(default_factory=dict)
    imports: list[Import] = field(default_factory=list)
    error: bool = False  # the tree holds syntax errors (facts are best effort)


def _text(node: tree_sitter.Node) -> str:
    raw = node.text
    return raw.decode("utf-8", "replace") if raw is not None else ""


def _signature(node: tree_sitter.Node, source: bytes) -> str:
    """The definition's header: its text up to the body, on one line."""
    body = node.child_by_field_name("body")
    end = node.end_byte
    if body is not None:
        # Up to the last part of the header (name, parameters, return type,
        # heritage), so a comment between the header and the body is left out.
        end = node.start_byte
        for child in node.children:
            if child.start_byte >= body.start_byte:
                break
            if child.type != "comment":
                end = child.end_byte
    head = source[node.start_byte : end].decode("utf-8", "replace")
    if body is None:
        head = head.split("\n", 1)[0]
    text = " ".join(head.split()).rstrip(" {:")
    return text if len(text) <= MAX_SIGNATURE else text[: MAX_SIGNATURE - 3] + "..."


def _container(node: tree_sitter.Node) -> tuple[str | None, bool]:
    """The enclosing class-like definition's name, and whether the node sits
    directly in its body (a method) rather than in a nested function."""
    parent = node.parent
    direct = True
    while parent is not None:
        if parent.type in _CONTAINERS:
            name = parent.child_by_field_name("name")
            if parent.type == "impl_item":
                name = parent.child_by_field_name("type")
            return (_text(name) if name is not None else None), direct
        if parent.type in (
            "function_definition",
            "function_declaration",
            "function_item",
            "method_definition",
            "method_declaration",
            "arrow_function",
        ):
            direct = False
        parent = parent.parent
    return None, False


def _go_type_kind(node: tree_sitter.Node) -> str:
    inner = node.child_by_field_name("type")
    if inner is not None and inner.type == "struct_type":
        return "struct"
    if inner is not None and inner.type == "interface_type":
        return "interface"
    return "type"


def _go_receiver(node: tree_sitter.Node) -> str | None:
    receiver = node.child_by_field_name("receiver")
    if receiver is None:
        return None
    for decl in receiver.named_children:
        typ = decl.child_by_field_name("type")
        while typ is not None and typ.type in ("pointer_type", "generic_type"):
            typ = typ.named_children[0] if typ.named_children else None
        if typ is not None:
            return _text(typ)
    return None


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] in "\"'`" and text[-1] == text[0]:
        return text[1:-1]
    return text


def _python_import(node: tree_sitter.Node) -> list[Import]:
    line = node.start_point[0] + 1
    if node.type == "import_statement":
        out = []
        for child in node.children_by_field_name("name"):
            target = child.child_by_field_name("name") if child.type == "aliased_import" else child
            if target is not None:
                out.append(Import(_text(target), line))
        return out
    module = node.child_by_field_name("module_name")
    if module is None:
        return []
    names: list[str] = []
    for child in node.children_by_field_name("name"):
        target = child.child_by_field_name("name") if child.type == "aliased_import" else child
        if target is not None:
            names.append(_text(target))
    return [Import(_text(module), line, tuple(names), "from")]


def _java_import(node: tree_sitter.Node) -> list[Import]:
    parts = [c for c in node.named_children if c.type in ("scoped_identifier", "identifier")]
    if not parts:
        return []
    module = _text(parts[0])
    if any(c.type == "asterisk" for c in node.children):
        module += ".*"
    is_static = any(c.type == "static" for c in node.children)
    return [Import(module, node.start_point[0] + 1, kind="static" if is_static else "import")]


def extract(language: str, source: bytes) -> FileFacts:
    """Parse ``source`` as ``language`` and read its definitions, references
    and imports."""
    tree = parser(language).parse(source)
    root = tree.root_node
    facts = FileFacts(language, error=root.has_error)
    captures = grammar(language).cursor().captures(root)
    def_names = _definitions(language, source, captures, facts)
    facts.symbols.sort(key=lambda s: (s.line, s.column))
    facts.references = _references(captures, def_names)
    _imports(captures, facts)
    facts.imports.sort(key=lambda i: i.line)
    return facts


def _definitions(language: str, source: bytes, captures: Captures, facts: FileFacts) -> set[int]:
    """Add the file's definitions to ``facts.symbols`` (and a Rust ``mod x;``
    to its imports); the start bytes of their names, which are no references."""
    def_names: set[int] = set()
    for capture, nodes in captures.items():
        if not capture.startswith("def."):
            continue
        kind = capture[4:]
        for node in nodes:
            name_node = node.child_by_field_name("name")
            if name_node is None:
                continue
            def_names.add(name_node.start_byte)
            container: str | None = None
            if language == "go":
                if kind == "type":
                    kind_here = _go_type_kind(node)
                elif kind == "method":
                    kind_here, container = kind, _go_receiver(node)
                else:
                    kind_here = kind
            else:
                kind_here = kind
                container, direct = _container(node)
                if kind == "function" and container is not None:
                    if direct:
                        kind_here = "method"
                    else:
                        container = None  # a function nested in a method
                if (
                    language == "rust"
                    and kind == "module"
                    and node.child_by_field_name("body") is None
                ):
                    facts.imports.append(
                        Import(_text(name_node), node.start_point[0] + 1, kind="mod")
                    )
            facts.symbols.append(
                Symbol(
                    name=_text(name_node),
                    kind=kind_here,
                    line=node.start_point[0] + 1,
                    end_line=node.end_point[0] + 1,
                    column=name_node.start_point[1] + 1,
                    signature=_signature(node, source),
                    container=container,
                )
            )
    return def_names


def _references(captures: Captures, def_names: set[int]) -> dict[str, tuple[int, ...]]:
    """Name -> the lines that use it (a definition's own name excluded)."""
    refs: dict[str, set[int]] = {}
    for node in captures.get("ref", ()):
        if node.start_byte in def_names:
            continue
        refs.setdefault(_text(node), set()).add(node.start_point[0] + 1)
    for node in captures.get("ref.pkg", ()):
        # Go's ``package main`` names the package, it does not use ``main``.
        if node.parent is None or node.parent.type != "package_clause":
            refs.setdefault(_text(node), set()).add(node.start_point[0] + 1)
    return {name: tuple(sorted(lines)) for name, lines in refs.items()}


def _imports(captures: Captures, facts: FileFacts) -> None:
    """Add the file's imports, of every language's shape, to ``facts.imports``."""
    for node in captures.get("import", ()):
        facts.imports.append(Import(_unquote(_text(node)), node.start_point[0] + 1))
    for node in captures.get("import.py", ()):
        facts.imports.extend(_python_import(node))
    for node in captures.get("import.use", ()):
        facts.imports.append(Import(_text(node), node.start_point[0] + 1, kind="use"))
    for node in captures.get("import.java", ()):
        facts.imports.extend(_java_import(node))
