"""Audit of installed files: RECORD verification on the host, ledger attribution here.

The host runs two probe sections in one round trip: ``audit`` (every RECORD-listed file's
size and digest, extra code, stale bytecode; see ``envdoctor/probe/host/audit/section.py``) and
``patch-ledger`` (the ledger and the current hashes of the files it names). This module
turns their raw output into file states, telling envdoctor's own recorded patches apart
from foreign changes and from patches that a reinstall took away.
"""

from __future__ import annotations

import base64
import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from envdoctor.errors import ProbeError
from envdoctor.inventory import HostSpec
from envdoctor.logsafe import get_logger
from envdoctor.patching.ledger import LedgerEntry, applied_patches, parse_ledger, unfinished
from envdoctor.probe.program import (
    ProbeOutput,
    SkippedFile,
    register_section,
    run_probe,
    section_code_digest,
    venv_pythons,
)
from envdoctor.probe.schema import section_problems
from envdoctor.transport.interface import Transport

log = get_logger(__name__)

AUDIT_SECTION = "audit"
LEDGER_SECTION = "patch-ledger"
register_section(AUDIT_SECTION, "audit.section")
register_section(LEDGER_SECTION, "patch.ledger")


class FileState(StrEnum):
    PATCHED = "patched"
    MODIFIED = "modified"
    MISSING = "missing"
    REVERTED = "reverted"
    EXTRA = "extra"
    #: A RECORD path outside the environment's install folders (``../../etc/shadow``): never read.
    OUTSIDE = "outside"


def display_path(path: str) -> str:
    """A path the probe sent (UTF-8 with surrogateescape) as printable text: bad bytes as \\xNN."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def is_clean_text(path: str) -> bool:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class AuditedFile:
    """One installed file that is not simply as its distribution recorded it."""

    path: str
    distribution: str
    state: FileState
    reason: str = ""
    version: str = ""
    #: Ids of the recorded envdoctor patches on this file, oldest first.
    patches: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": display_path(self.path),
            "distribution": self.distribution,
            "state": str(self.state),
        }
        if not is_clean_text(self.path):
            # The exact bytes, for a program that must open the file; `path` is for people.
            data["path_bytes_b64"] = base64.b64encode(self.path.encode("utf-8", "surrogateescape")).decode()
        if self.version:
            data["version"] = self.version
        if self.reason:
            data["reason"] = self.reason
        if self.patches:
            data["patches"] = list(self.patches)
        return data


@dataclass(frozen=True)
class PatchStatus:
    """Where one patched file stands against the ledger's record of it."""

    file: str
    patches: tuple[str, ...]
    distribution: str
    state: FileState
    reason: str


@dataclass(frozen=True)
class DistributionSummary:
    name: str
    version: str
    path: str
    kind: str
    record: str
    files: int
    verified: int
    problems: int
    notes: tuple[str, ...] = ()

    @classmethod
    def from_probe(cls, raw: Mapping[str, Any]) -> DistributionSummary:
        return cls(
            name=str(raw.get("name", "")), version=str(raw.get("version", "")), path=str(raw.get("path", "")),
            kind=str(raw.get("kind", "")), record=str(raw.get("record", "")), files=int(raw.get("files") or 0),
            verified=int(raw.get("verified") or 0), problems=int(raw.get("problems") or 0),
            notes=tuple(str(n) for n in raw.get("notes") or ()),
        )


