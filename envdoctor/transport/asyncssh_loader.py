"""Import asyncssh without its liboqs search unless a post-quantum KEM from liboqs is wanted.

At import, ``asyncssh.crypto.pq`` calls ``ctypes.util.find_library`` for ``oqs`` and
``liboqs``; on Linux each call runs ``ldconfig -p`` (and gcc when that finds nothing), about
20 ms of every run's start-up on a machine without liboqs. liboqs only adds sntrup761
(ML-KEM comes from the ``cryptography`` package, without liboqs), and asyncssh offers
sntrup761 only when the library is found, so it is searched for only when an ssh config the
run reads names an sntrup algorithm (``KexAlgorithms``), or ``ENVDOCTOR_LIBOQS=1`` asks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

LIBOQS_NAMES = frozenset({"oqs", "liboqs"})


def wants_liboqs(config_files: Iterable[str | Path] = ()) -> bool:
    """Whether a liboqs-only algorithm is named by the user (config text or environment)."""
    if os.environ.get("ENVDOCTOR_LIBOQS") == "1":
        return True
    for path in config_files:
        try:
            text = Path(path).expanduser().read_bytes()
        except OSError:
            continue
        if b"sntrup" in text.lower():
            return True
    return False


def import_asyncssh(config_files: Iterable[str | Path] = ()) -> ModuleType:
    """``import asyncssh``, skipping the liboqs search when nothing asks for it."""
    module = sys.modules.get("asyncssh")
    if module is not None:
        return module
    if wants_liboqs(config_files):
        import asyncssh

        return asyncssh
    import ctypes.util

    original = ctypes.util.find_library

    def find_library(name: str) -> str | None:
        return None if name in LIBOQS_NAMES else original(name)

    ctypes.util.find_library = find_library
    try:
        import asyncssh
    finally:
        ctypes.util.find_library = original
    return asyncssh
