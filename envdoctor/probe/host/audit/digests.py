# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "digests": what the files of a job are, so that hosts can be compared: for each
# distribution the job imports (those named, and what they require, extras aside), one
# digest over its installed files as they are now (a local edit on one node changes it) with
# the files that no longer match their RECORD named; for each model folder, every file's size
# and hash (config, tokenizer and code files whole; weights by size and a sampled hash).
#
# Bounded: a file larger than FULL_HASH_MAX is read in SAMPLES pieces of SAMPLE_BYTES, never
# whole, and a run reads at most `budget_bytes` (and stops hashing at `deadline` seconds):
# what is left is reported as not hashed, and its digest as unknown, never as different.
# Cached: ~/.cache/envdoctor/digests-<digest of the environment's prefix>, owner-only,
# remembers each file's hash under its (size, mtime_ns, ctime_ns, inode); an entry is kept
# only for a file last changed safely before the run began, so a re-run of an unchanged
# environment stats its files and reads none.

import hashlib
import marshal
import os
import re
import stat
import sys
import time

from envdoctor.probe.host.audit.hashing import (
    COARSE_MARGIN_NS,
    b64_text,
    unsafe_folder,
    write_private_bytes,
)
from envdoctor.probe.host.audit.record import fsb, read_record, stat_key
from envdoctor.probe.host.core import (
    READ_FLAGS,
    canonical_name,
    env_site_dirs,
    interpreter_prefix,
    prune_user_caches,
    read_headers,
    section,
    touch_user_cache,
    venv_prefix_of,
)

DIGEST_CACHE_VERSION = 1
FULL_HASH_MAX = 1 << 20
#: Config, tokenizer and code files of a model are hashed whole up to this size.
MODEL_FULL_HASH_MAX = 256 << 20
SAMPLES = 4
SAMPLE_BYTES = 64 * 1024
DIGEST_MAX_LISTED = 20
MAX_MODEL_FILES = 10000
MAX_MODEL_DEPTH = 3
MAX_DIST_FILES = 200000
#: Suffixes of weight files (read by size and samples, whatever their size).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".h5", ".msgpack", ".onnx", ".npz",
                   ".npy", ".distcp")
_TOKENIZER = re.compile(r"(^|/)(tokenizer[^/]*|vocab[^/]*|merges\.txt|special_tokens_map\.json|added_tokens\.json|"
                        r"[^/]*\.tiktoken|tiktoken\.model|spiece\.model|sentencepiece[^/]*\.model|chat_template[^/]*)$")
_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


class Budget(object):
    """Bytes and seconds left for reading files this run."""

    def __init__(self, max_bytes, seconds):
        self.bytes = max_bytes
        self.deadline = time.time() + seconds
        self.exhausted = False

    def take(self, size):
        if self.exhausted or self.bytes < size or time.time() > self.deadline:
            self.exhausted = True
            return False
        self.bytes -= size
        return True


