"""The scanner's answer for one installed file, kept between runs on the controller.

code.trust-remote-code parses with libcst every file the probe ships (on vLLM 0.33 about 200
files, 5 to 12 s of the controller's CPU) for an answer that is a pure function of the file's
path and text, the distribution's re-export table and the scanner itself. The key is a sha256
over those: the text of every module of ``envdoctor.scan`` and ``envdoctor.untrusted`` and the
stat of the installed libcst (size, mtime_ns, ctime_ns, inode), so a change of any of them is a
miss. Entries live in ``$XDG_CACHE_HOME/envdoctor/scan-sites`` under the rules of
:mod:`envdoctor.user_cache` (this user's only, atomic, 0600); the folder is bounded (past
MAX_ENTRIES the older half goes) and ``ENVDOCTOR_CODE_CACHE=off`` turns it off, as it does the
model code cache.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
from pathlib import Path

from envdoctor import user_cache
from envdoctor.scan.exports import ExportTable
from envdoctor.scan.loaders import ScanError, Site

MAX_ENTRY_BYTES = 1 << 20
MAX_ENTRIES = 8192
_VERSION = b"envdoctor-scan-sites-1\0"


@functools.cache
def scanner_digest() -> str | None:
    """The scanner's own code and libcst's installed files by stat; None when not found."""
    digest = hashlib.sha256(_VERSION)
    try:
        here = Path(__file__).resolve().parent
        for source in sorted(here.glob("*.py")):
            digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
        for name in ("envdoctor.untrusted", "libcst"):
            spec = importlib.util.find_spec(name)
            if spec is None or not spec.origin:
                return None
            if name == "libcst":
                for path in (spec.origin, os.path.dirname(spec.origin)):
                    st = os.stat(path)
                    digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\0".encode())
            else:
                digest.update(Path(spec.origin).read_bytes() + b"\0")
    except (OSError, ImportError, ValueError):
        return None
    return digest.hexdigest()


@functools.lru_cache(maxsize=256)
def _exports_digest(exports: ExportTable | None) -> str:
    return hashlib.sha256(repr(exports.entries if exports else ()).encode()).hexdigest()


def _entry(*parts: bytes) -> Path | None:
    if os.environ.get("ENVDOCTOR_CODE_CACHE", "").lower() in ("off", "0", "no"):
        return None
    scanner = scanner_digest()
    if scanner is None:
        return None
    key = hashlib.sha256(b"\0".join((scanner.encode(), *parts))).hexdigest()
    return user_cache.folder("scan-sites") / f"{key[:40]}.json"


def _cached(entry: Path | None, compute, encode, decode):  # type: ignore[no-untyped-def]  # (one shape per caller)
    """decode(the entry's JSON) when it is there and of its shape; else compute() kept as encode() gives it."""
    if entry is not None:
        raw = user_cache.read_private(entry, MAX_ENTRY_BYTES, private=True, follow_folder=False)
        if raw is not None:
            try:
                return decode(json.loads(raw))
            except (ValueError, TypeError, KeyError, IndexError, AttributeError):
                pass
    answer = compute()
    if entry is not None and user_cache.write_private(entry, json.dumps(encode(answer)).encode("utf-8"),
                                                      follow_folder=False):
        user_cache.prune(entry.parent, MAX_ENTRIES)
    return answer


def cached_scan(data: bytes, path: str, exports: ExportTable | None, scan) -> tuple[tuple[Site, ...], ScanError | None]:  # type: ignore[no-untyped-def]  # scan: scanner.scan_source's shape
    """``scan(data, path, exports)``, from the cache when this text was scanned before."""

    def compute() -> tuple[tuple[Site, ...], ScanError | None]:
        sites, error = scan(data, path, exports)
        return tuple(sites), error

    def encode(answer: tuple[tuple[Site, ...], ScanError | None]) -> dict:
        sites, error = answer
        return {"sites": [[s.path, s.line, s.column, s.callee, s.state] for s in sites],
                "error": [error.path, error.message] if error else None}

    def decode(data: dict) -> tuple[tuple[Site, ...], ScanError | None]:
        sites = tuple(Site(str(s[0]), int(s[1]), int(s[2]), str(s[3]), str(s[4])) for s in data["sites"])
        error = data["error"]
        return sites, (ScanError(str(error[0]), str(error[1])) if error else None)

    entry = _entry(b"sites", path.encode("utf-8", "surrogateescape"), _exports_digest(exports).encode(), data)
    return _cached(entry, compute, encode, decode)


def cached_exports(data: bytes, module: str, package: str | None, read) -> dict[str, str]:  # type: ignore[no-untyped-def]  # read: exports_of_source
    """``read(data, module, package)`` (a module's re-exports, an ``ast`` parse), from the cache."""

    def decode(found: dict) -> dict[str, str]:
        return {str(k): str(v) for k, v in found["exports"].items()}

    entry = _entry(b"exports", module.encode("utf-8", "surrogateescape"), (package or "").encode(), data)
    return _cached(entry, lambda: read(data, module, package), lambda found: {"exports": found}, decode)
