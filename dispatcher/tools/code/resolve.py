"""Where an import points in the workspace, per language (best effort:
what a build tool would find by convention, without reading its
configuration). Used by the code index (dispatcher/tools/code/index.py) for
its import graph.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from dispatcher.tools.code.extract import Import


class ImportResolver:
    """Maps an import to a workspace path, per language (best effort: what a
    build tool would find by convention, without reading its configuration)."""

    def __init__(self, files: Iterable[str], go_modules: dict[str, str]) -> None:
        self.files = set(files)
        self.go_modules = go_modules
        self.dirs: set[str] = {posixpath.dirname(f) for f in self.files}
        # python: dotted module suffix -> files ("a/b/c.py" is "a.b.c", "b.c", "c")
        self.py: dict[str, list[str]] = {}
        for rel in sorted(self.files):
            if not rel.endswith((".py", ".pyi")):
                continue
            parts = rel.rsplit(".", 1)[0].split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            for i in range(len(parts)):
                self.py.setdefault(".".join(parts[i:]), []).append(rel)

    def resolve(self, rel: str, language: str, imp: Import) -> str | None:
        if language == "python":
            return self._python(rel, imp)
        if language in ("javascript", "typescript", "tsx"):
            return self._js(rel, imp.module)
        if language == "go":
            return self._go(imp.module)
        if language == "rust":
            return self._rust(rel, imp)
        if language == "java":
            return self._java(imp.module)
        return None

    def _python(self, rel: str, imp: Import) -> str | None:
        module = imp.module
        if module.startswith("."):
            dots = len(module) - len(module.lstrip("."))
            base = posixpath.dirname(rel)
            for _ in range(dots - 1):
                base = posixpath.dirname(base)
            tail = module[dots:]
            stem = posixpath.join(base, *tail.split(".")) if tail else base
            for name in imp.names:
                if found := self._py_path(posixpath.join(stem, name)):
                    return found
            return self._py_path(stem)
        for name in imp.names:
            if found := self._py_module(f"{module}.{name}", rel):
                return found
        return self._py_module(module, rel)

    def _py_path(self, stem: str) -> str | None:
        stem = posixpath.normpath(stem)
        for candidate in (f"{stem}.py", f"{stem}/__init__.py", f"{stem}.pyi"):
            if candidate in self.files:
                return candidate
        return None

    def _py_module(self, module: str, rel: str) -> str | None:
        found = self.py.get(module)
        if not found:
            return None
        # Several files end in the same dotted suffix: prefer the one whose
        # full module path is shortest (the most likely import root), then
        # the one nearest the importer.
        return min(found, key=lambda f: (f.count("/"), _distance(f, rel)))

    def _js(self, rel: str, spec: str) -> str | None:
        if not spec.startswith("."):
            return None  # a package from node_modules: external
        stem = posixpath.normpath(posixpath.join(posixpath.dirname(rel), spec))
        exts = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts")
        candidates = [stem, *(stem + e for e in exts), *(f"{stem}/index{e}" for e in exts)]
        # "./x.js" in TypeScript sources names x.ts (the compiled output's name).
        base, dot, ext = stem.rpartition(".")
        if dot and ext in ("js", "jsx", "mjs", "cjs"):
            candidates += [base + ".ts", base + ".tsx"]
        return next((c for c in candidates if c in self.files), None)

    def _go(self, path: str) -> str | None:
        # An import path names a package folder: the module path of a go.mod
        # plus the folder below it; without a matching go.mod, the longest
        # folder the path ends with.
        for folder, module in sorted(self.go_modules.items()):
            if path == module or path.startswith(module + "/"):
                rest = path[len(module) + 1 :]
                target = posixpath.normpath(posixpath.join(folder, rest)) if rest else folder
                if target in self.dirs:
                    return target
        best: str | None = None
        for folder in self.dirs:
            matches = folder and (path == folder or path.endswith("/" + folder))
            if matches and (best is None or len(folder) > len(best)):
                best = folder
        return best

    def _rust(self, rel: str, imp: Import) -> str | None:
        here = posixpath.dirname(rel)
        if imp.kind == "mod":
            stem = posixpath.basename(rel).rsplit(".", 1)[0]
            base = here if stem in ("mod", "lib", "main") else posixpath.join(here, stem)
            for c in (f"{base}/{imp.module}.rs", f"{base}/{imp.module}/mod.rs"):
                if posixpath.normpath(c) in self.files:
                    return posixpath.normpath(c)
            return None
        path = imp.module.split("{", 1)[0].strip(":")
        parts = [p for p in path.split("::") if p]
        if not parts:
            return None
        if parts[0] == "crate":
            base = _crate_root(rel)
            parts = parts[1:]
        elif parts[0] == "super":
            base = posixpath.dirname(here) if here else here
            parts = parts[1:]
        elif parts[0] == "self":
            base = here
            parts = parts[1:]
        else:
            return None  # another crate
        while parts:
            stem = posixpath.join(base, *parts)
            for c in (f"{stem}.rs", f"{stem}/mod.rs"):
                if posixpath.normpath(c) in self.files:
                    return posixpath.normpath(c)
            parts = parts[:-1]
        return None

    def _java(self, name: str) -> str | None:
        parts = name.removesuffix(".*").split(".")
        if name.endswith(".*"):
            folder = "/".join(parts)
            return next(
                (d for d in sorted(self.dirs) if d == folder or d.endswith("/" + folder)), None
            )
        while len(parts) > 1:
            suffix = "/".join(parts) + ".java"
            for f in sorted(self.files):
                if f == suffix or f.endswith("/" + suffix):
                    return f
            parts = parts[:-1]  # a static import names a member of the class
        return None


def _crate_root(rel: str) -> str:
    """The folder of the crate root a Rust file belongs to: the nearest
    ``src`` folder above it, else its own folder."""
    parts = rel.split("/")[:-1]
    for i in range(len(parts), 0, -1):
        if parts[i - 1] == "src":
            return "/".join(parts[:i])
    return "/".join(parts)


def _distance(a: str, b: str) -> int:
    pa, pb = a.split("/")[:-1], b.split("/")[:-1]
    common = 0
    for x, y in zip(pa, pb, strict=False):
        if x != y:
            break
        common += 1
    return len(pa) + len(pb) - 2 * common
