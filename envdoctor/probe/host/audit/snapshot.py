# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "audit" section (sent after audit_hash.py): the snapshot that lets the
# re-audit of an unchanged environment stat its files and do nothing else.
#
# After an audit in which every stat key it relied on was settled (safely older than the
# run's stamp, the rule for racy timestamps in audit_hash.py), the snapshot keeps that
# audit's result with digests of those keys: the folders it walked for extra code, every
# file it verified against a RECORD, each .pyc header it checked and that .pyc's source.
# The next audit reads the distributions' metadata again and stats the same paths, spread
# over the cores. When the metadata and every digest are the same, no verdict can differ
# (a changed file has a new ctime, and a settled key is never the key of a racy write), so
# the result is replayed. Any difference falls back to the per-file cache.

import hashlib
import json
import os
import sys
from array import array

from envdoctor.probe.host.audit.hashing import write_private
from envdoctor.probe.host.audit.record import fsb
from envdoctor.probe.host.core import MAX_CACHE_BYTES, read_regular

SNAPSHOT_VERSION = 1
SNAPSHOT_NAME = "audit-snapshot"
#: The watched paths are dealt into this many chunks, each with its own digest; workers
#: take chunks in turn, so the digests do not depend on the number of cores.
CHUNKS = 16
#: Below this many paths, forking costs more than it saves.
PARALLEL_MIN_PATHS = 4000
#: The words of a path that could not be statted; a digest of words is unambiguous.
MISSING = (-1, -1, -1, -1)
_INO_MASK = (1 << 63) - 1
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
_STAT_DIR_FD = os.stat in getattr(os, "supports_dir_fd", ()) and os.stat in getattr(os, "supports_follow_symlinks", ())
#: What of a distribution's metadata the verdicts depend on (read again on every audit).
_SIGNATURE_KEYS = ("name", "version", "path", "site", "kind", "record", "installer", "editable",
                   "record_key", "rows", "covers", "notes")


def words_digest(words):
    return hashlib.sha1((words if isinstance(words, array) else array("q", words)).tobytes()).hexdigest()


def distributions_signature(dists):
    """A digest of what was read from the distributions' metadata (before anything is added)."""
    rows = [[d.get(k) for k in _SIGNATURE_KEYS] for d in dists]
    return hashlib.sha1(json.dumps(rows, sort_keys=True, default=str).encode("utf-8", "surrogateescape")).hexdigest()


def snapshot_header(prefix, default, sites, old_prefixes, code=None):
    """What a snapshot must have been made under to be replayed: the environment, this
    interpreter's bytecode, and the audit code (its digest from the controller: code that
    judges differently never replays an old verdict)."""
    import importlib.util

    return {"version": SNAPSHOT_VERSION, "code": code, "prefix": prefix, "default": default, "sites": list(sites),
            "cache_tag": getattr(sys.implementation, "cache_tag", None),
            "magic": importlib.util.MAGIC_NUMBER.hex(), "old_prefixes": list(old_prefixes)}


