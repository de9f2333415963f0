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
tells which files and statements libcst needs to see (:mod:`envdoctor.scan_prune`); the
libcst part lives in :mod:`envdoctor.scan_sites`, imported only when a file is parsed. The
byte filter also runs on remote hosts inside the probe (:mod:`envdoctor.probe.sources`);
:data:`FILTER_PATTERNS` is the one place its patterns live.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envdoctor.probe.sources import compile_site_filter, bytes_are_utf8, bytes_might_hold_site

# States of a site, as the JSON contract names them.
OK, EXPLICIT_FALSE, PARAMETERIZED, KWARGS, MISSING = "ok", "explicit-false", "parameterized", "kwargs", "missing"
STATES = (MISSING, EXPLICIT_FALSE, PARAMETERIZED, KWARGS, OK)
#: States that are a gap: the call will not pass trust_remote_code=True.
GAPS = frozenset({MISSING, EXPLICIT_FALSE})

KEYWORD = "trust_remote_code"

_AUTO_CLASS = re.compile(r"^(?:TF|Flax)?Auto[A-Z]\w*$")

#: vLLM entry points, by every module path they are importable from -> the name we report.
VLLM_CALLEES: dict[str, str] = {
    "vllm.LLM": "vllm.LLM",
    "vllm.entrypoints.llm.LLM": "vllm.LLM",
    "vllm.EngineArgs": "vllm.EngineArgs",
    "vllm.engine.arg_utils.EngineArgs": "vllm.EngineArgs",
    "vllm.AsyncEngineArgs": "vllm.AsyncEngineArgs",
    "vllm.engine.arg_utils.AsyncEngineArgs": "vllm.AsyncEngineArgs",
    "vllm.config.ModelConfig": "vllm.config.ModelConfig",
    "vllm.config.model.ModelConfig": "vllm.config.ModelConfig",
}


def _referenced(name: str) -> str:
    """A regex for `name` where Python code can bind or reach it: after a dot, on an import
    line, or alone at the start of a line (a name in a parenthesised import list)."""
    return rf"(?:\.\s*|\bimport\b[^\n]*\b|^[ \t]*(?={name}[ \t]*(?:,|\)|\\|$|as\b))){name}\b"


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
FILTER_PATTERNS: tuple[tuple[tuple[str, str], ...], ...] = (
    (("from_pretrained", _AUTO + r"[\s)\\]*\.\s*from_pretrained\b"),),
    (("from_pretrained", r"\.\s*from_pretrained\b"), (" as", _AUTO + r"\s+as\s+\w")),
    (("from_pretrained", r"\.\s*from_pretrained\b"), ("Auto", _ALIAS_OF_AUTO)),
    (("LLM", _referenced("LLM")),),
    (("EngineArgs", _referenced(r"\w*EngineArgs")),),
    (("ModelConfig", _referenced("ModelConfig")),),
)
_COMPILED_FILTER = compile_site_filter(FILTER_PATTERNS)


def might_contain_site(data: bytes) -> bool:
    """The cheap byte filter: False means the file certainly holds no site."""
    return bytes_might_hold_site(data, _COMPILED_FILTER)


def filter_args() -> list[list[list[str]]]:
    """The filter's patterns as JSON, for the probe section that runs it on a host."""
    return [[list(pair) for pair in group] for group in FILTER_PATTERNS]


@dataclass(frozen=True)
class Site:
    """One model-loading call and whether it passes trust_remote_code=True."""

    path: str
    line: int
    column: int
    callee: str
    state: str

    @property
    def is_gap(self) -> bool:
        return self.state in GAPS

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "column": self.column, "callee": self.callee, "state": self.state}


@dataclass(frozen=True)
class ScanError:
    """A file that could not be scanned (not UTF-8, does not parse, unreadable)."""

    path: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


@dataclass(frozen=True)
class ScanReport:
    sites: tuple[Site, ...] = ()
    errors: tuple[ScanError, ...] = ()
    #: Files looked at, their total size, and how many passed the byte filter to be parsed.
    files: int = 0
    bytes: int = 0
    parsed: int = 0

    @property
    def gaps(self) -> tuple[Site, ...]:
        return tuple(s for s in self.sites if s.is_gap)

    def to_json(self) -> dict[str, Any]:
        return {"sites": [s.to_json() for s in self.sites], "errors": [e.to_json() for e in self.errors]}


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


