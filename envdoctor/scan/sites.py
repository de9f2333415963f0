"""The libcst side of the scanner (:mod:`envdoctor.scan.scanner`): parse, resolve names, find sites.

A module of its own so that importing ``envdoctor.scan.scanner`` (every ``check`` does, for the
byte filter and the ``sources`` request) does not import libcst, which takes ~150 ms; it
is imported when a file that passed the byte filter is parsed.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

import libcst as cst
import libcst.helpers
from libcst.metadata import (
    Assignment,
    MetadataWrapper,
    PositionProvider,
    QualifiedName,
    QualifiedNameProvider,
    ScopeProvider,
)

from envdoctor.probe.host.core import decode_source
from envdoctor.scan.exports import ExportTable, resolve_export, resolve_relative
from envdoctor.scan.not_loads import drop_non_loads
from envdoctor.scan.loaders import (
    EXPLICIT_FALSE,
    KEYWORD,
    KWARGS,
    LOADER_METHODS,
    MISSING,
    OK,
    PARAMETERIZED,
    VLLM_NAMES,
    ScanError,
    Site,
    canonical_callee,
)
from envdoctor.scan.prune import candidate_names, prune_source
from envdoctor.untrusted import parsed_source_problem

#: Last names of the vLLM entry points, for the quick look before names are resolved.
_VLLM_NAMES = VLLM_NAMES
#: Last attributes of a call that can be a site: ``X.from_pretrained``, ``vllm.LLM``.
_LOADER_ATTRIBUTES = _VLLM_NAMES | LOADER_METHODS


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
    """The sites of a module: calls whose callee resolves to a loader, directly or through
    a simple alias (``X = AutoTokenizer`` then ``X.from_pretrained(...)``).

    QualifiedNameProvider follows imports only; an alias is a name whose every assignment
    in the scope that binds it is ``name = <imported name or attribute of one>`` and every
    one of them resolves to a loader (``load_class = AutoModelForCausalLM`` in one branch,
    ``AutoModelForVision2Seq`` in another: the site reports the first name in sorted order).
    A name also bound otherwise (a parameter, a loop, an import, any other value) is not
    resolved. Names a module of the scanned distribution re-exports are followed through
    ``exports`` (see :mod:`envdoctor.scan.exports`).
    """

    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider, ScopeProvider)

    def __init__(self, path: str, package: str | None, exports: ExportTable | None = None) -> None:
        super().__init__()
        self.path = path
        self.package = package
        self.exports = exports
        self.sites: list[Site] = []
        #: Each site with the Call node it was found at (the identity a patch edits).
        self.nodes: list[tuple[Site, cst.Call]] = []
        #: Target of each ``name = a.b`` -> its value (nodes compare by identity).
        self._alias_values: dict[cst.Name, cst.BaseExpression] = {}
        #: Calls that did not resolve but might through an alias, with their leftmost name.
        self._pending: list[tuple[cst.Call, cst.Name]] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target if len(node.targets) == 1 else None
        if isinstance(target, cst.Name) and isinstance(node.value, (cst.Name, cst.Attribute)):
            self._alias_values[target] = node.value

    def visit_Call(self, node: cst.Call) -> None:
        callee = self._callee(node)
        if callee is not None:
            self._add(node, callee)
            return
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value not in _LOADER_ATTRIBUTES:
            return
        leftmost = func
        while isinstance(leftmost, cst.Attribute):
            leftmost = leftmost.value
        if isinstance(leftmost, cst.Name):
            self._pending.append((node, leftmost))  # an alias may be assigned after the call

    def leave_Module(self, original_node: cst.Module) -> None:
        aliased = {target.value for target in self._alias_values}
        for node, leftmost in self._pending:
            if leftmost.value in aliased:
                callee = self._alias_callee(node, leftmost)
                if callee is not None:
                    self._add(node, callee)

    def _add(self, node: cst.Call, callee: str) -> None:
        start = self.get_metadata(PositionProvider, node).start
        site = Site(self.path, start.line, start.column, callee, classify(node))
        self.sites.append(site)
        self.nodes.append((site, node))

    def _callee(self, node: cst.Call) -> str | None:
        return self._loader(self.get_metadata(QualifiedNameProvider, node.func, set()), "")

    def _loader(self, names: set[QualifiedName], suffix: str) -> str | None:
        found = set()
        for qualified in names:
            absolute = resolve_relative(qualified.name, self.package)
            callee = canonical_callee(absolute + suffix) if absolute else None
            if callee is None and absolute and self.exports:
                callee = canonical_callee(resolve_export(absolute + suffix, self.exports))
            if callee:
                found.add(callee)
        # Conditional imports can give one name two meanings; report it once, stably.
        return min(found) if found else None

    def _alias_callee(self, node: cst.Call, leftmost: cst.Name) -> str | None:
        """The loader `node` calls through the alias `leftmost`, or None (see the class doc)."""
        scope = self.get_metadata(ScopeProvider, leftmost, None)
        if scope is None:
            return None
        accesses = scope.accesses[leftmost.value]
        referents = [r for access in accesses if access.node is leftmost for r in access.referents]
        if not referents:
            return None
        # Every assignment in each scope that binds the name, not only the ones before the
        # call: in a loop or a function called later, any of them may be the one in force.
        bindings = {b for r in referents for b in r.scope.assignments[leftmost.value]}
        suffix = cst.helpers.get_full_name_for_node(node.func) or ""
        suffix = suffix[len(leftmost.value) :]
        callees = set()
        for binding in bindings:
            value = self._alias_values.get(binding.node) if isinstance(binding, Assignment) else None
            if value is None:
                return None
            callee = self._loader(self.get_metadata(QualifiedNameProvider, value, set()), suffix)
            if callee is None:
                return None
            callees.add(callee)
        return min(callees) if callees else None


class _CandidateFinder(cst.CSTVisitor):
    """Whether a module has a call that name resolution could turn into a site.

    Resolving names (scopes, then qualified names, then positions) costs several times the
    parse, so it only runs when some call's leftmost name is bound by an import (or by a
    simple alias of an imported name, see :class:`_SiteFinder`) and the call is
    ``.from_pretrained`` or names a vLLM entry point. QualifiedNameProvider resolves only
    through imports, so a call without that shape can never resolve to a site.
    """

    def __init__(self) -> None:
        super().__init__()
        #: Name bound by an import -> the last part of what it imports.
        self.imported: dict[str, str] = {}
        #: Name assigned alone from ``a`` or ``a.b.c`` -> (``a``, ``c`` or None), per assignment.
        self.aliases: dict[str, list[tuple[str, str | None]]] = {}
        self.calls: list[cst.BaseExpression] = []
        #: Names bound by an assignment (QualifiedNameProvider names them as themselves).
        self.assigned: set[str] = set()

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None and isinstance(node.target, cst.Name):
            self.assigned.add(node.target.value)

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

    def visit_Assign(self, node: cst.Assign) -> None:
        # A name bound by an assignment resolves to itself (`transformers =
        # pytest.importorskip("transformers")`, then `transformers.AutoModel.from_config(...)`).
        self.assigned.update(t.target.value for t in node.targets if isinstance(t.target, cst.Name))
        target = node.targets[0].target if len(node.targets) == 1 else None
        if not isinstance(target, cst.Name):
            return
        value = node.value
        last = value.attr.value if isinstance(value, cst.Attribute) else None
        while isinstance(value, cst.Attribute):
            value = value.value
        if isinstance(value, cst.Name):
            self.aliases.setdefault(target.value, []).append((value.value, last))

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node.func)

    def is_candidate(self, func: cst.BaseExpression) -> bool:
        leftmost = func
        while isinstance(leftmost, cst.Attribute):
            leftmost = leftmost.value
        if not isinstance(leftmost, cst.Name):
            return False
        if isinstance(func, cst.Attribute):
            if func.attr.value not in _LOADER_ATTRIBUTES:
                return False
            return leftmost.value in self.imported or leftmost.value in self.assigned or any(
                source in self.imported for source, _ in self.aliases.get(leftmost.value, ())
            )
        if leftmost.value in self.imported:
            return self.imported[leftmost.value] in _VLLM_NAMES
        return any(
            source in self.imported and (last or self.imported[source]) in _VLLM_NAMES
            for source, last in self.aliases.get(leftmost.value, ())
        )


def has_candidate_calls(module: cst.Module) -> bool:
    finder = _CandidateFinder()
    module.visit(finder)
    return any(finder.is_candidate(func) for func in finder.calls)


def find_sites(
    wrapper: MetadataWrapper, path: str, *, package: str | None = None, precheck: bool = True,
    exports: ExportTable | None = None,
) -> list[Site]:
    """Every model-loading call in a module, in source order.

    ``package`` is the dotted package the module lives in; without it, calls reached
    through relative imports cannot be resolved and are not reported. ``precheck`` skips
    name resolution when no call has the shape of a site (see :class:`_CandidateFinder`).
    """
    return [site for site, _ in site_nodes(wrapper, path, package=package, precheck=precheck, exports=exports)]


def site_nodes(
    wrapper: MetadataWrapper, path: str, *, package: str | None = None, precheck: bool = True,
    exports: ExportTable | None = None,
) -> list[tuple[Site, cst.Call]]:
    """:func:`find_sites` with the Call node of each site in ``wrapper.module``."""
    if precheck and not has_candidate_calls(wrapper.module):
        return []
    finder = _SiteFinder(path, package, exports)
    wrapper.visit(finder)
    return sorted(finder.nodes, key=lambda pair: (pair[0].line, pair[0].column))


def _parse_error(path: str, exc: Exception) -> ScanError:
    if isinstance(exc, cst.ParserSyntaxError):
        return ScanError(path, f"does not parse: line {exc.raw_line}: {exc.message}")
    return ScanError(path, f"does not parse: {type(exc).__name__}: {exc}")


def parse_module(source: bytes, path: str) -> tuple[cst.Module | None, ScanError | None]:
    """libcst's module for `source`, or why there is none. Never raises."""
    problem = decode_source(source)[1]
    if problem:
        return None, ScanError(path, problem)
    try:
        return cst.parse_module(source), None  # libcst decodes it as decode_source does
    except Exception as exc:  # libcst has raised other types than ParserSyntaxError on odd input
        return None, _parse_error(path, exc)


