# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "audit" section (sent before envdoctor/probe/host/audit/section.py): hashing in worker
# processes, the .pyc header check, and the stat cache.
#
# The stat cache (<prefix>/.envdoctor/audit-cache, owner-only) remembers, per distribution,
# the files that matched its RECORD with their (size, mtime_ns, ctime_ns, inode). An entry
# is written only when the file's timestamps are safely older than a stamp taken from the
# same file system before the audit began (git's rule for racy timestamps): a file changed
# within the timestamp granularity of its last hash is always hashed again.

import hashlib
import json
import marshal
import os
import signal
import stat
import sys
import time
from array import array
from binascii import hexlify

from envdoctor.probe.host.audit.record import b64_text, fsb, fst, stat_key
from envdoctor.probe.host.core import (
    MAX_CACHE_BYTES,
    MAX_CODE_BYTES,
    MAX_INSTALLED_BYTES,
    prune_user_caches,
    read_regular,
    regular_fd,
    touch_user_cache,
)

CHUNK = 1 << 20
MISSING_WORDS = (-1, -1, -1, -1)
#: Small files travel to a worker in batches of about this many bytes (or files).
BATCH_BYTES = 4 << 20
BATCH_FILES = 128
#: Below this much work, starting processes costs more than it saves.
PARALLEL_MIN_FILES = 64
CACHE_VERSION = 4  # 4: marshal
#: Before Python 3.7 (PEP 552) a .pyc header is 12 bytes: the magic number, then the source's
#: mtime and size, with no flags word between them.
PYC_FLAGS_WORD = sys.version_info >= (3, 7)
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


def new_hasher(algo):
    # hashlib.sha256() is faster to make than hashlib.new("sha256"), which counts at 20,000 files.
    constructor = getattr(hashlib, algo, None) if algo in hashlib.algorithms_guaranteed else None
    return constructor() if constructor is not None else hashlib.new(algo)


def hash_file(path, algos):
    """(path, stat key, [hash objects, in the order of algos], shebang line or None, error or None).

    Plain descriptors, not file objects: for 20,000 small files the per-file overhead
    costs more than the hashing. Large files are read in chunks into one buffer, up to
    MAX_INSTALLED_BYTES (a planted sparse file of terabytes is reported, not hashed).
    Its item names the file, so it is not noted as a skipped one too."""
    try:
        fd, st = regular_fd(fsb(path), MAX_INSTALLED_BYTES, note=False)
    except FileNotFoundError:
        return path, None, None, None, "missing"
    except OSError as exc:
        return path, None, None, None, "unreadable: %s" % exc.strerror
    try:
        hashers = [new_hasher(a) for a in algos]
        # One read for a small file: one byte more than its size, to see that it did not grow.
        wanted = min(CHUNK, st.st_size + 1)
        first = os.read(fd, wanted)
        head = first.split(b"\n", 1)[0][:300] if first.startswith(b"#!") else None
        for hasher in hashers:
            hasher.update(first)
        if len(first) == wanted:  # a large file, or one that grew: read on to the end
            buffer = bytearray(CHUNK)
            view = memoryview(buffer)
            left = MAX_INSTALLED_BYTES - len(first)
            while True:
                count = os.readv(fd, [buffer])
                if not count:
                    break
                left -= count
                if left < 0:
                    return path, None, None, None, "unreadable: grew past %d bytes while it was read" % (
                        MAX_INSTALLED_BYTES)
                for hasher in hashers:
                    hasher.update(view[:count])
    except OSError as exc:
        return path, None, None, None, "unreadable: %s" % exc.strerror
    finally:
        os.close(fd)
    return path, stat_key(st), hashers, (fst(head) if head else None), None


#: The batches of the current run, set before the workers fork: a task is only an index, so
#: that 20,000 paths are never sent to the workers.
_BATCHES = []


def packable(key):
    """Whether a stat key fits four signed 64-bit words (inodes can use the 64th bit)."""
    return key[1] >= 0 and key[2] >= 0 and not key[3] >> 63