class DigestCache(object):
    """path -> [size, mtime_ns, ctime_ns, inode, fingerprint]: trusted only for the same stat
    key, kept only for files settled before the run began, written owner-only by rename."""

    def __init__(self, folder, name, use):
        self.folder, self.name = folder, name
        self.entries, self.new = {}, {}
        self.settled_before = time.time() * 1e9 - COARSE_MARGIN_NS
        self.hits = 0
        self.status = "unused" if not use else "empty"
        if use:
            self.load()

    @property
    def path(self):
        return os.path.join(self.folder, self.name)

    def load(self):
        problem = unsafe_folder(self.folder, 0o022) if os.path.isdir(fsb(self.folder)) else None
        if problem:
            self.status = "unavailable: %s" % problem
            return
        try:
            fd = os.open(fsb(self.path), READ_FLAGS | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return
        try:
            info = os.fstat(fd)
            # It holds hashes that are trusted: only a file of ours nobody else can write.
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
                self.status = "unavailable: %s is not a private file of this user" % self.path
                return
            data = marshal.loads(os.read(fd, info.st_size + 1))
            if isinstance(data, dict) and data.get("version") == DIGEST_CACHE_VERSION:
                self.entries = data.get("entries") or {}
                self.status = "used"
        except (OSError, ValueError, EOFError, TypeError):
            self.status = "empty"
        finally:
            os.close(fd)

    def get(self, path, key):
        entry = self.entries.get(path)
        if entry is not None and list(entry[:4]) == key:
            self.hits += 1
            self.keep(path, key, entry[4])
            return entry[4]
        return None

    def keep(self, path, key, value):
        if max(key[1], key[2]) < self.settled_before:
            self.new[path] = key + [value]

    def save(self):
        if self.status.startswith("unavailable") or self.status == "unused":
            return False
        try:
            if not os.path.isdir(fsb(self.folder)):
                os.makedirs(fsb(self.folder), 0o700)
            if unsafe_folder(self.folder, 0o022):
                return False
        except OSError:
            return False
        written = write_private_bytes(self.folder, self.name,
                                      marshal.dumps({"version": DIGEST_CACHE_VERSION, "entries": self.new}))
        if written:
            prune_user_caches(self.path)
            touch_user_cache(self.path)
        return written


def cache_for(prefix, use):
    digest = hashlib.sha1(fsb(prefix)).hexdigest()[:12]
    return DigestCache(os.path.join(os.path.expanduser("~"), ".cache", "envdoctor"), "digests-" + digest, use)


# ---------------------------------------------------------------------------------------
# Reading one file (whole, or by samples), within the budget


def open_for_hash(path):
    """A descriptor of `path` opened as READ_FLAGS opens it, and its stat; OSError for
    anything but a regular file (the one way this module opens a file to read it)."""
    fd = os.open(fsb(path), READ_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError("not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def read_whole(fd, hasher):
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return
        hasher.update(chunk)


def read_samples(fd, size, hasher):
    """SAMPLES pieces of SAMPLE_BYTES spread from the start to the end, after the size."""
    hasher.update(b"size %d\n" % size)
    last = max(0, size - SAMPLE_BYTES)
    for index in range(SAMPLES):
        offset = last * index // (SAMPLES - 1) if SAMPLES > 1 else 0
        os.lseek(fd, offset, os.SEEK_SET)
        hasher.update(os.read(fd, SAMPLE_BYTES))


def file_fingerprint(path, whole_max, cache, budget):
    """(fingerprint, stat key, how): 'sha256:<hex>' for a file read whole, 'sampled:<hex>'
    for one read by samples; ('missing'|'unreadable: ...', None, how) when it cannot be read;
    (None, key, 'budget') when the budget is spent."""
    try:
        key = stat_key(os.stat(fsb(path)))
    except FileNotFoundError:
        return "missing", None, "missing"
    except OSError as exc:
        return "unreadable: %s" % (exc.strerror or exc), None, "error"
    whole = key[0] <= whole_max
    cached = cache.get(path, key)
    if cached is not None:
        return cached, key, "whole" if whole else "sampled"
    if not budget.take(key[0] if whole else SAMPLES * SAMPLE_BYTES):
        return None, key, "budget"
    try:
        fd, info = open_for_hash(path)
    except OSError as exc:
        return "unreadable: %s" % (getattr(exc, "strerror", None) or exc), key, "error"
    try:
        hasher = hashlib.sha256()
        key = stat_key(info)  # what was read, not what was listed
        whole = key[0] <= whole_max
        if whole:
            read_whole(fd, hasher)
        else:
            read_samples(fd, key[0], hasher)
    except OSError as exc:
        return "unreadable: %s" % (exc.strerror or exc), key, "error"
    finally:
        os.close(fd)
    value = ("sha256:" if whole else "sampled:") + hasher.hexdigest()
    cache.keep(path, key, value)
    return value, key, "whole" if whole else "sampled"


# ---------------------------------------------------------------------------------------
# Distributions


def installed_dist_infos(sites):
    """canonical name -> (site, .dist-info folder) of the first one on the path (the one imported)."""
    found = {}
    for site in sites:
        try:
            entries = os.listdir(site)
        except OSError:
            continue
        for entry in entries:
            if entry.endswith(".dist-info"):
                key = canonical_name(entry[: -len(".dist-info")].split("-")[0])
                found.setdefault(key, (site, os.path.join(site, entry)))
    return found


def requirement_names(folder):
    """The names a distribution requires, leaving out what only an extra asks for."""
    try:
        headers = read_headers(os.path.join(folder, "METADATA"))
    except OSError:
        return [], "", ""
    names = []
    for line in headers.get_all("Requires-Dist") or []:
        requirement, _, marker = line.partition(";")
        if "extra" in marker:
            continue
        match = _REQUIREMENT_NAME.match(requirement)
        if match:
            names.append(canonical_name(match.group(1)))
    return names, headers.get("Name") or "", headers.get("Version") or ""


def job_distributions(wanted, installed, closure):
    """The wanted names found installed, with what they require (when `closure`), in order."""
    order, seen, queue, info = [], set(), [canonical_name(n) for n in wanted], {}
    while queue:
        key = queue.pop(0)
        if key in seen or key not in installed:
            continue
        seen.add(key)
        required, name, version = requirement_names(installed[key][1])
        info[key] = (name or key, version)
        order.append(key)
        if closure:
            queue.extend(required)
    return [(key, info[key][0], info[key][1]) for key in order]


def package_rows(folder):
    """The RECORD rows of a distribution's own files inside site-packages: not its
    .dist-info (its METADATA says only the version, and direct_url.json where it came
    from), not scripts outside (their shebang names the venv), not bytecode."""
    try:
        text = open_and_read(os.path.join(folder, "RECORD"))
    except OSError:
        return None
    rows, _, _ = read_record(text)
    meta = os.path.basename(folder)
    kept = []
    for path, algo, digest, _encoding, size in rows:
        if (path.startswith(("../", "/")) or path.split("/", 1)[0] == meta or path.endswith(".pyc")
                or "/__pycache__/" in "/" + path):
            continue
        kept.append((path, algo, digest, size))
    return kept


#: A RECORD larger than this is not one pip wrote (torch's is 2 MB).
DIGEST_RECORD_LIMIT = 64 << 20


def open_and_read(path):
    fd, info = open_for_hash(path)
    try:
        return os.read(fd, min(info.st_size + 1, DIGEST_RECORD_LIMIT)).decode("utf-8", "surrogateescape")
    finally:
        os.close(fd)


def distribution_digest(site, key, name, version, folder, cache, budget):
    result = {"name": name, "version": version, "path": folder, "digest": None, "files": 0,
              "modified": [], "modified_count": 0, "missing": [], "missing_count": 0, "sampled": 0, "unhashed": 0}
    rows = package_rows(folder)
    if rows is None:
        result["record"] = "missing"
        return result
    result["record"] = "ok"
    lines = []
    for relpath, algo, digest, size in rows[:MAX_DIST_FILES]:
        value, key_now, how = file_fingerprint(os.path.join(site, relpath), FULL_HASH_MAX, cache, budget)
        result["files"] += 1
        if value is None:
            result["unhashed"] += 1
            continue
        lines.append("%s\0%s" % (relpath, value))
        if how == "sampled":
            result["sampled"] += 1
        if how == "missing":
            result["missing_count"] += 1
            if len(result["missing"]) < DIGEST_MAX_LISTED:
                result["missing"].append(relpath)
        elif changed(value, how, key_now, algo, digest, size):
            result["modified_count"] += 1
            if len(result["modified"]) < DIGEST_MAX_LISTED:
                result["modified"].append(relpath)
    if len(rows) > MAX_DIST_FILES:
        result["unhashed"] += len(rows) - MAX_DIST_FILES
    if not result["unhashed"]:
        lines.sort()
        result["digest"] = hashlib.sha256("\n".join(lines).encode("utf-8", "surrogateescape")).hexdigest()
    return result


def changed(value, how, key, algo, digest, size):
    """Whether a file differs from its RECORD row: its sha256 when read whole, else its size."""
    if how == "whole" and algo == "sha256" and digest:
        raw = bytes(bytearray.fromhex(value[len("sha256:"):]))
        return (b64_text(raw) if len(digest) != 64 else value[len("sha256:"):]) != digest
    if how in ("whole", "sampled") and size is not None and key is not None:
        return key[0] != size
    return how == "error"


# ---------------------------------------------------------------------------------------
# Model folders


def model_kind(relpath):
    base = relpath.rsplit("/", 1)[-1]
    if base.endswith(WEIGHT_SUFFIXES):
        return "weights"
    if _TOKENIZER.search(relpath):
        return "tokenizer"
    if base.endswith((".json", ".yaml", ".yml", ".txt", ".jinja")):
        return "config"
    if base.endswith(".py"):
        return "code"
    return "other"


def model_files(folder):
    """Relative paths of the files of a model folder (dot-entries skipped), bounded in depth
    and number; (paths, truncated)."""
    found, stack, truncated = [], [("", 0)], False
    while stack:
        rel, depth = stack.pop()
        try:
            entries = sorted(os.listdir(os.path.join(folder, rel) if rel else folder))
        except OSError:
            continue
        for entry in entries:
            if entry.startswith(".") or entry == "__pycache__":
                continue
            relpath = rel + "/" + entry if rel else entry
            full = os.path.join(folder, relpath)
            if os.path.isdir(full) and not os.path.islink(full):
                if depth + 1 < MAX_MODEL_DEPTH:
                    stack.append((relpath, depth + 1))
                continue
            if len(found) >= MAX_MODEL_FILES:
                truncated = True
                break
            found.append(relpath)
    return sorted(found), truncated


def model_digest(folder, cache, budget):
    folder = os.path.abspath(os.path.expanduser(folder))
    result = {"path": folder, "files": {}, "truncated": False, "unhashed": 0}
    if not os.path.isdir(folder):
        result["error"] = "not a directory" if os.path.exists(folder) else "no such directory"
        return result
    paths, result["truncated"] = model_files(folder)
    for relpath in paths:
        full = os.path.join(folder, relpath)
        kind = model_kind(relpath)
        # Weights always by size and samples (a small one is read whole by its samples anyway).
        whole_max = {"weights": -1, "other": FULL_HASH_MAX}.get(kind, MODEL_FULL_HASH_MAX)
        value, key, _how = file_fingerprint(full, whole_max, cache, budget)
        entry = {"kind": kind, "size": key[0] if key else None, "hash": value}
        if value is None:
            result["unhashed"] += 1
        result["files"][relpath] = entry
    return result


@section("digests")
def digests_section(args, emit):
    started = time.time()
    prefix = os.path.abspath(os.path.expanduser(args["prefix"])) if args.get("prefix") else ""
    own = prefix or venv_prefix_of(sys.executable) or interpreter_prefix()
    cache = cache_for(own, args.get("cache", True))
    budget = Budget(int(args.get("budget_bytes", 2 << 30)), float(args.get("seconds", 120)))
    sites = env_site_dirs(prefix or venv_prefix_of(sys.executable) or None)
    installed = installed_dist_infos(sites)
    dists = []
    for key, name, version in job_distributions(args.get("distributions") or [], installed,
                                                args.get("closure", True)):
        site, folder = installed[key]
        dists.append(distribution_digest(site, key, name, version, folder, cache, budget))
    models = [model_digest(folder, cache, budget) for folder in args.get("models") or []]
    saved = cache.save()
    return {"prefix": own, "distributions": dists, "models": models, "budget_exhausted": budget.exhausted,
            "cache": {"path": cache.path, "status": cache.status, "hits": cache.hits, "saved": saved},
            "seconds": round(time.time() - started, 4)}