class Watch(object):
    """The stat keys one audit's verdicts rest on, as it took them.

    `folders` are the folders walked for extra code, keyed by lstat (a new entry changes a
    folder's mtime); `files` are the files whose content was judged. A walked folder that
    could not be read leaves nothing to compare, and a file seen twice with two keys changed
    during the audit: either makes the audit unfit to be replayed."""

    def __init__(self, base):
        self.base = base.rstrip("/") + "/"  # the first site-packages folder
        self.folders = {}
        self.files = {}
        self.interpreters = {}
        self.unfit = False

    def folder(self, path, key):
        if key is None:
            self.unfit = True
        self.folders[path] = key

    def file(self, path, key):
        self.files[path] = key

    def same_file(self, path, key):
        """Watch a file that may be watched already (a .pyc's source): its key must agree."""
        known = self.files.get(path, key)
        if known != key:
            self.unfit = True
        self.files[path] = key

    def interpreter(self, path, exists):
        self.interpreters[path] = exists

    def chunks(self):
        """([[folders bytes, files bytes, digest]], the bytes, the latest timestamp among the
        keys or 0): contiguous slices of each list of paths, "\0"-joined and relative to the
        base when under it, with a digest of their keys in that order. The paths go after the
        JSON as raw bytes: read, never decoded."""
        meta, parts, newest = [], [], 0
        columns = []
        for entries in (list(self.folders.items()), list(self.files.items())):
            size = -(-len(entries) // CHUNKS)
            columns.append([entries[i * size:(i + 1) * size] for i in range(CHUNKS)])
        for folders, files in zip(*columns):
            joined = [self.joined(folders), self.joined(files)]
            words = _words(folders)
            words.extend(_words(files))
            if words:
                newest = max(newest, max(words[1::4]), max(words[2::4]))
            meta.append([len(joined[0]), len(joined[1]), words_digest(words)])
            parts.extend(joined)
        return meta, b"".join(parts), newest

    def joined(self, entries):
        if not entries:
            return b""
        # One replace in C instead of 30,000 slices: only a base at the start of a path matches.
        text = "\0" + "\0".join([p for p, _ in entries])
        return fsb(text.replace("\0" + self.base, "\0")[1:])


def _words(entries):
    """The keys of (path, key) entries as 64-bit words: MISSING for None, the inode's top bit
    dropped. An array extended in C from each key; a key that does not fit (an inode above
    2**63) sends the whole list the slow way."""
    words = array("q")
    add = words.extend
    try:
        for _, key in entries:
            add(MISSING if key is None else key)
    except OverflowError:
        words = array("q")
        for _, key in entries:
            words.extend(MISSING if key is None else (key[0], key[1], key[2], key[3] & _INO_MASK))
    return words


def stat_chunk(base_fd, base, folders, files):
    """The digest of a chunk's stat keys as they are now (the same words Watch.chunks made)."""
    words = []
    add = words.extend
    stat = os.stat
    for joined, follow in ((folders, False), (files, True)):
        if not joined:
            continue
        for name in joined.split(b"\0"):
            try:
                if base_fd is not None:
                    st = stat(name, dir_fd=base_fd, follow_symlinks=follow)
                else:
                    st = stat(name if name.startswith(b"/") else base + name, follow_symlinks=follow)
            except OSError:
                add(MISSING)
                continue
            add((st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino & _INO_MASK))
    return words_digest(words)


def _read_all(fd):
    parts = []
    while True:
        data = os.read(fd, 65536)
        if not data:
            return b"".join(parts)
        parts.append(data)


def current_digests(base, chunks, workers):
    """({chunk index: digest now}, processes used). Chunks are shared round-robin between
    this process and forked workers (one per extra core) when there are enough paths to pay
    for the forks. Relative paths are statted against a descriptor of base."""
    base_b = fsb(base.rstrip("/") + "/")
    base_fd = None
    if _STAT_DIR_FD:
        try:
            base_fd = os.open(base_b, _DIR_FLAGS)
        except OSError:
            return None, 1  # the environment's folder itself is gone
    try:
        return _digests(base_fd, base_b, chunks, workers)
    finally:
        if base_fd is not None:
            os.close(base_fd)


def _digests(base_fd, base_b, chunks, workers):
    def digest(index):
        return stat_chunk(base_fd, base_b, chunks[index][0], chunks[index][1])

    paths = sum(c[0].count(b"\0") + c[1].count(b"\0") + 2 for c in chunks)
    workers = max(1, min(workers, len(chunks)))
    if workers < 2 or paths < PARALLEL_MIN_PATHS or not hasattr(os, "fork"):
        return dict((i, digest(i)) for i in range(len(chunks))), 1
    children = []
    for worker in range(1, workers):
        try:
            read_end, write_end = os.pipe()
            pid = os.fork()
        except OSError:
            break
        if pid == 0:  # the worker: its chunks' digests as JSON on the pipe, then exit at once
            status = 1
            try:
                os.close(read_end)
                mine = dict((i, digest(i)) for i in range(worker, len(chunks), workers))
                view = memoryview(json.dumps(mine).encode("ascii"))
                while view:
                    view = view[os.write(write_end, view):]
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        children.append((pid, read_end, worker))
    done = dict((i, digest(i)) for i in range(0, len(chunks), workers))
    for pid, read_end, worker in children:
        try:
            data = _read_all(read_end)
        finally:
            os.close(read_end)
        _, status = os.waitpid(pid, 0)
        try:
            results = json.loads(data.decode("ascii")) if status == 0 else {}
        except ValueError:
            results = {}
        for index in range(worker, len(chunks), workers):
            # A worker that failed leaves its chunks to this process.
            done[index] = results[str(index)] if str(index) in results else digest(index)
    for index in range(len(chunks)):
        if index not in done:  # a fork that failed
            done[index] = digest(index)
    return done, 1 + len(children)


class Snapshot(object):
    """The replayable result of the last settled audit of one environment."""

    def __init__(self, cache, header):
        self.cache = cache
        self.header = header
        self.path = os.path.join(cache.folder, SNAPSHOT_NAME) if cache.folder else None
        self.workers_used = 1

    def load(self):
        """(the JSON part, the bytes after it) of a snapshot made for this same environment."""
        if not self.path or not self.cache.use or not self.cache.writable:
            return None  # (not writable: the folder is not a private one of ours; never trust it)
        try:
            raw = read_regular(fsb(self.path), MAX_CACHE_BYTES)
            end = raw.index(b"\n")
            data = json.loads(raw[:end].decode("ascii"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("header") != self.header:
            return None
        return data, raw[end + 1:]

    def replay(self, signature, interpreters_now, workers):
        """(data, items) of the last audit when nothing it rests on has changed, else None."""
        loaded = self.load()
        if loaded is None or loaded[0].get("signature") != signature:
            return None
        saved, paths = loaded
        for path, existed in (saved.get("interpreters") or {}).items():
            if interpreters_now(path) != existed:
                return None
        chunks, digests, at = [], [], 0
        for folders_length, files_length, digest in saved.get("chunks") or []:
            middle, end = at + folders_length, at + folders_length + files_length
            chunks.append((paths[at:middle], paths[middle:end]))
            digests.append(digest)
            at = end
        if at != len(paths):
            return None  # cut short
        now, self.workers_used = current_digests(saved["base"], chunks, workers)
        if now is None or any(now.get(i) != digest for i, digest in enumerate(digests)):
            return None
        return saved.get("data"), saved.get("items") or []

    def save(self, signature, watch, settled_record_keys, data, items):
        """Keep this audit for replay if every key it rests on is settled; else drop the old one."""
        if not self.path or not self.cache.writable:
            return False
        meta, paths, newest = watch.chunks() if not watch.unfit and settled_record_keys else (None, None, None)
        if newest is None or newest + self.cache.margin_ns >= self.cache.stamp_ns:
            try:
                os.unlink(fsb(self.path))
            except OSError:
                pass
            return False
        return write_private(self.cache.folder, SNAPSHOT_NAME, {
            "header": self.header, "signature": signature, "interpreters": watch.interpreters,
            "base": watch.base, "chunks": meta, "data": data, "items": items,
        }, paths)


def path_exists(path):
    return os.path.exists(fsb(path))

