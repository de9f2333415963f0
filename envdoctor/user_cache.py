"""The controller's own caches: where they live and how one is written.

Each is a file under ``$XDG_CACHE_HOME/envdoctor`` (``~/.cache/envdoctor`` by default) that only
this user can have written: the folder and the file belong to the user and nobody else may
write them, so an answer read back is one this user's envdoctor saved. A cache that cannot be
written or trusted is only a slower next run, never an error.
"""

from __future__ import annotations

import os
from pathlib import Path
from stat import S_ISREG


def folder(*parts: str) -> Path:
    """``$XDG_CACHE_HOME/envdoctor/PARTS...``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "envdoctor", *parts)


def trusted(info: os.stat_result, *, private: bool = False) -> bool:
    """Belongs to this user and nobody else can write it (nor read it, with ``private``)."""
    return info.st_uid == os.getuid() and not info.st_mode & (0o077 if private else 0o022)


def read_private(path: Path, limit: int, *, private: bool = False, follow_folder: bool = True) -> bytes | None:
    """At most ``limit`` bytes of ``path`` if only this user could have written it (see
    :func:`trusted`; a link, a FIFO or another user's file is None, never waited on)."""
    try:
        if not trusted(os.stat(path.parent) if follow_folder else os.lstat(path.parent)):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not S_ISREG(info.st_mode) or not trusted(info, private=private):
                return None
            return handle.read(limit)
    except OSError:
        return None


def write_private(path: Path, data: bytes, *, follow_folder: bool = True) -> bool:
    """Write ``data`` to ``path`` atomically, 0600, in a folder only this user can write
    (made 0700 when missing; ``follow_folder=False`` refuses a folder that is a link). The
    temporary file is created exclusively and never through a link. False when it was not
    written."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.stat(path.parent) if follow_folder else os.lstat(path.parent)
        if not trusted(info):
            return False
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
        return True
    except OSError:
        return False


def prune(folder: Path, max_entries: int) -> None:
    """Keep a folder of cached answers bounded: past ``max_entries`` files, the older half goes."""
    try:
        entries = list(os.scandir(folder))
        if len(entries) <= max_entries:
            return
        entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime)
        for entry in entries[: len(entries) // 2]:
            os.unlink(entry.path)
    except OSError:
        return
