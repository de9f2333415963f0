"""The arguments of the probe section ``drift``, and the entry module of a stage's command."""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envdoctor.inventory import parse_stage_command
from envdoctor.probe.program import register_section, section_code_digest
from envdoctor.scan.scanner import LOADER_LIBRARIES

SECTION = "drift"
#: code.imports' section: the import walk alone, by the same host module (its own answer and
#: cache), so `--only code.imports` never pays for the API-drift analysis, nor the reverse.
IMPORTS_SECTION = "imports"
register_section(SECTION, "drift.section")  # (its helper modules are in envdoctor.probe.program.MODULE_NEEDS)
register_section(IMPORTS_SECTION, "drift.section")

#: Bounds on what one host's answer may cost.
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_FILES = 20000


def drift_request(venv: str | None, extra: Sequence[str] = (), *, entry: str | Sequence[str] | None = None,
                  providers: Sequence[str] = (), cache: bool = True, baselines: Sequence[str] = (),
                  discover_baselines: bool = True, import_entries: Sequence[dict[str, Any]] | None = None
                  ) -> dict[str, Any]:
    """Consumers: the distributions the trust_remote_code scan selects plus `extra`; with an
    entry (a module name or a script path on the host, or a list: their union) only the
    consumer files it reaches. A provider version a consumer pins but the venv lacks is
    looked for in `baselines` (environments on the host), then in those discovered there.
    ``import_entries`` (see :func:`stage_import_entries`) are where the walk for code.imports
    starts; None: the entry's, else the consumers' top-level packages."""
    return {
        "prefix": venv,
        "depends_on": list(LOADER_LIBRARIES),
        "extra": list(extra),
        "providers": list(providers),
        "entry": entry if entry is None or isinstance(entry, str) else list(entry),
        "cache": cache,
        "baselines": list(baselines),
        "discover_baselines": discover_baselines,
        "import_entries": None if import_entries is None else [dict(e) for e in import_entries],
        "max_file_bytes": MAX_FILE_BYTES,
        "max_files": MAX_FILES,
        "parts": ["api"],
        "code": section_code_digest(SECTION),  # a host cache written by other code is not reused
    }


def imports_request(venv: str | None, extra: Sequence[str] = (), *,
                    import_entries: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The arguments of the ``imports`` section (code.imports): the walk from the stages'
    entries (see :func:`stage_import_entries`), else from the consumers' top-level packages."""
    return {
        "prefix": venv,
        "depends_on": list(LOADER_LIBRARIES),
        "extra": list(extra),
        "cache": True,
        "import_entries": None if import_entries is None else [dict(e) for e in import_entries],
        "max_file_bytes": MAX_FILE_BYTES,
        "max_files": MAX_FILES,
        "code": section_code_digest(IMPORTS_SECTION),
    }


def entry_of_command(command: str) -> str | None:
    """The module (`-m pkg.mod`) or script (`path.py`) a stage's command runs, if it names one."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    return entry_of_words(words)


def entry_of_words(words: Sequence[str]) -> str | None:
    """The first `-m module` or `.py` script among a command's words."""
    for index, word in enumerate(words):
        if word == "-m" and index + 1 < len(words):
            return words[index + 1]
        if word.startswith("-m") and len(word) > 2 and not word.startswith("--"):
            return word[2:]
        if word.endswith(".py") and not word.startswith("-") and "{" not in word:
            return word
    return None


@dataclass(frozen=True)
class StageScope:
    """What a host's stages let ``code.api-drift`` follow: their entries, or why nothing is scoped."""

    entries: tuple[str, ...] = ()
    #: Why the check reads every consumer file although stages run on the host ("" if scoped or no stage).
    unscoped: str = ""


def stage_scope(commands: Sequence[str]) -> StageScope:
    """The union of the entries of the stage commands that run on a host; none when one of
    them names no entry (what it runs could import anything)."""
    entries: list[str] = []
    for command in commands:
        entry = entry_of_command(command)
        if entry is None:
            return StageScope((), f"the stage command {command!r} runs neither `-m module` nor a .py script")
        if entry not in entries:
            entries.append(entry)
    return StageScope(tuple(entries))


_PYTHON_PROGRAM = re.compile(r"(\{python\}|python[0-9.]*)\Z")


def stage_import_entries(commands: Sequence[str]) -> list[dict[str, Any]] | None:
    """Where code.imports starts for each stage command (None without a stage): its `-m
    module` or script, in the folder its `cd DIR` names; a program of the environment
    (`{venv}/bin/vllm serve`) as the console script the host looks up; a Python command with
    neither (`python -c ...`) as one that cannot be followed."""
    if not commands:
        return None
    entries: list[dict[str, Any]] = []
    for command in commands:
        parsed = parse_stage_command(command)
        entry = entry_of_words(parsed.words)
        program = posixpath.basename(parsed.program.replace("{venv}", ""))
        if entry is not None:
            kind = "script" if entry.endswith(".py") or "/" in entry else "module"
            item = {"kind": kind, "name": entry, "cwd": parsed.workdir}
        elif not program or _PYTHON_PROGRAM.match(program):
            item = {"kind": "unfollowed", "name": command, "cwd": parsed.workdir}
        else:
            item = {"kind": "console", "name": program, "cwd": parsed.workdir}
        if item not in entries:
            entries.append(item)
    return entries