def digest_as(hasher, digest):
    """The hasher's digest spelled like `digest` (hex, or urlsafe base64 without padding)."""
    if len(digest) == 2 * hasher.digest_size:
        return hasher.hexdigest()
    return b64_text(hasher.digest())


def hash_batch_at(index):
    """Hash batch `index` of _BATCHES: (index, stat keys as packed words, [(position, result)]).

    A file that matches its expected (algo, digest, size) is only a packed key; anything
    else (a difference, an error, a shebang line, a key that does not pack) comes back
    whole, with hex digests."""
    words, special = array("q"), []
    for position, (path, algos, expected) in enumerate(_BATCHES[index]):
        result = hash_file(path, algos)
        key = result[1]
        if (expected is not None and result[4] is None and result[3] is None and packable(key)
                and expected[2] in (None, key[0])
                and digest_as(result[2][algos.index(expected[0])], expected[1]) == expected[1]):
            words.extend(key)
            continue
        words.extend(MISSING_WORDS)
        if result[2] is not None:
            result = result[:2] + (dict((a, h.hexdigest()) for a, h in zip(algos, result[2])),) + result[3:]
        special.append((position, result))
    return index, words.tobytes(), special


def unpack_batch(batch, packed, special):
    """The results of one batch from hash_batch_at's answer: (path, stat key, {algo: hex},
    shebang, error), the digests None for a file that matched."""
    words = array("q")
    words.frombytes(packed)
    flat = words.tolist()
    results = [(job[0], flat[at:at + 4], None, None, None) for job, at in zip(batch, range(0, len(flat), 4))]
    for position, result in special:
        results[position] = result
    return results


def check_pyc_batch(batch):
    """[(pyc, source)] -> (packed pyc and source keys, [(position, why or None, keys)] for
    the .pyc files that differ, whose keys do not pack, or that are not used at all)."""
    words, special = array("q"), []
    magic = _magic_number()
    stat, read, close, add = os.stat, os.read, os.close, words.extend
    for position, (pyc, source) in enumerate(batch):
        try:
            st = stat(source.encode("utf-8", "surrogateescape"))
            fd, pst = regular_fd(pyc.encode("utf-8", "surrogateescape"), note=False)
        except OSError:
            # No source: a .pyc in __pycache__ without one is never loaded. Or the .pyc is
            # gone since its folder was listed, or is no regular file (never waited on).
            add(MISSING_WORDS * 2)
            special.append((position, "unused", None))
            continue
        skey = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        try:
            pkey = [pst.st_size, pst.st_mtime_ns, pst.st_ctime_ns, pst.st_ino]
            header = read(fd, 16)
            if not PYC_FLAGS_WORD:
                header = pep552_header(header)
        except OSError:
            pkey, header = None, b""
        finally:
            close(fd)
        if pkey is None:
            why = "unused"
        elif header[:4] == magic and header[4:8] == b"\0\0\0\0" and len(header) == 16 and \
                header[8:16] == _pyc_stamp(skey):
            why = None  # the usual .pyc: made from this source's mtime and size (header_mismatch inlined)
        else:
            why = header_mismatch(header, source, skey, magic)
        if why is None and packable(pkey) and packable(skey):
            add(pkey)
            add(skey)
        else:
            words.extend(MISSING_WORDS * 2)
            special.append((position, why, (pkey, skey)))
    return words.tobytes(), special


def unpack_pycs(batch, packed, special):
    """check_pyc_batch's answer as (pyc, source, pyc key, source key, why) tuples; unused .pyc
    files are left out."""
    words = array("q")
    words.frombytes(packed)
    flat = words.tolist()
    results = [(pair[0], pair[1], flat[at:at + 4], flat[at + 4:at + 8], None)
               for pair, at in zip(batch, range(0, len(flat), 8))]
    for position, why, keys in special:
        pyc, source = batch[position]
        results[position] = None if why == "unused" else (pyc, source, keys[0], keys[1], why)
    return [r for r in results if r is not None] if special else results


def _job_size(job):
    return job[2] or 0


