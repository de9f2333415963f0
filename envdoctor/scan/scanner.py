"""The trust_remote_code scanner: model-loading calls, found by what their names resolve to.

A *site* is a call of ``from_pretrained`` on a transformers ``Auto*`` class, or of a vLLM
entry point that takes the flag (``vllm.LLM``, ``vllm.EngineArgs``,
``vllm.config.ModelConfig``). Names are resolved with libcst's ``QualifiedNameProvider``,
as Python binds them: aliases, function-local imports, submodule and relative imports, and
names assigned a loader alone (``X = AutoTokenizer``, see ``scan_sites._SiteFinder``); a
local class that merely shares a name is not transformers, and text in strings, comments
and docstrings is never a call.

Parsing with libcst is slow (about 1 MB/s) and resolving names costs several times more,
so a byte filter first drops the files that cannot hold a site, and CPython's ``ast`` then
tells which files and statements libcst needs to see (:mod:`envdoctor.scan.prune`): one
``ast`` parse per file that passes the filter bounds it (:mod:`envdoctor.untrusted`), reads
its re-exports and tells whether any call in it can be a site; libcst sees only the files
with such a call, pruned to the statements that matter. The libcst part lives in
:mod:`envdoctor.scan.sites`, imported only when a file is parsed. The
byte filter also runs on remote hosts inside the probe (:mod:`envdoctor.probe.host.scan.sources`);
:data:`FILTER_PATTERNS` is the one place its patterns live.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envdoctor.probe.host.core import decode_source
from envdoctor.probe.host.scan.sources import bytes_might_hold_site, compile_site_filter
from envdoctor.scan.exports import (
    ExportTable as ExportTable,  # re-exported: callers import it from here
)
from envdoctor.scan.exports import exports_of_source, exports_of_tree
from envdoctor.scan.exports import module_of_relative_path as module_of_relative_path
from envdoctor.scan.exports import resolve_relative as resolve_relative
from envdoctor.scan.loaders import (
    LOADER_METHODS,
    VLLM_NAMES,
    ScanError,
    Site,
)
from envdoctor.scan.prune import candidate_names
from envdoctor.untrusted import parsed_source_problem

if TYPE_CHECKING:
    from concurrent.futures import Executor

def _referenced(literal: str, prefix: str = "") -> tuple[tuple[tuple[str, str], ...], ...]:
    """Filter groups for a name ending in `literal` (``prefix`` matches what may come before
    it, as a regex) where Python code can bind or reach it: after a dot, on an import line,
    or ending an item of a parenthesised import list (followed by ``,``, ``)``, ``\\``, the
    line end or ``as``; the name may also be elsewhere on that line, which passes a few more
    files than "alone on the line" would). One group each, every regex starting with a
    literal: a pattern that starts with ``^`` or an alternation is tried at every byte,
    several times slower over a library where the name is a common word (``VLLM``)."""
    name = prefix + literal
    # `LLM` must start its word (not VLLM); `\w*EngineArgs` may have any word before it.
    start = "" if prefix else rf"(?<!\w{literal})"
    return (
        ((literal, r"\.\s*" + name + r"\b"),),
        ((literal, r"import\b[^\n]*\b" + name + r"\b"),),
        ((literal, literal + start + r"(?=[ \t]*(?:,|\)|\\|$|as\b))"),),
    )


_AUTO = r"(?:TF|Flax)?Auto[A-Z]\w*"
#: ``= AutoX`` or ``= module.AutoX`` ending the value (an alias, not a call or attribute of it).
#: The match starts at the ``=`` and looks back at the character before it (not ``==``,
#: ``!=``, ``<=``, ``>=``): a pattern that starts with a lookbehind is tried at every byte,
#: one that starts with a literal only where the literal is, five times faster.
_ALIAS_OF_AUTO = r"=(?<![=!<>]=)[\s(\\]*(?:\w+\s*\.\s*)*" + _AUTO + r"(?!\w)(?![ \t]*[.(\[])"

#: The byte filter: a file may hold a site when every [anchor, regex] of some group matches
#: on a code line. QualifiedNameProvider resolves only through imports and attributes, and
#: the scanner through simple aliases, so a site reads ``AutoX.from_pretrained`` (after a
#: module or not), or the file imports ``AutoX as Y`` or assigns ``Y = AutoX`` (or
#: ``Y = module.AutoX``) and calls ``Y.from_pretrained``; a vLLM call needs its class name
#: imported or reached as an attribute (an alias's value names it too). So the filtered scan
#: finds exactly what parsing every file finds, except a comment placed between a class and
#: ``.from_pretrained`` (never seen).
FILTER_PATTERNS: tuple[tuple[tuple[str, str], ...], ...] = tuple(
    group
    for method in ("from_pretrained", "from_config")
    for group in (
        ((method, _AUTO + r"[\s)\\]*\.\s*" + method + r"\b"),),
        ((method, r"\.\s*" + method + r"\b"), (" as", _AUTO + r"\s+as\s+\w")),
        ((method, r"\.\s*" + method + r"\b"), ("Auto", _ALIAS_OF_AUTO)),
    )
) + _referenced("LLM") + _referenced("EngineArgs", r"\w*") + _referenced("ModelConfig")
_COMPILED_FILTER = compile_site_filter(FILTER_PATTERNS)

_LOADER_NAME = r"(?:" + _AUTO + r"|LLM|\w*EngineArgs|ModelConfig)"
#: The second byte filter: files that import a loader name (on an import line, or alone on a
#: line of a parenthesised import list) may re-export it to the rest of their package; ``ast``
#: reads their imports (see :mod:`envdoctor.scan.exports`).
#: Both patterns start with the literal ``import`` (a pattern that starts otherwise is tried
#: at every byte of every file, ten times slower over a whole library).
EXPORT_PATTERNS: tuple[tuple[tuple[str, str], ...], ...] = (
    (("import", r"import\b[^\n;]*\b" + _LOADER_NAME + r"\b"),),
    (("import", r"import[ \t]*\([^)]*\b" + _LOADER_NAME + r"\b"),),
)
_COMPILED_EXPORT_FILTER = compile_site_filter(EXPORT_PATTERNS)


def might_contain_site(data: bytes) -> bool:
    """The cheap byte filter: False means the file certainly holds no site."""
    return bytes_might_hold_site(data, _COMPILED_FILTER)


def might_export_loader(data: bytes) -> bool:
    """False means the file certainly binds no loader name its package could re-export."""
    return bytes_might_hold_site(data, _COMPILED_EXPORT_FILTER)


def filter_args(patterns: tuple[tuple[tuple[str, str], ...], ...] = FILTER_PATTERNS) -> list[list[list[str]]]:
    """The filter's patterns as JSON, for the probe section that runs it on a host."""
    return [[list(pair) for pair in group] for group in patterns]


