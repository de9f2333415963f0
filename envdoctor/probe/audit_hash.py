# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "audit" section (sent before envdoctor/probe/audit.py): hashing in worker
# processes, the .pyc header check, and the stat cache.
#
# The stat cache (<prefix>/.envdoctor/audit-cache, owner-only) remembers, per distribution,
# the files that matched its RECORD with their (size, mtime_ns, ctime_ns, inode). An entry
# is written only when the file's timestamps are safely older than a stamp taken from the
# same file system before the audit began (git's rule for racy timestamps): a file changed
# within the timestamp granularity of its last hash is always hashed again.

import hashlib
import json
import os
import stat
import sys
import tempfile
import time
import types

from envdoctor.probe.audit_record import fsb, fst, stat_key

CHUNK = 1 << 20
#: Small files travel to a worker in batches of about this many bytes (or files).
BATCH_BYTES = 4 << 20
BATCH_FILES = 128
#: Below this much work, starting processes costs more than it saves.
PARALLEL_MIN_FILES = 64
CACHE_VERSION = 2
CACHE_NAME = "audit-cache"
#: Racy window when the stamp and the files may not share a clock (another file system),
#: or the file system stores whole seconds (FAT stores 2 s).
COARSE_MARGIN_NS = 2 * 10 ** 9
#: Racy window on a file system with fine timestamps: the kernel stamps files from a
#: coarse clock that ticks every few milliseconds.
FINE_MARGIN_NS = 50 * 10 ** 6


def now_ns():
    return int(time.time() * 1e9)


# ---------------------------------------------------------------------------------------
# Hashing (in worker processes when there is enough work)


def hash_file(path, algos):
    """(path, stat key, {algo: hex}, shebang line or None, error or None); reads in chunks."""
    try:
        handle = open(fsb(path), "rb")
    except FileNotFoundError:
        return path, None, None, None, "missing"
    except OSError as exc:
        return path, None, None, None, "unreadable: %s" % exc.strerror
    with handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            return path, stat_key(st), None, None, "not a regular file"
        hashers = [(a, hashlib.new(a)) for a in algos]
        first = handle.read(CHUNK)
        head = first.split(b"\n", 1)[0][:300] if first.startswith(b"#!") else None
        for _, hasher in hashers:
            hasher.update(first)
        if len(first) == CHUNK:
            buffer = bytearray(CHUNK)
            view = memoryview(buffer)
            while True:
                count = handle.readinto(buffer)
                if not count:
                    break
                for _, hasher in hashers:
                    hasher.update(view[:count])
    return path, stat_key(st), dict((a, h.hexdigest()) for a, h in hashers), (fst(head) if head else None), None


def hash_batch(batch):
    return [hash_file(path, algos) for path, algos in batch]


def check_pyc_batch(batch):
    """[(pyc, source)] -> [(pyc, source, pyc key, source key, why or None)]; unused ones left out."""
    checked = []
    for pyc, source in batch:
        try:
            pkey = stat_key(os.stat(fsb(pyc)))
            skey = stat_key(os.stat(fsb(source)))
        except OSError:
            continue  # a .pyc without its source is never loaded from __pycache__
        checked.append((pyc, source, pkey, skey, pyc_mismatch(pyc, source, skey)))
    return checked


def make_batches(jobs):
    """jobs: [(path, algos, size)] -> batches, largest first, so the pool ends together."""
    jobs = sorted(jobs, key=lambda j: -(j[2] or 0))
    batches, current, current_bytes = [], [], 0
    for path, algos, size in jobs:
        if (size or 0) >= BATCH_BYTES:
            batches.append([(path, algos)])
            continue
        current.append((path, algos))
        current_bytes += size or 0
        if current_bytes >= BATCH_BYTES or len(current) >= BATCH_FILES:
            batches.append(current)
            current, current_bytes = [], 0
    if current:
        batches.append(current)
    return batches


def usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _make_importable():
    # Pool workers find functions by module name; the probe runs as exec'd text whose
    # module exists nowhere, so give it one before forking.
    name = globals().get("__name__")
    if name and name not in sys.modules:
        module = types.ModuleType(name)
        module.__dict__.update(globals())
        sys.modules[name] = module


class HashRun(object):
    """Hash jobs over worker processes (or serially), started before the caller's other work
    so that walking the folders overlaps with hashing."""

    def __init__(self, jobs, workers):
        self.batches = make_batches(jobs)
        self.pool = None
        self.pending = None
        self.pyc_pending = None
        if workers > 1 and len(jobs) >= PARALLEL_MIN_FILES:
            try:
                import multiprocessing

                _make_importable()
                self.pool = multiprocessing.get_context("fork").Pool(min(workers, len(self.batches)))
                self.pending = self.pool.imap_unordered(hash_batch, self.batches)
            except (ImportError, OSError, ValueError, AttributeError):
                self.pool = None  # no /dev/shm, no fork: hash in this process
        self.workers = min(workers, len(self.batches)) if self.pool is not None else 1

    def check_pycs(self, pycs):
        """Queue .pyc header checks behind the hashing; results() yields them after the digests."""
        batches = [pycs[i:i + 512] for i in range(0, len(pycs), 512)]
        if self.pool is not None:
            self.pyc_pending = self.pool.imap_unordered(check_pyc_batch, batches)
        else:
            self.pyc_pending = (check_pyc_batch(b) for b in batches)

    def pyc_results(self):
        for checked in self.pyc_pending or ():
            for result in checked:
                yield result

    def results(self):
        if self.pool is not None:
            for results in self.pending:
                for result in results:
                    yield result
        else:
            for batch in self.batches:
                for result in hash_batch(batch):
                    yield result

    def close(self):
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None