def make_batches(jobs):
    """jobs: [(path, algos, size, expected)] -> batches, largest first, so the pool ends together."""
    jobs = sorted(jobs, key=_job_size, reverse=True)  # (stable, as the order of equal sizes was)
    batches, current, current_bytes = [], [], 0
    for path, algos, size, expected in jobs:
        size = size or 0
        if size >= BATCH_BYTES:
            batches.append([(path, algos, expected)])
            continue
        current.append((path, algos, expected))
        current_bytes += size
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


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd, size):
    parts, left = [], size
    while left:
        data = os.read(fd, min(left, 1 << 20))
        if not data:
            raise OSError("a worker's answer was cut short")
        parts.append(data)
        left -= len(data)
    return b"".join(parts)


def _send(fd, value):
    """One value as marshal bytes behind their length: nothing waits for an end of file."""
    data = marshal.dumps(value)
    _write_all(fd, len(data).to_bytes(8, "little") + data)


def _receive(fd):
    return marshal.loads(_read_exactly(fd, int.from_bytes(_read_exactly(fd, 8), "little")))


#: Bytes of one batch number in the task pipe (a native int, 4 on every Linux).
_TASK_SIZE = array("i").itemsize


def _hash_worker(task_fd, pyc_fd, out_fd):
    """A forked worker: take batch numbers from the shared task pipe until the end mark (-1),
    then check the .pyc headers it is sent, then send everything back in one answer."""
    hashed = []
    while True:
        raw = os.read(task_fd, _TASK_SIZE)
        index = array("i", raw)[0] if len(raw) == _TASK_SIZE else -1
        if index < 0:
            break  # the end mark (or the caller is gone)
        hashed.append(hash_batch_at(index))
    pycs = _receive(pyc_fd)
    _send(out_fd, (hashed, check_pyc_batch(pycs) if pycs else (b"", [])))