@dataclass(frozen=True)
class HostAudit:
    """The audit of one host's environment, or why there is none."""

    host: str
    destination: str
    prefix: str = ""
    python: str = ""
    #: True when no venv was given and the default interpreter's site-packages were audited.
    default_env: bool = False
    site_packages: tuple[str, ...] = ()
    files: tuple[AuditedFile, ...] = ()
    distributions: tuple[DistributionSummary, ...] = ()
    conflicts: tuple[Mapping[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    stats: Mapping[str, Any] = field(default_factory=dict)
    problem: str | None = None
    hint: str = ""

    @property
    def ok(self) -> bool:
        return self.problem is None and all(f.state is FileState.PATCHED for f in self.files)


@dataclass(frozen=True)
class AuditReport:
    hosts: tuple[HostAudit, ...]

    @property
    def exit_status(self) -> int:
        return 0 if all(h.ok for h in self.hosts) else 1


def patch_status(file: str, entries: Sequence[LedgerEntry], fact: Mapping[str, Any] | None) -> PatchStatus:
    """A patched file's state: ``entries`` are the patches in force on it, oldest first."""
    patches = tuple(e.patch for e in entries)
    dist = entries[-1].distribution
    after, before = entries[-1].sha256_after, entries[0].sha256_before
    if not fact or not fact.get("exists"):
        return PatchStatus(file, patches, dist, FileState.MISSING, "the patched file is gone")
    current = fact.get("sha256")
    if current and current == after:
        return PatchStatus(file, patches, dist, FileState.PATCHED, "as the ledger recorded it")
    if current and (current == before or current == fact.get("record_sha256")):
        how = "the file is back to its pre-patch content" if current == before else (
            f"the file matches the RECORD of {fact.get('record_of') or 'its distribution'} again")
        return PatchStatus(file, patches, dist, FileState.REVERTED,
                           f"{how}: the patch was lost (a reinstall?); `envdoctor fix` applies it again")
    return PatchStatus(file, patches, dist, FileState.MODIFIED,
                       "changed since envdoctor patched it: neither the patched nor the original content")


def patch_statuses(ledger: Mapping[str, Any] | None) -> tuple[list[PatchStatus], list[str]]:
    """Every patched file's state, and notes on work an interrupted run left unfinished."""
    if not ledger or not ledger.get("exists"):
        return [], []
    entries = parse_ledger(ledger.get("lines") or [])
    by_file: dict[str, list[LedgerEntry]] = {}
    for entry in sorted(applied_patches(entries).values(), key=entries.index):
        by_file.setdefault(entry.file, []).append(entry)
    facts = ledger.get("files") or {}
    statuses = [patch_status(path, chain, facts.get(path)) for path, chain in by_file.items()]
    notes = [f"an interrupted run left {e.op} of patch {e.patch} on {e.file} unfinished; run `envdoctor fix`"
             for e in unfinished(entries)]
    return statuses, notes


def reconcile(items: Iterable[Mapping[str, Any]], ledger: Mapping[str, Any] | None) -> tuple[list[AuditedFile], list[str]]:
    """The probe's differences, with the ledger's patched files told apart: (files, notes)."""
    statuses, notes = patch_statuses(ledger)
    patched = {os.path.normpath(s.file): s for s in statuses}
    files: list[AuditedFile] = []
    for item in items:
        path = str(item.get("path", ""))
        if os.path.normpath(path) in patched:
            continue  # the ledger knows this file: its state comes from the patch's record
        try:
            state = FileState(item.get("state"))
        except ValueError:
            continue
        files.append(AuditedFile(path, str(item.get("distribution") or ""), state,
                                 str(item.get("reason") or ""), str(item.get("version") or "")))
    for status in statuses:
        files.append(AuditedFile(status.file, status.distribution, status.state, status.reason,
                                 patches=status.patches))
    files.sort(key=lambda f: (f.distribution.lower(), f.path))
    return files, notes


_RECORD_NOT_READ = re.compile(r"RECORD not read \((.+)\): its files cannot be verified")


def unreadable_records(distributions: Iterable[DistributionSummary],
                       skipped: Iterable[SkippedFile]) -> list[AuditedFile]:
    """A RECORD the probe found but did not read (a FIFO, a device, over its budget) is its
    distribution's file in a state other than as installed: named, with why."""
    why_by_path = {s.path: s.why for s in skipped}
    found = []
    for dist in distributions:
        if dist.record != "unreadable" or dist.kind != "dist-info":
            continue
        path = posixpath.join(dist.path, "RECORD")
        why = why_by_path.get(path) or next(
            (m.group(1) for m in map(_RECORD_NOT_READ.match, dist.notes) if m), "not read")
        found.append(AuditedFile(path, dist.name, FileState.MODIFIED,
                                 f"unreadable: {why}; the distribution's files cannot be verified", dist.version))
    return found


class RecordAuditor:
    """Audits one host's environment in one probe run."""

    def __init__(self, *, full: bool = False, workers: int | None = None, timeout: float | None = 1800) -> None:
        self.full = full
        self.workers = workers
        self.timeout = timeout

    def request(self, spec: HostSpec) -> dict[str, dict[str, Any]]:
        # "code": the snapshot of an earlier audit replays only for the same audit code.
        audit_args: dict[str, Any] = {"prefix": spec.venv or "", "full": self.full,
                                      "code": section_code_digest(AUDIT_SECTION)}
        if self.workers:
            audit_args["workers"] = self.workers
        return {AUDIT_SECTION: audit_args, LEDGER_SECTION: {"prefix": spec.venv or ""}}

    async def audit(self, transport: Transport, spec: HostSpec) -> HostAudit:
        output = await run_probe(transport, self.request(spec), python_candidates=venv_pythons(spec.venv),
                                 timeout=self.timeout)
        malformed = section_problems(output.sections, output.items, output.errors)
        if malformed:  # a host's answer is untrusted: a wrong shape is this host's problem
            raise ProbeError(f"the host's probe answer is malformed: {malformed[0]}")
        return self.from_probe(spec, output)

    def from_probe(self, spec: HostSpec, output: ProbeOutput) -> HostAudit:
        error = output.errors.get(AUDIT_SECTION)
        if error:
            raise ProbeError(f"the audit failed on the host: {error.strip().splitlines()[-1]}")
        data = output.sections.get(AUDIT_SECTION) or {}
        ledger = output.sections.get(LEDGER_SECTION)
        files, ledger_notes = reconcile(output.items.get(AUDIT_SECTION, []), ledger)
        distributions = tuple(DistributionSummary.from_probe(d) for d in data.get("distributions") or ())
        files = sorted([*files, *unreadable_records(distributions, output.skipped)],
                       key=lambda f: (f.distribution.lower(), f.path))
        notes = list(data.get("notes") or []) + ledger_notes
        notes.extend(f"not read: {s.describe()}" for s in output.skipped)
        if output.skipped_more:
            notes.append(f"not read: {output.skipped_more} more files")
        if LEDGER_SECTION in output.errors:
            notes.append("the patch ledger could not be read: " + output.errors[LEDGER_SECTION].strip().splitlines()[-1])
        return HostAudit(
            host=spec.name,
            destination=spec.destination,
            prefix=str(data.get("prefix", "")),
            python=str(data.get("python", "")),
            default_env=bool(data.get("default")),
            site_packages=tuple(data.get("site_packages") or ()),
            files=tuple(files),
            distributions=distributions,
            conflicts=tuple(data.get("conflicts") or ()),
            notes=tuple(notes),
            stats=dict(data.get("stats") or {}),
        )