# ---------------------------------------------------------------------------------------
# The stat cache


def racy_margin(stamp_ns, same_device):
    if not same_device or stamp_ns % 10 ** 9 == 0:
        return COARSE_MARGIN_NS
    return FINE_MARGIN_NS


def cache_trusts(entry_key, key, stamp_ns, margin_ns):
    """Whether a cached digest may stand for the file now: same stat, and not racy."""
    if entry_key is None or key is None or list(entry_key) != list(key):
        return False
    return max(key[1], key[2]) + margin_ns < stamp_ns


class StatCache(object):
    """The host-side cache: sections of entries, each trusted only against the stamp it was saved with."""

    SECTIONS = ("dists", "dirs", "pyc")

    def __init__(self, folder, use, base):
        self.folder = folder
        self.base = base.rstrip("/") + "/"
        self.path = os.path.join(folder, CACHE_NAME) if folder else None
        self.use = use
        self.loaded = dict((name, {}) for name in self.SECTIONS)
        self.loaded_stamp = 0
        self.loaded_margin = COARSE_MARGIN_NS
        self.stamp_ns = now_ns()
        self.stamp_dev = None
        self.margin_ns = COARSE_MARGIN_NS
        self.status = "ignored (--full)" if not use else "empty"
        self.writable = False

    def open(self, site_dev):
        if not self.folder:
            self.status = "unavailable: no place to keep it"
            return
        try:
            if not os.path.isdir(fsb(self.folder)):
                os.makedirs(fsb(self.folder), 0o700)
            # The stamp comes from the file system's own clock, like the files it is compared with.
            fd = os.open(fsb(os.path.join(self.folder, ".audit-stamp")), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, b"x")
                st = os.fstat(fd)
            finally:
                os.close(fd)
            self.stamp_ns, self.stamp_dev, self.writable = st.st_mtime_ns, st.st_dev, True
            self.margin_ns = racy_margin(self.stamp_ns, site_dev == self.stamp_dev)
        except OSError as exc:
            self.status = "unavailable: %s" % (exc.strerror or exc)
            return
        if not self.use:
            return
        try:
            with open(fsb(self.path), "rb") as handle:
                data = json.loads(handle.read().decode("utf-8", "surrogateescape"))
            if data.get("version") == CACHE_VERSION and data.get("base") == self.base:
                for name in self.SECTIONS:
                    self.loaded[name] = dict((self.lengthen(p), e) for p, e in (data.get(name) or {}).items())
                self.loaded_stamp = int(data.get("stamp_ns") or 0)
                self.loaded_margin = int(data.get("margin_ns") or COARSE_MARGIN_NS)
                self.status = "used"
        except (OSError, ValueError, TypeError, AttributeError):
            self.status = "empty"

    def shorten(self, path):
        # Paths under the environment are kept relative to it: a third of the cache's size.
        return path[len(self.base):] if path.startswith(self.base) else path

    def lengthen(self, path):
        return path if path.startswith("/") else self.base + path

    def trusts(self, entry_key, key):
        return cache_trusts(entry_key, key, self.loaded_stamp, self.loaded_margin)

    def settled(self, key):
        """Whether a key may be saved: its file was last changed safely before this run's stamp."""
        return key is not None and max(key[1], key[2]) + self.margin_ns < self.stamp_ns

    def save(self, sections):
        if not self.writable:
            return
        data = {"version": CACHE_VERSION, "stamp_ns": self.stamp_ns, "margin_ns": self.margin_ns,
                "base": self.base}
        for name, entries in sections.items():
            data[name] = dict((self.shorten(p), e) for p, e in entries.items())
        try:
            fd, tmp = tempfile.mkstemp(dir=fsb(self.folder), prefix=b".audit-cache-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(json.dumps(data, separators=(",", ":")).encode("utf-8", "surrogateescape"))
            os.chmod(tmp, 0o600)
            os.replace(tmp, fsb(self.path))
        except (OSError, ValueError):
            pass  # a cache that cannot be written only costs time next run


def pyc_mismatch(pyc_path, source_path, source_key):
    """Why a cached .pyc does not belong to its source, or None when it does (or is unused)."""
    import importlib.util

    try:
        with open(fsb(pyc_path), "rb") as handle:
            header = handle.read(16)
    except OSError:
        return None
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return None  # another interpreter's bytecode: this one ignores it
    flags = int.from_bytes(header[4:8], "little")
    if flags & 1:
        source_hash = getattr(importlib.util, "source_hash", None)
        if source_hash is None:
            return None
        try:
            with open(fsb(source_path), "rb") as handle:
                expected = source_hash(handle.read())
        except OSError:
            return None
        if header[8:16] != expected:
            if not flags & 2:
                return "hash-based .pyc that Python runs without checking, made from another source"
            return "hash-based .pyc whose hash does not match its source"
        return None
    mtime = int.from_bytes(header[8:12], "little")
    size = int.from_bytes(header[12:16], "little")
    if mtime != (source_key[1] // 10 ** 9) & 0xFFFFFFFF or size != source_key[0] & 0xFFFFFFFF:
        return ".pyc header (source mtime and size) does not match its source"
    return None


