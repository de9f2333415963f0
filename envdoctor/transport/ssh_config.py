"""OpenSSH client config files, cut down to what one host needs.

asyncssh tokenizes every line of every config file for every connection, whether or not
the line's ``Host`` block applies. With a fleet's config of a few hundred aliases that is
tens of milliseconds per host, paid again for each host: quadratic in the fleet. Here each
file is split into blocks once, and a host gets a small file holding only the lines outside
any block, the ``Host`` blocks that match it (decided by asyncssh's own pattern matcher, so
the semantics are the same) and every ``Match`` block (left for asyncssh to evaluate).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from asyncssh.pattern import WildcardPatternList


@dataclass(frozen=True)
class Block:
    """Consecutive lines of a config file: a ``Host`` block (with its pattern) or other lines."""

    host_pattern: str | None
    text: str

    def applies_to(self, host: str) -> bool:
        return self.host_pattern is None or WildcardPatternList(self.host_pattern).matches(host)


_KEYWORD = re.compile(r"([A-Za-z]+)\s*(?:=\s*|\s+)(.*)")


def _keyword(line: str) -> tuple[str, str]:
    """The keyword of a config line (lower case) and the rest; blank and comment lines give ''."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return "", ""
    match = _KEYWORD.match(stripped)
    return (match[1].lower(), match[2]) if match else (stripped.lower(), "")


def split_blocks(text: str) -> list[Block]:
    """Split a config file's text into blocks, keeping every line exactly once, in order."""
    blocks: list[Block] = []
    pattern: str | None = None
    lines: list[str] = []
    for line in text.splitlines(keepends=True):
        keyword, rest = _keyword(line)
        if keyword in ("host", "match"):
            if lines:
                blocks.append(Block(pattern, "".join(lines)))
            lines = []
            # A Match block is kept whole for asyncssh to evaluate: no pattern here.
            pattern = ",".join(shlex.split(rest)) if keyword == "host" else None
        lines.append(line)
    if lines:
        blocks.append(Block(pattern, "".join(lines)))
    return blocks


@functools.lru_cache(maxsize=64)
def _blocks_of(path: str, mtime_ns: int, size: int) -> tuple[Block, ...]:
    # keyed by mtime and size so an edited file is read again
    return tuple(split_blocks(Path(path).read_text("utf-8", errors="replace")))


@functools.cache
def _scratch_dir() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="envdoctor-ssh-config-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def reduced_config_files(paths: Iterable[str], host: str) -> list[str]:
    """Files asyncssh may read instead of ``paths`` for ``host``, with the same effect.

    A host whose blocks are the same as another's shares its file. If a file cannot be read
    it is passed through unchanged, so that asyncssh reports the problem in its own words.
    """
    reduced = []
    for path in paths:
        try:
            stat = os.stat(path)
            blocks = _blocks_of(str(path), stat.st_mtime_ns, stat.st_size)
        except OSError:
            reduced.append(str(path))
            continue
        text = "".join(b.text for b in blocks if b.applies_to(host))
        reduced.append(_write_once(text))
    return reduced


def _write_once(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    target = _scratch_dir() / f"{digest}.conf"
    if not target.exists():
        temporary = target.with_suffix(".tmp")
        temporary.write_text(text, encoding="utf-8", errors="surrogateescape")
        os.replace(temporary, target)
    return str(target)
