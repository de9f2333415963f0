"""What code.imports makes of the walk the drift section ran on the host (its ``imports``
part, see ``envdoctor/probe/host/drift/reach.py``): which missing modules stop the job, which
may, and which are only worth knowing.

Severity, by how surely the import runs (its class on the host):

- ``fail``: the entry itself cannot be started (``-m`` a module that is not there, a script
  that is not on the host), or a module imported on an unguarded path: at module level of a
  file the entry imports, through imports that are themselves unguarded;
- ``warn``: under a condition the files cannot decide (``if is_cuda():``), inside a function
  of the job's own files (it runs when the job calls it), and a module of the stage's first
  ``sys.path`` folder hiding an installed package;
- ``info`` (listed in details, never failing): under ``try/except ImportError`` (or
  ``ModuleNotFoundError``, ``Exception``), under ``if TYPE_CHECKING``, inside a function of
  an installed library (an optional feature's import).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envdoctor.engine.facts import canonicalize_name
from envdoctor.modelfacts.code import DISTRIBUTION_OF

FAIL, WARN, INFO = "fail", "warn", "info"

#: Import names whose distribution is named otherwise, beside those model code uses.
MORE_DISTRIBUTIONS: dict[str, str] = {
    "decord": "decord",
    "triton": "triton",
    "vllm_flash_attn": "vllm-flash-attn",
    "flashinfer": "flashinfer-python",
    "sgl_kernel": "sgl-kernel",
    "xformers": "xformers",
    "deep_gemm": "deep-gemm",
    "msgspec": "msgspec",
    "zmq": "pyzmq",
    "google.protobuf": "protobuf",
    "Crypto": "pycryptodome",
    "skimage": "scikit-image",
    "fitz": "PyMuPDF",
    "docx": "python-docx",
    "magic": "python-magic",
    "serial": "pyserial",
    "usb": "pyusb",
    "wandb": "wandb",
}


@dataclass(frozen=True)
class MissingImport:
    """An import whose module the environment lacks, with how surely it runs."""

    file: str
    line: int
    module: str
    missing: str
    klass: str
    severity: str
    importer: str | None
    #: The distribution that would provide it, and how that is known ("" when not known).
    provider: str = ""
    provider_note: str = ""
    #: For a missing submodule of an installed package: that package's distribution.
    incomplete: str = ""

    def sentence(self, prefix: str) -> str:
        where = f"{self.file}:{self.line}"
        if self.incomplete:
            return (f"{where} imports {self.module}, but the installed {self.incomplete} has no {self.missing} "
                    "(an incomplete or mismatched install)")
        lacks = f"{where} imports {self.missing if self.missing == self.module else self.module}, which {prefix} lacks"
        if self.provider:
            return f"{lacks} ({self.provider_note or 'provided by ' + self.provider})"
        return f"{lacks} (no installed distribution provides it)"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "module": self.module, "missing": self.missing,
                "class": self.klass, "severity": self.severity, "importer": self.importer,
                "provider": self.provider or None, "provider_note": self.provider_note or None,
                "incomplete": self.incomplete or None}


@dataclass
class ImportsVerdict:
    """Findings of one host, by severity, and the entries the walk started from."""

    findings: list[MissingImport] = field(default_factory=list)
    entry_problems: list[tuple[str, str]] = field(default_factory=list)  # (severity, sentence)
    shadows: list[Mapping[str, Any]] = field(default_factory=list)
    entries: list[Mapping[str, Any]] = field(default_factory=list)
    files: int = 0
    sites: int = 0
    counts: Mapping[str, int] = field(default_factory=dict)

    def of(self, severity: str) -> list[MissingImport]:
        return [f for f in self.findings if f.severity == severity]


def severity_of(record: Mapping[str, Any]) -> str:
    klass = record.get("class")
    if klass == "import":
        return FAIL
    if klass == "condition":
        return WARN
    if klass == "deferred":
        return WARN if record.get("importer") is None else INFO  # the job's own code, or a library's option
    return INFO


def _requirement_names(requires: list[str]) -> dict[str, str]:
    """canonical name -> the extra that lists it ("" for a plain requirement)."""
    import re

    names: dict[str, str] = {}
    for text in requires:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", text)
        if not match:
            continue
        extra = re.search(r"""extra\s*==\s*['"]([^'"]+)['"]""", text)
        key = canonicalize_name(match.group(1))
        if key not in names or not extra:
            names[key] = extra.group(1) if extra else ""
    return names


def provider_of(missing: str, importer: str | None, importers: Mapping[str, Any]) -> tuple[str, str]:
    """(distribution, how it is known) for a missing top-level module, or ("", "")."""
    top = missing.split(".")[0]
    table = {**DISTRIBUTION_OF, **MORE_DISTRIBUTIONS}
    known = table.get(missing) or table.get(top)
    info = importers.get(importer or "") or {}
    listed = _requirement_names([str(r) for r in info.get("requires") or []])
    for candidate in filter(None, (known, top)):
        key = canonicalize_name(candidate)
        if key in listed:
            extra = listed[key]
            where = f"under its extra '{extra}'" if extra else "as a requirement"
            return candidate, f"{importer} {info.get('version', '')} lists {candidate} {where}".replace("  ", " ")
    if known:
        return known, f"provided by {known}"
    return "", ""


def judge_imports(data: Mapping[str, Any] | None) -> ImportsVerdict:
    """The verdict on a drift section's ``imports`` part (an older probe has none: empty)."""
    verdict = ImportsVerdict()
    if not isinstance(data, Mapping):
        return verdict
    importers = data.get("importers") or {}
    for record in data.get("missing") or []:
        parent = record.get("parent") or {}
        incomplete = str(parent.get("distribution") or "") if parent.get("origin") == "site" else ""
        provider, note = ("", "") if incomplete else provider_of(str(record.get("missing") or ""),
                                                                  record.get("importer"), importers)
        verdict.findings.append(MissingImport(
            str(record.get("file")), int(record.get("line") or 0), str(record.get("module")),
            str(record.get("missing") or record.get("module")), str(record.get("class")), severity_of(record),
            record.get("importer"), provider, note, incomplete))
    for entry in data.get("entries") or []:
        verdict.entries.append(entry)
        problem = entry_problem(entry)
        if problem:
            verdict.entry_problems.append(problem)
    verdict.shadows = list(data.get("shadows") or [])
    verdict.files = int(data.get("files") or 0)
    verdict.sites = int(data.get("sites") or 0)
    verdict.counts = dict(data.get("missing_counts") or {})
    return verdict


def entry_problem(entry: Mapping[str, Any]) -> tuple[str, str] | None:
    """A stage entry that cannot start (fail) or cannot be followed (info)."""
    status, name = entry.get("status"), entry.get("name")
    if status == "missing":
        return FAIL, f"the stage runs -m {name}, but {entry.get('missing')} is not importable in the environment"
    if status == "no-file":
        return FAIL, f"the stage runs {entry.get('path')}, which is not on the host"
    if status == "no-console-script":
        return INFO, f"{name} is not a console script of the environment: what it runs is not followed"
    if status == "unfollowed":
        return INFO, f"the stage command {name!r} names no module or script to follow"
    return None


def shadow_sentence(shadow: Mapping[str, Any]) -> str:
    owner = f" ({shadow['distribution']})" if shadow.get("distribution") else ""
    return (f"{shadow.get('local')} hides the installed {shadow.get('name')}{owner} at "
            f"{shadow.get('installed')}: a job started in {shadow.get('folder')} imports the local one")
