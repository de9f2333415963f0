"""Names a package re-exports, so the scanner follows them across the modules it scanned.

``pkg/common.py`` may do ``from transformers import AutoConfig`` and ``pkg/model.py``
``from .common import AutoConfig``: libcst's QualifiedNameProvider names the callee
``pkg.common.AutoConfig.from_pretrained``, which is no loader until the scanner knows what
``pkg.common`` binds. This module reads, with CPython's ``ast`` (cheap), the module-level
imports and simple aliases of the files a byte filter picks (those that import a loader
name), and :func:`resolve_export` follows them, hop by hop, inside one distribution.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

#: Statements whose bodies still run at import time (a def or class body does not bind module names).
_BLOCKS = (ast.If, ast.Try, ast.With)


def resolve_relative(name: str, package: str | None) -> str | None:
    """``..auto.AutoModel`` inside package ``transformers.models.bert`` -> absolute; None if unknown."""
    if not name.startswith("."):
        return name
    if not package:
        return None
    rest = name.lstrip(".")
    up = len(name) - len(rest) - 1
    parts = package.split(".")
    if up >= len(parts):
        return None
    base = parts[: len(parts) - up]
    return ".".join(base + ([rest] if rest else []))


def module_of_relative_path(relpath: str) -> tuple[str, str | None]:
    """(module, package) of a file given by its path under the site root: ``a/b/__init__.py`` is
    module ``a.b`` in package ``a.b``, ``a/b/c.py`` module ``a.b.c`` in package ``a.b``."""
    parts = relpath.replace("\\", "/").split("/")
    folders, stem = parts[:-1], parts[-1].rsplit(".", 1)[0]
    package = ".".join(folders) or None
    if stem == "__init__":
        return package or "", package
    return ".".join([*folders, stem]), package


@dataclass(frozen=True)
class ExportTable:
    """Module -> {name it binds at module level -> the absolute name it stands for}.

    Frozen and hashable (it travels to worker processes and is part of a cache key).
    """

    entries: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()

    @classmethod
    def build(cls, modules: Mapping[str, Mapping[str, str]]) -> ExportTable:
        return cls(tuple(sorted((m, tuple(sorted(b.items()))) for m, b in modules.items() if b)))

    @cached_property
    def table(self) -> dict[str, dict[str, str]]:
        return {module: dict(bindings) for module, bindings in self.entries}

    def __bool__(self) -> bool:
        return bool(self.entries)


def _statements(body: list[ast.stmt]):
    for node in body:
        yield node
        if isinstance(node, _BLOCKS):
            for field in ("body", "orelse", "finalbody"):
                yield from _statements(getattr(node, field, []) or [])
            for handler in getattr(node, "handlers", []) or []:
                yield from _statements(handler.body)


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def exports_of_source(data: bytes, module: str, package: str | None) -> dict[str, str]:
    """The names module ``module`` binds by import (or as an alias of an import), resolved to
    absolute names; {} for a file ``ast`` cannot read (the scanner reports it elsewhere)."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    return exports_of_tree(tree, module, package)


def exports_of_tree(tree: ast.Module, module: str, package: str | None) -> dict[str, str]:
    """:func:`exports_of_source` of a file ``ast`` has parsed already."""
    bound: dict[str, str] = {}
    for node in _statements(tree.body):
        if isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name == "*":
                    continue
                joined = f"{base}{alias.name}" if base.endswith(".") or not base else f"{base}.{alias.name}"
                absolute = resolve_relative(joined, package)
                if absolute:
                    bound[alias.asname or alias.name] = absolute
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _dotted(node.value)
            head = value.split(".", 1) if value else None
            if head and head[0] in bound:
                bound[node.targets[0].id] = ".".join([bound[head[0]], *head[1:]])
            else:
                bound.pop(node.targets[0].id, None)  # rebound to something else
    return {name: value for name, value in bound.items() if value != f"{module}.{name}"}


def resolve_export(name: str, exports: ExportTable | None, *, depth: int = 8) -> str:
    """``name`` with re-exports inside the scanned distribution followed to what they bind.

    ``pkg.common.AutoConfig`` where ``pkg/common.py`` does ``from transformers import
    AutoConfig`` -> ``transformers.AutoConfig``; through ``__init__`` files and several hops
    (bounded, so an import cycle ends).
    """
    if not exports:
        return name
    table = exports.table
    for _ in range(depth):
        parts = name.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            bound = table.get(".".join(parts[:cut]), {}).get(parts[cut])
            if bound is not None:
                name = ".".join([bound, *parts[cut + 1:]])
                break
        else:
            return name
    return name
