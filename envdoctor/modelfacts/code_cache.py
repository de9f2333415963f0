"""The imports of a model's code file, read with libcst once per source and kept between runs.

Importing libcst and parsing a tokenizer's code costs about a second of a daily ``fix`` on a
healthy host, for an answer that is a pure function of the file's text and of the reader.
The key is a sha256 over the file's name and text, the text of the reader's own modules
(``code_imports.py``, ``import_refs.py``, ``untrusted.py``) and the stat of the installed
libcst package (size, mtime_ns, ctime_ns, inode: a reinstall changes it), so a change of any
of them is a miss. A file that libcst cannot read is cached as that error (the same text fails
the same way).

The cache is a folder of this user's (``$XDG_CACHE_HOME/envdoctor/code-imports``, mode 0700);
an entry that is not a regular file of this user, or that the group or others could have
written, is never read. It is bounded (past MAX_ENTRIES entries the older half goes), written
atomically, and any failure of it only means parsing again. ``ENVDOCTOR_CODE_CACHE=off``
turns it off.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from functools import cache
from pathlib import Path

from envdoctor import user_cache
from envdoctor.modelfacts.import_refs import CodeParseError, ImportRef

MAX_ENTRY_BYTES = 4 * 1024 * 1024
MAX_ENTRIES = 2048
_VERSION = b"envdoctor-code-imports-1\0"
_READER_MODULES = ("envdoctor.modelfacts.code_imports", "envdoctor.modelfacts.import_refs", "envdoctor.untrusted")


def cache_folder() -> Path:
    return user_cache.folder("code-imports")


@cache
def reader_digest() -> str | None:
    """The reader's modules' text and libcst's installed files by stat; None when not found."""
    digest = hashlib.sha256(_VERSION)
    try:
        for name in _READER_MODULES:
            spec = importlib.util.find_spec(name)
            if spec is None or not spec.origin:
                return None
            digest.update(Path(spec.origin).read_bytes() + b"\0")
        libcst = importlib.util.find_spec("libcst")
        if libcst is None or not libcst.origin:
            return None
        for path in (libcst.origin, os.path.dirname(libcst.origin)):
            st = os.stat(path)
            digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\0".encode())
    except (OSError, ImportError, ValueError):
        return None
    return digest.hexdigest()


def _entry(file: str, source: str) -> Path | None:
    if os.environ.get("ENVDOCTOR_CODE_CACHE", "").lower() in ("off", "0", "no"):
        return None
    reader = reader_digest()
    if reader is None:
        return None
    key = hashlib.sha256(f"{reader}\0{file}\0".encode() + source.encode("utf-8", "surrogatepass")).hexdigest()
    return cache_folder() / f"{key[:40]}.json"


def _to_refs(data: object) -> list[ImportRef] | CodeParseError | None:
    """The entry's refs (or its parse error); None when it is not of that shape."""
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return CodeParseError(data["error"])
    if not isinstance(data, dict) or not isinstance(data.get("refs"), list):
        return None
    refs = []
    for item in data["refs"]:
        if not (isinstance(item, list) and len(item) == 6):
            return None
        file, line, module, names, optional, relative = item
        refs.append(ImportRef(file, line, module, tuple(names), optional, relative))
    return refs


def load(path: Path) -> list[ImportRef] | CodeParseError | None:
    """The cached answer, if only this user could have written it."""
    data = user_cache.read_private(path, MAX_ENTRY_BYTES, private=True, follow_folder=False)
    try:
        return None if data is None else _to_refs(json.loads(data))
    except (ValueError, TypeError):
        return None


def store(path: Path, answer: list[ImportRef] | CodeParseError) -> None:
    """Keep an answer (atomically, 0600); one that cannot be written is only a slower next run."""
    if isinstance(answer, CodeParseError):
        data: dict[str, object] = {"error": str(answer)}
    else:
        data = {"refs": [[r.file, r.line, r.module, list(r.names), r.optional, r.relative] for r in answer]}
    if user_cache.write_private(path, json.dumps(data).encode("utf-8"), follow_folder=False):
        user_cache.prune(path.parent, MAX_ENTRIES)




def cached_imports(file: str, source: str) -> list[ImportRef]:
    """collect_imports(file, source), from the cache when this text was read before."""
    path = _entry(file, source)
    found = load(path) if path is not None else None
    if isinstance(found, CodeParseError):
        raise found
    if found is not None:
        return found
    # libcst takes ~150 ms to import (more on a loaded machine): only a miss pays for it.
    from envdoctor.modelfacts.code_imports import collect_imports

    try:
        refs = collect_imports(file, source)
    except CodeParseError as exc:
        if path is not None:
            store(path, exc)
        raise
    if path is not None:
        store(path, refs)
    return refs
