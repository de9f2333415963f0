"""The libcst side of :mod:`envdoctor.modelfacts.code`: every import statement of a source file.

A module of its own so that importing ``modelfacts.code`` (every ``check`` does, through
``checks/models.py``) does not import libcst, which takes ~150 ms.
"""

from __future__ import annotations

import libcst as cst
import libcst.helpers
import libcst.metadata

from envdoctor.modelfacts.import_refs import CodeParseError, ImportRef
from envdoctor.untrusted import source_problem


class _ImportCollector(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (cst.metadata.PositionProvider,)

    def __init__(self, file: str) -> None:
        super().__init__()
        self.file = file
        self.found: list[ImportRef] = []
        self._try_depth = 0

    def visit_Try(self, node: cst.Try) -> None:
        self._try_depth += 1

    def leave_Try(self, original_node: cst.Try) -> None:
        self._try_depth -= 1

    def _line(self, node: cst.CSTNode) -> int:
        return self.get_metadata(cst.metadata.PositionProvider, node).start.line

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            module = cst.helpers.get_full_name_for_node(alias.name) or ""
            self.found.append(ImportRef(self.file, self._line(node), module, (), self._try_depth > 0, False))

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = cst.helpers.get_full_name_for_node(node.module) if node.module else ""
        names: tuple[str, ...] = ()
        if not isinstance(node.names, cst.ImportStar):
            names = tuple(cst.helpers.get_full_name_for_node(a.name) or "" for a in node.names)
        relative = bool(node.relative)
        self.found.append(ImportRef(self.file, self._line(node), module or "", names, self._try_depth > 0, relative))


def collect_imports(file: str, source: str) -> list[ImportRef]:
    """Every import statement of one source file, with its line."""
    problem = source_problem(source)  # a hostile file must not crash libcst (and the whole run)
    if problem:
        raise CodeParseError(f"{file}: {problem}")
    try:
        module = cst.parse_module(source)
        collector = _ImportCollector(file)
        cst.metadata.MetadataWrapper(module).visit(collector)
    except cst.ParserSyntaxError as exc:
        raise CodeParseError(f"{file}:{exc.raw_line}: not valid Python: {exc.message}") from None
    except (RecursionError, MemoryError) as exc:
        raise CodeParseError(f"{file}: too deeply nested to read ({type(exc).__name__})") from None
    return collector.found
