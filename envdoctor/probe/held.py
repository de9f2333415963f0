"""What the controller remembers of the probe programs each host keeps (see program.py).

A host keeps the programs it was sent; the controller then sends only the request line
naming one. This memory saves a round trip and makes compiled code usable: a destination
known here that does not hold the program is sent it at once, and a program it holds comes
with the sha256 of its compiled code, as the host reported it when it wrote it (the host
loads its compiled copy only when that digest matches). The memory is never trusted for
correctness: a host without a verified copy asks for the program, whatever is noted here.

One file of the user's (``$XDG_CACHE_HOME/envdoctor/held-programs.json``, 0600 in a folder
only the user can write), read once per run and written once at its end, when it changed:
merged with what other runs wrote meanwhile, the newest MAX_DESTINATIONS kept.
"""

from __future__ import annotations

import atexit
import json
import re
import time
from pathlib import Path
from typing import Any

from envdoctor import user_cache

#: Destinations remembered, and programs per destination (the host keeps as many).
MAX_DESTINATIONS = 2048
MAX_PROGRAMS = 16
MAX_FILE_BYTES = 8 * 1024 * 1024
_DIGEST = re.compile(r"\A[0-9a-f]{64}\Z")


def memory_path() -> Path:
    return user_cache.folder("held-programs.json")


def _read(path: Path) -> dict[str, dict[str, Any]]:
    """The entries of the file, if only this user could have written it; what is not of the
    expected shape is dropped."""
    data = user_cache.read_private(path, MAX_FILE_BYTES)
    try:
        raw = json.loads(data) if data is not None else {}
    except (ValueError, RecursionError):
        return {}
    entries = {}
    for key, entry in (raw.items() if isinstance(raw, dict) else ()):
        if not isinstance(entry, dict) or not isinstance(entry.get("at"), (int, float)):
            continue
        programs = entry.get("programs")
        if isinstance(programs, dict):
            kept = {p: c for p, c in programs.items() if _DIGEST.match(p) and isinstance(c, str)
                    and (not c or _DIGEST.match(c))}
            entries[key] = {"at": float(entry["at"]), "programs": kept}
    return entries


def _write(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    user_cache.write_private(path, json.dumps(entries, separators=(",", ":")).encode("utf-8"))


class HeldPrograms:
    """The memory of one controller process: loaded at first use, written at exit."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._entries: dict[str, dict[str, Any]] | None = None
        self._changed: set[str] = set()

    def _loaded(self) -> dict[str, dict[str, Any]]:
        if self._entries is None:
            self._path = self._path or memory_path()
            self._entries = _read(self._path)
        return self._entries

    def lookup(self, destination: str, program: str) -> tuple[bool, bool, str]:
        """(known, held, code): whether the destination is known here, whether it holds the
        program, and the sha256 of its compiled code ("" when none is known)."""
        entry = self._loaded().get(destination)
        if entry is None:
            return False, False, ""
        code = entry["programs"].get(program)
        return True, code is not None, code or ""

    def note(self, destination: str, program: str, *, held: bool, code: str = "") -> None:
        """What a run learned: the destination keeps the program (with this compiled code, or
        the one noted before), or it does not (it could not keep what it was sent)."""
        entries = self._loaded()
        entry = entries.get(destination)
        programs = dict(entry["programs"]) if entry else {}
        before = programs.pop(program, None)  # (re-inserted: the newest last)
        if held:
            programs[program] = code or before or ""
        programs = dict(list(programs.items())[-MAX_PROGRAMS:])
        if entry is not None and programs == entry["programs"] and time.time() - entry["at"] < 24 * 3600:
            return  # nothing new (the time is refreshed once a day, for the bound's order)
        entries[destination] = {"at": time.time(), "programs": programs}
        if not self._changed:
            atexit.register(self.flush)
        self._changed.add(destination)

    def flush(self) -> None:
        """Write what changed, merged into what the file holds now (other runs may have
        written it since it was read)."""
        if not self._changed or self._entries is None or self._path is None:
            return
        merged = _read(self._path)
        for destination in self._changed:
            merged[destination] = self._entries[destination]
        newest = sorted(merged.items(), key=lambda item: item[1]["at"])[-MAX_DESTINATIONS:]
        _write(self._path, dict(newest))
        self._changed.clear()
        atexit.unregister(self.flush)


#: The memory of this process (every run_probe of a run shares it).
HELD = HeldPrograms()
