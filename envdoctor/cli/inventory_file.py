"""The inventory ``envdoctor init`` writes: checked before the hosts are probed, written
atomically after, with a mode envdoctor's own config-trust rules accept.

Before: the file (when it exists) is one envdoctor would read (config_trust: the user's or
root's, not writable by others; a valid inventory), and its folder is one a config file may
live in (no folder on the way another user could write). After: a temp file in the same
folder (O_EXCL, random name: a planted symlink is never followed), fsync'ed, given the old
file's mode without group/other write (0644 less the umask for a new file), then renamed over
the file: a reader sees the old inventory or the new one, never half of it.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from envdoctor.config_trust import folders_problem, read_trusted_file
from envdoctor.errors import ConfigError, UsageError
from envdoctor.inventory import Inventory, load_inventory

#: A new inventory: readable by all, writable by its owner only (config_trust refuses more).
NEW_MODE = 0o644
_TRUST_HINT = "choose --config in a folder only you (or root) can write"


@dataclass(frozen=True)
class InventoryFile:
    """The inventory to extend: where it is (its real path when a symlink), its text, what it says."""

    path: Path
    text: str
    inventory: Inventory
    mode: int | None


def open_inventory(path: Path, *, writing: bool) -> InventoryFile:
    """The inventory at ``path`` (empty when missing), checked as envdoctor reads config files;
    with ``writing``, also that a file written there would be read. UsageError/ConfigError (exit 2)."""
    if path.is_dir():
        raise UsageError(f"{path} is a folder; give the inventory file's name (e.g. {path / 'envdoctor.toml'})")
    real = Path(os.path.realpath(path))
    folder = real.parent
    if not folder.is_dir():
        raise UsageError(f"cannot write {path}: the folder {folder} does not exist", hint="create it first")
    problem = folders_problem(real)
    if problem:
        raise ConfigError(f"envdoctor would refuse an inventory written at {path}: {problem}", hint=_TRUST_HINT)
    if writing and not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {path}: the folder {folder} is not writable")
    if not real.exists():
        return InventoryFile(real, "", Inventory(), None)
    raw = read_trusted_file(real, "config file")  # refused when another user could have written it
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    inventory = load_inventory(real)  # a file envdoctor cannot read is not extended
    if writing and not os.access(real, os.W_OK):
        raise UsageError(f"cannot write {path}: it is not writable")
    return InventoryFile(real, text, inventory, stat.S_IMODE(os.stat(real).st_mode))


def write_inventory(target: InventoryFile, text: str) -> None:
    """Replace the inventory with ``text`` atomically; the result is read back as envdoctor reads it."""
    mode = NEW_MODE & ~_umask() if target.mode is None else target.mode & ~(stat.S_IWGRP | stat.S_IWOTH)
    fd, tmp_name = tempfile.mkstemp(dir=target.path.parent, prefix=f".{target.path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), mode)
        os.replace(tmp_name, target.path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    _sync_folder(target.path.parent)
    load_inventory(target.path)  # what was written is an inventory envdoctor reads (trust included)


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
