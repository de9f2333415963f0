"""Import asyncssh without its liboqs search unless a post-quantum KEM from liboqs is wanted,
and without the DSA deprecation warnings its own modules raise.

At import, ``asyncssh.crypto.pq`` calls ``ctypes.util.find_library`` for ``oqs`` and
``liboqs``; on Linux each call runs ``ldconfig -p`` (and gcc when that finds nothing), about
20 ms of every run's start-up on a machine without liboqs. liboqs only adds sntrup761
(ML-KEM comes from the ``cryptography`` package, without liboqs), and asyncssh offers
sntrup761 only when the library is found, so it is searched for only when an ssh config the
run reads names an sntrup algorithm (``KexAlgorithms``), or ``ENVDOCTOR_LIBOQS=1`` asks.

cryptography 51 (50.0.2 did not) deprecates DSA: reading a name of
``cryptography.hazmat.primitives.asymmetric.dsa`` warns (``CryptographyDeprecationWarning``),
and asyncssh's own modules (2.24.1) read five of them at import (type annotations in
``asyncssh.crypto.misc`` and ``asyncssh.crypto.dsa``), so every command that opens an SSH
connection printed ten lines to stderr, and a wrapper that reads stderr saw noise on success.
That one warning, from asyncssh's modules only, is filtered before asyncssh is imported; every
other warning (the same one raised from envdoctor's own modules included) is left as it was.
cryptography's warning class is imported only here, on the way to importing asyncssh, which
imports it anyway.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

LIBOQS_NAMES = frozenset({"oqs", "liboqs"})
#: The warning filtered: cryptography's DSA deprecation (its message starts so), as raised
#: where asyncssh's own modules read a DSA name.
DSA_DEPRECATION_MESSAGE = r"DSA is deprecated"
ASYNCSSH_MODULES = r"asyncssh(\.|$)"


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


def filter_asyncssh_dsa_warning() -> None:
    """Ignore cryptography's DSA deprecation warning where asyncssh's own modules raise it."""
    try:
        from cryptography.utils import CryptographyDeprecationWarning
    except ImportError:  # (no cryptography: asyncssh's own import error will say so)
        return
    warnings.filterwarnings("ignore", message=DSA_DEPRECATION_MESSAGE,
                            category=CryptographyDeprecationWarning, module=ASYNCSSH_MODULES)


def import_asyncssh(config_files: Iterable[str | Path] = ()) -> ModuleType:
    """``import asyncssh``, its DSA deprecation warning filtered, skipping the liboqs search
    when nothing asks for it."""
    filter_asyncssh_dsa_warning()
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