@dataclass(frozen=True)
class ScanReport:
    sites: tuple[Site, ...] = ()
    errors: tuple[ScanError, ...] = ()
    #: Files looked at, their total size, and how many passed the byte filter to be parsed.
    files: int = 0
    bytes: int = 0
    parsed: int = 0
    #: What the scanned modules re-export (the generic patch resolves names with it too).
    exports: ExportTable = field(default_factory=ExportTable, compare=False)

    @property
    def gaps(self) -> tuple[Site, ...]:
        return tuple(s for s in self.sites if s.is_gap)

    def to_json(self) -> dict[str, Any]:
        return {"sites": [s.to_json() for s in self.sites], "errors": [e.to_json() for e in self.errors]}


def scan_source(
    source: bytes, path: str, *, package: str | None = None, shortcuts: bool = True,
    exports: ExportTable | None = None,
) -> tuple[list[Site], ScanError | None]:
    """The sites in one file's bytes; an unreadable file is an error value, never an exception.

    ``shortcuts=False`` resolves names in the whole original file: much slower, the same
    findings; the reference the tests and the benchmark compare against.
    """
    text, problem = decode_source(source)
    if text is None:
        return [], ScanError(path, problem)
    # libcst takes ~150 ms to import: only runs that parse a file pay for it.
    from envdoctor.scan.sites import sites_in_text

    return sites_in_text(source, text, path, package=package, shortcuts=shortcuts, exports=exports)


def package_of_relative_path(relpath: str) -> str | None:
    """The package of a file given by its path under site-packages (as RECORD lists it)."""
    parent = os.path.dirname(relpath.replace(os.sep, "/"))
    return parent.replace("/", ".") or None


def package_of_file(path: Path, root: Path | None = None) -> str | None:
    """The dotted package a file belongs to (see :func:`_package_of_folder`)."""
    return _package_of_folder(str(path.resolve().parent), str(root.resolve()) if root is not None else None)