_NO_CANDIDATES = object()


_LOADER_PACKAGES = ("transformers", "vllm")


def _may_load(package: str | None, exports: ExportTable | None) -> Callable[[str], bool]:
    """Whether a callee, as an import names it, can resolve to a loader (see canonical_callee:
    every loader lives in transformers or vllm, directly or through the package's re-exports)."""

    def may_load(dotted: str) -> bool:
        absolute = resolve_relative(dotted, package)
        if absolute is None:
            return False  # a relative import with no known package never resolves (see _loader)
        return (absolute.split(".", 1)[0] in _LOADER_PACKAGES
                or resolve_export(absolute, exports).split(".", 1)[0] in _LOADER_PACKAGES)

    return may_load


def _pruned_module(
    text: str, package: str | None = None, exports: ExportTable | None = None, tree: ast.Module | None = None,
    nodes: list[ast.AST] | None = None,
) -> cst.Module | object | None:
    """The pruned module to resolve (see :mod:`envdoctor.scan.prune`), _NO_CANDIDATES when
    no call can be a site, or None when the shortcut does not apply (ast cannot read it).
    ``tree`` is ``ast``'s tree of ``text`` (and ``nodes`` all of its nodes) when the caller has it already."""
    if tree is None:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None  # maybe syntax newer than this interpreter's: let libcst decide
    names = candidate_names(tree, LOADER_METHODS, _VLLM_NAMES, _may_load(package, exports), nodes=nodes)
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
    source: bytes, text: str, path: str, *, package: str | None, shortcuts: bool,
    exports: ExportTable | None = None,
) -> tuple[list[Site], ScanError | None]:
    """:func:`envdoctor.scan.scanner.scan_source` once ``source`` decoded as UTF-8 to ``text``."""
    problem, tree, nodes = parsed_source_problem(text)  # libcst recurses per level: bound the nesting first
    if problem:
        return [], ScanError(path, problem)
    pruned = _pruned_module(text, package, exports, tree, nodes) if shortcuts and tree is not None else None
    if pruned is _NO_CANDIDATES:
        return [], None
    if isinstance(pruned, cst.Module):
        try:
            return _loads(_resolve(pruned, path, package, precheck=True, exports=exports), tree, text, package), None
        except Exception:  # the pruned tree upset name resolution: resolve the original instead
            pass
    module, error = parse_module(source, path)
    if module is None:
        return [], error
    try:
        found = _resolve(module, path, package, precheck=shortcuts, exports=exports)
    except Exception as exc:  # a metadata failure on one exotic file must not end the scan
        return [], ScanError(path, f"cannot resolve names: {type(exc).__name__}: {exc}")
    return _loads(found, tree, text, package), None


def _loads(sites: list[Site], tree: ast.Module | None, text: str, package: str | None) -> list[Site]:
    """The sites that load something: calls of a loader's name that load nothing are dropped
    (:mod:`envdoctor.scan.not_loads`, read from the whole module's ``ast``, never the pruned one)."""
    if tree is None or not sites:
        return sites
    try:
        return drop_non_loads(sites, tree, text, package)
    except RecursionError:  # nesting is bounded before parsing; should it still be too deep, keep every site
        return sites


def _resolve(
    module: cst.Module, path: str, package: str | None, *, precheck: bool, exports: ExportTable | None
) -> list[Site]:
    # No copy: nothing here changes the tree, and copying costs as much as parsing.
    return find_sites(MetadataWrapper(module, unsafe_skip_copy=True), path, package=package, precheck=precheck,
                      exports=exports)
