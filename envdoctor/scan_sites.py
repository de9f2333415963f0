"""The libcst side of the scanner (:mod:`envdoctor.scan`): parse, resolve names, find sites.

A module of its own so that importing ``envdoctor.scan`` (every ``check`` does, for the
byte filter and the ``sources`` request) does not import libcst, which takes ~150 ms; it
is imported when a file that passed the byte filter is parsed.
"""

from __future__ import annotations

import ast

import libcst as cst
import libcst.helpers
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider

from envdoctor.scan import (
    EXPLICIT_FALSE,
    KEYWORD,
    KWARGS,
    MISSING,
    OK,
    PARAMETERIZED,
    VLLM_CALLEES,
    ScanError,
    Site,
    canonical_callee,
    resolve_relative,
)
from envdoctor.scan_prune import candidate_names, prune_source

#: Last names of the vLLM entry points, for the quick look before names are resolved.
_VLLM_NAMES = frozenset(name.rsplit(".", 1)[1] for name in VLLM_CALLEES)


def classify(call: cst.Call) -> str:
    """The site's state, from its arguments alone."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == KEYWORD:
            value = arg.value
            if isinstance(value, cst.Name) and value.value == "True":
                return OK
            if isinstance(value, cst.Name) and value.value == "False":
                return EXPLICIT_FALSE
            return PARAMETERIZED
    if any(arg.star == "**" for arg in call.args):
        return KWARGS  # the dict may hold the keyword; only running the code would tell
    return MISSING


class _SiteFinder(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider)

    def __init__(self, path: str, package: str | None) -> None:
        super().__init__()
        self.path = path
        self.package = package
        self.sites: list[Site] = []

    def visit_Call(self, node: cst.Call) -> None:
        callee = self._callee(node)
        if callee is None:
            return
        start = self.get_metadata(PositionProvider, node).start
        self.sites.append(Site(self.path, start.line, start.column, callee, classify(node)))

    def _callee(self, node: cst.Call) -> str | None:
        names = self.get_metadata(QualifiedNameProvider, node.func, set())
        found = set()
        for qualified in names:
            absolute = resolve_relative(qualified.name, self.package)
            callee = canonical_callee(absolute) if absolute else None
            if callee:
                found.add(callee)
        # Conditional imports can give one name two meanings; report it once, stably.
        return min(found) if found else None


class _CandidateFinder(cst.CSTVisitor):
    """Whether a module has a call that name resolution could turn into a site.

    Resolving names (scopes, then qualified names, then positions) costs several times the
    parse, so it only runs when some call's leftmost name is bound by an import and the call
    is ``.from_pretrained`` or names a vLLM entry point. QualifiedNameProvider resolves
    only through imports, so a call without that shape can never resolve to a site.
    """

    def __init__(self) -> None:
        super().__init__()
        #: Name bound by an import -> the last part of what it imports.
        self.imported: dict[str, str] = {}
        self.calls: list[cst.BaseExpression] = []

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            dotted = cst.helpers.get_full_name_for_node(alias.name) or ""
            bound = alias.asname.name if alias.asname is not None else None
            if isinstance(bound, cst.Name):
                self.imported[bound.value] = dotted.rsplit(".", 1)[-1]
            else:
                self.imported[dotted.split(".")[0]] = dotted.split(".")[0]

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:
            name = cst.helpers.get_full_name_for_node(alias.name) or ""
            bound = alias.asname.name if alias.asname is not None else alias.name
            if isinstance(bound, cst.Name):
                self.imported[bound.value] = name

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node.func)

    def is_candidate(self, func: cst.BaseExpression) -> bool:
        leftmost = func
        while isinstance(leftmost, cst.Attribute):
            leftmost = leftmost.value
        if not isinstance(leftmost, cst.Name) or leftmost.value not in self.imported:
            return False
        if isinstance(func, cst.Attribute):
            return func.attr.value == "from_pretrained" or func.attr.value in _VLLM_NAMES
        return self.imported[leftmost.value] in _VLLM_NAMES


def has_candidate_calls(module: cst.Module) -> bool:
    finder = _CandidateFinder()
    module.visit(finder)
    return any(finder.is_candidate(func) for func in finder.calls)


def find_sites(
    wrapper: MetadataWrapper, path: str, *, package: str | None = None, precheck: bool = True
) -> list[Site]:
    """Every model-loading call in a module, in source order.

    ``package`` is the dotted package the module lives in; without it, calls reached
    through relative imports cannot be resolved and are not reported. ``precheck`` skips
    name resolution when no call has the shape of a site (see :class:`_CandidateFinder`).
    """
    if precheck and not has_candidate_calls(wrapper.module):
        return []
    finder = _SiteFinder(path, package)
    wrapper.visit(finder)
    return sorted(finder.sites, key=lambda s: (s.line, s.column))


def _parse_error(path: str, exc: Exception) -> ScanError:
    if isinstance(exc, cst.ParserSyntaxError):
        return ScanError(path, f"does not parse: line {exc.raw_line}: {exc.message}")
    return ScanError(path, f"does not parse: {type(exc).__name__}: {exc}")


def parse_module(source: bytes, path: str) -> tuple[cst.Module | None, ScanError | None]:
    """libcst's module for `source`, or why there is none. Never raises."""
    try:
        source.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, ScanError(path, f"not UTF-8 text (byte {exc.start})")
    try:
        return cst.parse_module(source), None
    except Exception as exc:  # libcst has raised other types than ParserSyntaxError on odd input
        return None, _parse_error(path, exc)


_NO_CANDIDATES = object()


def _pruned_module(text: str) -> cst.Module | object | None:
    """The pruned module to resolve (see :mod:`envdoctor.scan_prune`), _NO_CANDIDATES when
    no call can be a site, or None when the shortcut does not apply (ast cannot read it)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # maybe syntax newer than this interpreter's: let libcst decide
    names = candidate_names(tree, {"from_pretrained"}, _VLLM_NAMES)
    if not names:
        return _NO_CANDIDATES
    pruned = prune_source(text, tree, names)
    if pruned is None:
        return None
    try:
        return cst.parse_module(pruned)
    except Exception:  # the pruning made something libcst rejects: fall back to the original
        return None


def sites_in_text(
    source: bytes, text: str, path: str, *, package: str | None, shortcuts: bool
) -> tuple[list[Site], ScanError | None]:
    """:func:`envdoctor.scan.scan_source` once ``source`` decoded as UTF-8 to ``text``."""
    pruned = _pruned_module(text) if shortcuts else None
    if pruned is _NO_CANDIDATES:
        return [], None
    if isinstance(pruned, cst.Module):
        try:
            return _resolve(pruned, path, package, precheck=True), None
        except Exception:  # the pruned tree upset name resolution: resolve the original instead
            pass
    module, error = parse_module(source, path)
    if module is None:
        return [], error
    try:
        return _resolve(module, path, package, precheck=shortcuts), None
    except Exception as exc:  # a metadata failure on one exotic file must not end the scan
        return [], ScanError(path, f"cannot resolve names: {type(exc).__name__}: {exc}")


def _resolve(module: cst.Module, path: str, package: str | None, *, precheck: bool) -> list[Site]:
    # No copy: nothing here changes the tree, and copying costs as much as parsing.
    return find_sites(MetadataWrapper(module, unsafe_skip_copy=True), path, package=package, precheck=precheck)
