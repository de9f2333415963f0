"""Whether a file of settings or code may be trusted: nobody but the user (or root) could have written it.

``envdoctor.toml`` can grant ``trust_remote_code``, point a host at another venv or add
stages; ``--checks`` and ``--patches`` files are Python that runs here. A copy planted in a
shared folder (``/tmp``, a group project directory) must not be picked up, so, as Ansible
does for an ``ansible.cfg`` in a world-writable folder, such a file is refused when:

- it is writable by its group or by others, or owned by someone other than the invoking
  user or root;
- a folder on its way (of the path as given, and of the path after symlinks) is owned by
  someone other than the user or root, or is writable by group/others without the sticky
  bit (the sticky bit lets only a file's owner rename or delete it, so ``/tmp`` is fine for
  a file the user owns).

The file is read through the descriptor that was checked, so it cannot be swapped between
the check and the read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from envdoctor.errors import ConfigError

_TRUSTED_OWNERS_HINT = "make it yours (chown), not writable by group/others (chmod go-w), in a folder only you can write"


def _owners() -> tuple[int, ...]:
    return (0, os.geteuid())


def _folder_problem(folder: str) -> str | None:
    try:
        info = os.stat(folder)
    except OSError as exc:
        return f"cannot inspect {folder}: {exc.strerror}"
    if info.st_uid not in _owners():
        return f"the folder {folder} belongs to another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
        return f"the folder {folder} is writable by other users and not sticky"
    return None


def _folders(path: str) -> list[str]:
    """Every folder from ``path``'s parent up to ``/``."""
    folders = []
    folder = os.path.dirname(path)
    while True:
        folders.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            return folders
        folder = parent


def file_problem(path: str | os.PathLike[str], info: os.stat_result) -> str | None:
    """Why a file (already opened; ``info`` is its fstat) could have been written by another user."""
    if info.st_uid not in _owners():
        return f"it belongs to another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"it is writable by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return folders_problem(path)


def folders_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a file written at ``path`` would be refused for its folders (another user's, or
    writable by others without the sticky bit, on the way as given or after symlinks), or None:
    for a command that writes a config file (``envdoctor init``), before it writes."""
    given = os.path.abspath(os.fspath(path))
    for candidate in dict.fromkeys([given, os.path.realpath(given)]):
        for folder in _folders(candidate):
            problem = _folder_problem(folder)
            if problem:
                return problem
    return None


def read_trusted_file(path: str | os.PathLike[str], what: str) -> bytes:
    """The bytes of ``path``, a file of ``what`` (e.g. "config file"); ConfigError when another
    user could have written it or it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{what} {path} is not a regular file")
        problem = file_problem(path, info)
        if problem:
            raise ConfigError(f"refusing {what} {path}: {problem}", hint=_TRUSTED_OWNERS_HINT)
        return handle.read()


def check_trusted_file(path: str | os.PathLike[str], what: str) -> Path:
    """Refuse (ConfigError) a file another user could have written; for files that are then
    loaded by path (Python modules)."""
    read_trusted_file(path, what)
    return Path(path)