def canonical_callee(qualified: str) -> str | None:
    """The reported name of a resolved callee, or None when it is not a model loader."""
    if qualified in VLLM_CALLEES:
        return VLLM_CALLEES[qualified]
    parts = qualified.split(".")
    if len(parts) >= 3 and parts[0] == "transformers" and parts[-1] == "from_pretrained" and _AUTO_CLASS.match(parts[-2]):
        return f"transformers.{parts[-2]}.from_pretrained"
    return None


def scan_source(
    source: bytes, path: str, *, package: str | None = None, shortcuts: bool = True
) -> tuple[list[Site], ScanError | None]:
    """The sites in one file's bytes; an unreadable file is an error value, never an exception.

    ``shortcuts=False`` resolves names in the whole original file: much slower, the same
    findings; the reference the tests and the benchmark compare against.
    """
    try:
        text = source.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [], ScanError(path, f"not UTF-8 text (byte {exc.start})")
    # libcst takes ~150 ms to import: only runs that parse a file pay for it.
    from envdoctor.scan_sites import sites_in_text

    return sites_in_text(source, text, path, package=package, shortcuts=shortcuts)


def package_of_relative_path(relpath: str) -> str | None:
    """The package of a file given by its path under site-packages (as RECORD lists it)."""
    parent = os.path.dirname(relpath.replace(os.sep, "/"))
    return parent.replace("/", ".") or None


def package_of_file(path: Path) -> str | None:
    """The dotted package a file belongs to, found by walking up the __init__.py files."""
    parts: list[str] = []
    folder = path.resolve().parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts) or None


@dataclass(frozen=True)
class _FileResult:
    sites: tuple[Site, ...]
    error: ScanError | None
    size: int
    parsed: bool


def _scan_file(task: tuple[str, str, bool, bool]) -> _FileResult:
    """Worker: read, filter and parse one file (module-level so worker processes can run it)."""
    abspath, relpath, use_filter, shortcuts = task
    try:
        data = Path(abspath).read_bytes()
    except OSError as exc:
        return _FileResult((), ScanError(relpath, f"unreadable: {exc.strerror}"), 0, False)
    # A file that is not UTF-8 is reported as an error whether or not it passes the filter.
    if use_filter and not might_contain_site(data) and bytes_are_utf8(data):
        return _FileResult((), None, len(data), False)
    sites, error = scan_source(data, relpath, package=package_of_file(Path(abspath)), shortcuts=shortcuts)
    return _FileResult(tuple(sites), error, len(data), True)


@dataclass
class TrustRemoteCodeScanner:
    """Scans files and folders for model-loading calls.

    ``jobs`` > 1 parses in that many worker processes (libcst is CPU-bound).
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
        tasks = [(a, r, self.use_filter, self.shortcuts) for p in paths for a, r in self.python_files(Path(p))]
        return self._collect(self._run(tasks))

    def _run(self, tasks: Sequence[tuple[str, str, bool, bool]]) -> Iterable[_FileResult]:
        if self.jobs <= 1 or len(tasks) < 2:
            return map(_scan_file, tasks)
        with ProcessPoolExecutor(max_workers=self.jobs) as pool:
            # Small chunks: the few files that pass the filter cost nearly all the time, and
            # they cluster in folders, so big chunks would leave one worker with all of them.
            return list(pool.map(_scan_file, tasks, chunksize=max(1, min(16, len(tasks) // (self.jobs * 8)))))

    @staticmethod
    def _collect(results: Iterable[_FileResult]) -> ScanReport:
        sites: list[Site] = []
        errors: list[ScanError] = []
        files = size = parsed = 0
        for result in results:
            files += 1
            size += result.size
            parsed += result.parsed
            sites.extend(result.sites)
            if result.error is not None:
                errors.append(result.error)
        sites.sort(key=lambda s: (s.path, s.line, s.column))
        return ScanReport(tuple(sites), tuple(errors), files, size, parsed)


#: Libraries whose dependents load models: their installed dependents are scanned by ``check``.
LOADER_LIBRARIES = ("transformers", "vllm", "sglang")
#: What one probe run may ship to the controller: the filter passes a few % of a library,
#: and the probe's whole output (base64 adds a third) must stay under the transport's
#: 64 MB cap, which other sections share.
MAX_SHIPPED_BYTES = 16 * 1024 * 1024


def sources_request(venv: str | None, extra: Sequence[str] = ()) -> dict[str, Any]:
    """Arguments of the probe section ``sources`` (see :mod:`envdoctor.probe.sources`)."""
    return {
        "prefix": venv,
        "depends_on": list(LOADER_LIBRARIES),
        "extra": list(extra),
        "patterns": filter_args(),
        "max_total_bytes": MAX_SHIPPED_BYTES,
    }