@functools.lru_cache(maxsize=4096)
def _package_of_folder(folder: str, root: str | None) -> str | None:
    """Below a ``site-packages`` folder, every folder up to it (namespace packages, such as
    ``sglang/srt``, have no ``__init__.py``); elsewhere the folders inside the scanned root
    and, above it, those with an ``__init__.py``."""
    chain = [Path(folder), *Path(folder).parents]
    for index, ancestor in enumerate(chain):
        if ancestor.name in ("site-packages", "dist-packages"):
            names = [c.name for c in reversed(chain[:index])]
            return ".".join(names) if all(n.isidentifier() for n in names) and names else None
    inside = Path(root) if root is not None else None
    parts: list[str] = []
    current = Path(folder)
    while current.parent != current and current.name.isidentifier() and (
        (current / "__init__.py").is_file() or (inside is not None and inside in current.parents)
    ):
        parts.insert(0, current.name)
        current = current.parent
    return ".".join(parts) or None


def module_of_file(path: Path, root: Path | None = None) -> tuple[str, str | None]:
    """(module, package) of a file, named as :func:`package_of_file` names its package."""
    package = package_of_file(path, root)
    stem = path.name.rsplit(".", 1)[0]
    if stem == "__init__":
        return package or "", package
    return f"{package}.{stem}" if package else stem, package


@dataclass(frozen=True)
class _Survey:
    """What reading one file told (phase 1): its size, whether libcst must see it, what it exports."""

    abspath: str
    relpath: str
    size: int
    parse: bool
    module: str
    package: str | None
    exports: tuple[tuple[str, str], ...]
    error: ScanError | None = None


def _survey_file(task: tuple[str, str, str | None, bool, bool]) -> _Survey:
    """Worker: read one file, run both byte filters, read its exports with ``ast``.

    With ``shortcuts``, a file that passes the site filter is parsed with ``ast`` here, once
    for both questions: what it exports, and whether any call in it could be a site at all
    (:func:`envdoctor.scan.prune.candidate_names` without the package's re-exports, so a
    superset); most files that pass the byte filter have none and never reach phase 2. A
    file that ``ast`` cannot read or that fails the bounds of :mod:`envdoctor.untrusted`
    still goes on, to be reported (or parsed by libcst) as before.
    """
    abspath, relpath, root, use_filter, shortcuts = task
    try:
        data = Path(abspath).read_bytes()
    except OSError as exc:
        return _Survey(abspath, relpath, 0, False, "", None, (), ScanError(relpath, f"unreadable: {exc.strerror}"))
    # A file Python cannot decode is reported as an error whether or not it passes the filter.
    site = not use_filter or might_contain_site(data)
    text = decode_source(data)[0]
    parse = site or text is None
    export = not use_filter or might_export_loader(data)
    if not (parse or export):
        return _Survey(abspath, relpath, len(data), False, "", None, ())  # most files: no path lookups
    module, package = module_of_file(Path(abspath), Path(root) if root else None)
    tree = None
    if site and text is not None and shortcuts:
        problem, tree, nodes = parsed_source_problem(text)
        if problem is None and tree is not None and not candidate_names(tree, LOADER_METHODS, VLLM_NAMES,
                                                                        nodes=nodes):
            parse = False  # no call can resolve to a loader, whatever the package re-exports
    if not export:
        exports: dict[str, str] = {}
    elif tree is not None:
        exports = exports_of_tree(tree, module, package)
    else:
        exports = exports_of_source(data, module, package)
    return _Survey(abspath, relpath, len(data), parse, module, package, tuple(sorted(exports.items())))


@dataclass(frozen=True)
class _FileResult:
    sites: tuple[Site, ...]
    error: ScanError | None
    size: int
    parsed: bool


def _scan_file(task: tuple[str, str, str | None, bool, ExportTable]) -> _FileResult:
    """Worker: parse one file that passed the filter (module-level so worker processes can run it)."""
    abspath, relpath, package, shortcuts, exports = task
    try:
        data = Path(abspath).read_bytes()
    except OSError as exc:
        return _FileResult((), ScanError(relpath, f"unreadable: {exc.strerror}"), 0, False)
    sites, error = scan_source(data, relpath, package=package, shortcuts=shortcuts, exports=exports)
    return _FileResult(tuple(sites), error, len(data), True)