class HashRun(object):
    """Hash jobs in forked worker processes (or serially), started before the caller's other
    work so that walking the folders overlaps with hashing.

    Plain fork and pipes, not multiprocessing: a pool's threads and pickling cost the
    caller more CPU than its whole walk. The workers take batch numbers from one pipe (a
    read of one number from a pipe written in whole numbers is atomic), so a slow core
    takes fewer; each answers once, at the end, with its digests and the .pyc headers it
    was given."""

    def __init__(self, jobs, workers):
        self.batches = make_batches(jobs)
        _BATCHES[:] = self.batches
        self.children = []  # [pid, .pyc task pipe, answer pipe]
        self.pycs = []
        self.pyc_answers = []
        if workers > 1 and len(jobs) >= PARALLEL_MIN_FILES and hasattr(os, "fork"):
            self._start(min(workers, len(self.batches)))
        self.workers = len(self.children) or 1

    def _start(self, count):
        try:
            task_r, task_w = os.pipe()
        except OSError:
            return
        for _ in range(count):
            try:
                pyc_r, pyc_w = os.pipe()
                out_r, out_w = os.pipe()
            except OSError:
                break
            try:
                pid = os.fork()
            except OSError:
                for fd in (pyc_r, pyc_w, out_r, out_w):
                    os.close(fd)
                break
            if pid == 0:  # the worker: never returns, never touches stdout
                status = 1
                try:
                    for fd in [task_w, pyc_w, out_r] + [fd for c in self.children for fd in c[1:]]:
                        os.close(fd)
                    _hash_worker(task_r, pyc_r, out_w)
                    status = 0
                finally:
                    os._exit(status)
            os.close(pyc_r)
            os.close(out_w)
            self.children.append([pid, pyc_w, out_r])
        os.close(task_r)
        try:
            # Whole numbers in writes of at most PIPE_BUF (atomic), then an end mark per worker.
            numbers = array("i", list(range(len(self.batches))) + [-1] * len(self.children)).tobytes()
            step = 4096 - 4096 % _TASK_SIZE
            for at in range(0, len(numbers), step):
                _write_all(task_w, numbers[at:at + step])
        except OSError:
            self.close()  # hashed here instead
        finally:
            os.close(task_w)

    def check_pycs(self, pycs):
        """Hand the .pyc header checks to the workers (a share each, after their hashing);
        pyc_results() yields them after the digests."""
        self.pycs = list(pycs)
        try:
            for number, child in enumerate(self.children):
                _send(child[1], self._pyc_share(number))
                os.close(child[1])
                child[1] = None
        except OSError:
            self.close()

    def _pyc_share(self, number):
        share = -(-len(self.pycs) // max(1, len(self.children)))
        return self.pycs[number * share:(number + 1) * share]

    def _answers(self):
        """The workers' answers as [(hash answers, .pyc answer, its .pyc batch)], or None
        when one failed (killed, out of memory): then everything is done here instead."""
        answers = []
        try:
            for number, child in enumerate(self.children):
                if child[1] is not None:  # check_pycs was not called
                    _send(child[1], [])
                    os.close(child[1])
                    child[1] = None
                hashed, pyc_answer = _receive(child[2])
                answers.append((hashed, pyc_answer, self._pyc_share(number)))
        except (OSError, ValueError, EOFError, TypeError):
            self.close()
            return None
        self.close()
        return answers

    def results(self):
        answers = self._answers() if self.children else None
        if answers is None:
            answers = [([hash_batch_at(i) for i in range(len(self.batches))],
                        check_pyc_batch(self.pycs) if self.pycs else (b"", []), self.pycs)]
        for hashed, pyc_answer, pyc_batch in answers:
            self.pyc_answers.append((pyc_batch, pyc_answer))
            for index, packed, special in hashed:
                for result in unpack_batch(self.batches[index], packed, special):
                    yield result

    def pyc_results(self):
        for batch, (packed, special) in self.pyc_answers:
            for result in unpack_pycs(batch, packed, special):
                yield result

    def close(self):
        for pid, pyc_w, out_r in self.children:
            for fd in (pyc_w, out_r):
                if fd is not None:
                    os.close(fd)
            try:
                os.kill(pid, signal.SIGKILL)  # done already, or abandoned
            except OSError:
                pass
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass
        self.children = []


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
                parent = os.path.dirname(self.folder)
                if not os.path.isdir(fsb(parent)):
                    # ~/.cache/envdoctor: owner-only, also under a umask of 002 (the probe's
                    # compiled-program cache is trusted only in a folder nobody else can write).
                    os.makedirs(fsb(parent), 0o700, exist_ok=True)
                try:
                    os.mkdir(fsb(self.folder), 0o700)
                    prune_user_caches(self.folder)  # only a cache in ~/.cache/envdoctor is pruned
                except FileExistsError:
                    pass  # another audit made it just now
            else:
                touch_user_cache(self.folder)
            # A cache someone else could write would hide their changes (its entries are
            # trusted), and a symlinked folder would have us write through it: both unused.
            for folder, mask in ((os.path.dirname(self.folder), 0o022), (self.folder, 0o077)):
                problem = unsafe_folder(folder, mask)
                if problem:
                    self.status = "unavailable: %s" % problem
                    return
            # The stamp comes from the file system's own clock, like the files it is compared with.
            fd = os.open(fsb(os.path.join(self.folder, ".audit-stamp")),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
            try:
                os.write(fd, b"x")
                st = os.fstat(fd)
            finally:
                os.close(fd)
            self.stamp_ns, self.stamp_dev, self.writable = st.st_mtime_ns, st.st_dev, True
            self.margin_ns = racy_margin(self.stamp_ns, site_dev == self.stamp_dev)
        except OSError as exc:
            self.status = "unavailable: %s" % (exc.strerror or exc)

    def load(self):
        """Read the entries of the last audit (after open; nothing with --full)."""
        if not self.use or not self.writable:
            return
        try:
            data = marshal.loads(read_regular(fsb(self.path), MAX_CACHE_BYTES))
            if data.get("version") == CACHE_VERSION and data.get("base") == self.base:
                base = self.base
                for name in self.SECTIONS:
                    self.loaded[name] = {(p if p.startswith("/") else base + p): e
                                         for p, e in (data.get(name) or {}).items()}
                self.loaded_stamp = int(data.get("stamp_ns") or 0)
                self.loaded_margin = int(data.get("margin_ns") or COARSE_MARGIN_NS)
                self.status = "used"
        except (OSError, ValueError, TypeError, AttributeError, EOFError):
            self.status = "empty"

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
        # Paths under the environment are kept relative to it: a third of the cache's size.
        base, cut = self.base, len(self.base)
        for name, entries in sections.items():
            data[name] = {(p[cut:] if p.startswith(base) else p): e for p, e in entries.items()}
        # marshal, not JSON: a fifth of the time to write and to read 30,000 entries (the
        # folder is owner-only, like the probe's compiled-program cache, which is marshal too).
        write_private_bytes(self.folder, CACHE_NAME, marshal.dumps(data))


def unsafe_folder(folder, mask=0o077):
    """Why `folder` is not a real folder of this user without the `mask` permissions (None when it is)."""
    try:
        info = os.lstat(fsb(folder))
    except OSError as exc:
        return "%s: %s" % (folder, exc.strerror)
    if not stat.S_ISDIR(info.st_mode):
        return "%s is not a real folder (a symlink?)" % folder
    if info.st_uid != os.getuid():
        return "%s belongs to another user" % folder
    if info.st_mode & mask:
        return "%s is open to other users (mode %o)" % (folder, info.st_mode & 0o777)
    return None


def write_private(folder, name, data, tail=None):
    """Write data as one line of JSON to folder/name, then the raw bytes of tail if any;
    owner-only, by rename. False when it could not be written: a cache that cannot be
    written only costs time next run, so that is not an error."""
    # ASCII JSON (surrogates escaped), so the first newline ends it.
    text = json.dumps(data, separators=(",", ":")).encode("ascii")
    return write_private_bytes(folder, name, text if tail is None else b"".join((text, b"\n", tail)))


def write_private_bytes(folder, name, data):
    """Write the bytes `data` to folder/name, owner-only, by rename (see write_private)."""
    # A new random name opened with O_EXCL, as tempfile.mkstemp does (never a planted
    # symlink), without the 7 ms of imports the tempfile module costs.
    tmp = os.path.join(fsb(folder), b"." + fsb(name) + b"-" + hexlify(os.urandom(8)))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(tmp, 0o600)
            os.replace(tmp, fsb(os.path.join(folder, name)))
        except BaseException:
            os.unlink(tmp)
            raise
    except (OSError, ValueError):
        return False
    return True


def _magic_number():
    import importlib.util

    return importlib.util.MAGIC_NUMBER


def _pyc_stamp(source_key):
    """Bytes 8-16 of a timestamp-based .pyc made from a source with this stat key."""
    return ((source_key[1] // 10 ** 9) & 0xFFFFFFFF).to_bytes(4, "little") + \
        (source_key[0] & 0xFFFFFFFF).to_bytes(4, "little")


def pep552_header(header):
    """The first bytes of a pre-3.7 .pyc as Python 3.7+ lays them out: magic, flags 0 (the
    source's timestamp decides), then the source's mtime and size."""
    if len(header) < 12:
        return header[:4]  # too short to be used: header_mismatch ignores it
    return header[:4] + b"\0\0\0\0" + header[4:12]


def header_mismatch(header, source_path, source_key, magic=None):
    """Why a cached .pyc (its first 16 bytes, laid out as PEP 552 has it) does not belong to
    its source, or None when it does (or when this interpreter would not use it)."""
    if len(header) < 16 or header[:4] != (magic or _magic_number()):
        return None  # another interpreter's bytecode: this one ignores it
    import importlib.util
    flags = int.from_bytes(header[4:8], "little")
    if flags & 1:
        source_hash = getattr(importlib.util, "source_hash", None)
        if source_hash is None:
            return None
        try:
            expected = source_hash(read_regular(fsb(source_path), MAX_CODE_BYTES))
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


