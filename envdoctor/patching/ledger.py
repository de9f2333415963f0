"""The patch ledger's format: what envdoctor changed in an environment, kept on the host.

Location: ``<venv prefix>/.envdoctor/ledger.jsonl`` (owner-only permissions), beside
``backups/`` and ``lock``. One JSON object per line, appended and fsynced, never rewritten:

    {"op": "apply" | "revert", "phase": "intent" | "done", "patch": ID, "file": ABS PATH,
     "distribution": NAME, "version": VERSION, "sha256_before": HEX, "sha256_after": HEX,
     "backup": ABS PATH, "time": ISO-8601, "envdoctor": VERSION}

A change is written as an ``intent`` line first and a ``done`` line after the file was
replaced, so a run killed in between leaves an intent the next run can finish or roll back
by comparing the file's hash with ``sha256_before`` and ``sha256_after``. This module only
parses and reconciles; reading and writing on the host belong to the patch engine.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

LEDGER_DIR = ".envdoctor"
LEDGER_FILE = "ledger.jsonl"


def ledger_dir(prefix: str) -> str:
    return f"{prefix.rstrip('/')}/{LEDGER_DIR}"


def ledger_path(prefix: str) -> str:
    return f"{ledger_dir(prefix)}/{LEDGER_FILE}"


@dataclass(frozen=True)
class LedgerEntry:
    op: str
    phase: str
    patch: str
    file: str
    distribution: str
    version: str
    sha256_before: str
    sha256_after: str
    backup: str
    time: str
    envdoctor: str

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> LedgerEntry:
        return cls(**{name: str(raw.get(name, "")) for name in cls.__dataclass_fields__})

    def to_json(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def parse_ledger(lines: Iterable[str | bytes]) -> list[LedgerEntry]:
    """Entries in order. A torn last line (a kill mid-append) is ignored, not an error."""
    entries = []
    for line in lines:
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except ValueError:
            continue
        if isinstance(raw, dict):
            entries.append(LedgerEntry.from_json(raw))
    return entries


def applied_patches(entries: Iterable[LedgerEntry]) -> dict[tuple[str, str], LedgerEntry]:
    """(patch id, file) -> the completed ``apply`` that is in force (not reverted since)."""
    state: dict[tuple[str, str], LedgerEntry] = {}
    for entry in entries:
        if entry.phase != "done":
            continue
        key = (entry.patch, entry.file)
        if entry.op == "apply":
            state[key] = entry
        elif entry.op == "revert":
            state.pop(key, None)
    return state


def unfinished(entries: Iterable[LedgerEntry]) -> list[LedgerEntry]:
    """Intents with no ``done`` line after them: work a killed run left for the next one."""
    open_intents: dict[tuple[str, str, str], LedgerEntry] = {}
    for entry in entries:
        key = (entry.op, entry.patch, entry.file)
        if entry.phase == "intent":
            open_intents[key] = entry
        elif entry.phase == "done":
            open_intents.pop(key, None)
    return list(open_intents.values())


def outside_environment(entry: LedgerEntry, prefix: str) -> str | None:
    """Why a ledger entry's ``file`` or ``backup`` is not where envdoctor writes (None when it is).

    The ledger is a file inside the venv, so whoever can write the venv can write it: a line
    naming ``/etc/passwd`` must never make ``revert`` restore over that file. This is the
    controller's lexical check; the patch writer checks again on the host, symlinks resolved.
    """
    root = posixpath.normpath(prefix)
    backups = posixpath.join(root, LEDGER_DIR, "backups")
    state = posixpath.join(root, LEDGER_DIR)
    file, backup = posixpath.normpath(entry.file or "/"), posixpath.normpath(entry.backup or "/")
    if not entry.file.startswith("/") or not file.startswith(root + "/") or file.startswith(state + "/"):
        return f"the ledger names {entry.file!r}, outside the environment {prefix}"
    if entry.backup and (not entry.backup.startswith("/") or not backup.startswith(backups + "/")):
        return f"the ledger names the backup {entry.backup!r}, outside {backups}"
    return None