@dataclass
class TrustRemoteCodeScanner:
    """Scans files and folders for model-loading calls.

    Two passes: every file is read once and run through the byte filters (the files that
    import a loader name also tell, with ``ast``, what they re-export, and those that pass
    the site filter whether a call in them can be a site, see :func:`_survey_file`); then
    libcst parses the files that may hold a site, resolving names across the scanned modules.
    ``jobs`` > 1 runs both passes in that many worker processes (libcst is CPU-bound).
    ``use_filter=False`` reads every file past the byte filter, and ``shortcuts=False``
    resolves names in every whole file with libcst (see :func:`scan_source`): slower, with
    the same findings; kept for the tests and the benchmark that prove it.
    """

    jobs: int = 1
    use_filter: bool = True
    shortcuts: bool = True
    exclude_dirs: frozenset[str] = field(default_factory=lambda: frozenset({"__pycache__", ".git", ".tox", ".venv", "node_modules"}))

    def python_files(self, root: Path) -> Iterator[tuple[str, str]]:
        """(absolute path, path relative to the scanned root) of each .py file, sorted."""
        if root.is_file():
            yield str(root), root.name
            return
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in self.exclude_dirs)
            for name in sorted(names):
                if name.endswith(".py"):
                    full = os.path.join(folder, name)
                    yield full, os.path.relpath(full, root)

    def scan(self, paths: Iterable[str | os.PathLike[str]]) -> ScanReport:
        tasks = []
        for path in paths:
            root = Path(path)
            scope = None if root.is_file() else str(root)
            tasks.extend((a, r, scope, self.use_filter, self.shortcuts) for a, r in self.python_files(root))
        with self._pool(len(tasks)) as pool:
            surveys = list(self._map(pool, _survey_file, tasks))
            exports = ExportTable.build({s.module: dict(s.exports) for s in surveys if s.exports})
            parse = [(s.abspath, s.relpath, s.package, self.shortcuts, exports)
                     for s in surveys if s.parse and s.error is None]
            results = list(self._map(pool, _scan_file, parse))
        return replace(self._collect(surveys, results), exports=exports)

    def _pool(self, count: int) -> Any:
        if self.jobs <= 1 or count < 2:
            return contextlib.nullcontext(None)
        from concurrent.futures import ProcessPoolExecutor  # (multiprocessing: 15 ms of start-up)

        return ProcessPoolExecutor(max_workers=self.jobs)

    def _map(self, pool: Executor | None, func: Any, tasks: Sequence[Any]) -> Iterable[Any]:
        if pool is None:
            return map(func, tasks)
        # Small chunks: the few files that pass the filter cost nearly all the time, and
        # they cluster in folders, so big chunks would leave one worker with all of them.
        return list(pool.map(func, tasks, chunksize=max(1, min(16, len(tasks) // (self.jobs * 8)))))

    @staticmethod
    def _collect(surveys: Sequence[_Survey], results: Sequence[_FileResult]) -> ScanReport:
        sites: list[Site] = []
        errors: list[ScanError] = [s.error for s in surveys if s.error is not None]
        for result in results:
            sites.extend(result.sites)
            if result.error is not None:
                errors.append(result.error)
        sites.sort(key=lambda s: (s.path, s.line, s.column))
        errors.sort(key=lambda e: e.path)
        return ScanReport(tuple(sites), tuple(errors), len(surveys), sum(s.size for s in surveys), len(results))


#: Libraries whose dependents load models: their installed dependents are scanned by ``check``.
LOADER_LIBRARIES = ("transformers", "vllm", "sglang")
#: What one probe run may ship to the controller: the filter passes a few % of a library,
#: and the probe's whole output (base64 adds a third) must stay under the transport's
#: 64 MB cap, which other sections share.
MAX_SHIPPED_BYTES = 16 * 1024 * 1024


def sources_request(venv: str | None, extra: Sequence[str] = ()) -> dict[str, Any]:
    """Arguments of the probe section ``sources`` (see :mod:`envdoctor.probe.host.scan.sources`)."""
    return {
        "prefix": venv,
        "depends_on": list(LOADER_LIBRARIES),
        "imports": list(LOADER_LIBRARIES),
        "extra": list(extra),
        "patterns": filter_args(),
        "export_patterns": filter_args(EXPORT_PATTERNS),
        "max_total_bytes": MAX_SHIPPED_BYTES,
    }
