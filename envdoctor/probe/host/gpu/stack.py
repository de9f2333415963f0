# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "gpu-stack": the NVIDIA driver version, the GPUs and their compute capability,
# torch's version and CUDA runtime, and, for torch's libraries and every extension module of
# the environment, the GPU code it carries (.nv_fatbin entry headers) and the torch symbols
# it needs that the installed torch does not export. Files are read, never imported: ELF
# headers, section headers, the dynamic sections and the fatbin entry headers, nothing else.
# The ELF reading is in gpu_elf.py, the driver, nvidia-smi and torch/version.py in
# gpu_host.py (with ENVDOCTOR_SYSFS_ROOT, the stand-in root for tests).
#
# The exported torch-namespace symbols of each torch library are kept as 8-byte digests in
# the user's cache (~/.cache/envdoctor/gpu-<digest of the environment's prefix>: a check
# writes nothing inside the environment), owner-only and keyed by the library's stat; the per-binary summaries beside them, keyed
# the same way. A re-check of an unchanged environment reads no ELF file at all.

import hashlib
import json
import os
import re
import struct
import sys
import time

from envdoctor.probe.host.audit.hashing import write_private
from envdoctor.probe.host.audit.record import fsb, stat_key
from envdoctor.probe.host.core import (
    MAX_CACHE_BYTES,
    note_skip,
    open_regular,
    prune_user_caches,
    read_header_block,
    section,
    site_dirs,
    touch_user_cache,
)
from envdoctor.probe.host.gpu.elf import (
    TORCH_LIBS,
    dynamic_needed,
    Elf,
    ElfError,
    ExportTable,
    fatbin_summary,
    torch_undefined,
)
from envdoctor.probe.host.gpu.host import (
    driver_facts,
    host_root,
    read_small,
    read_small_limit,
    smi_facts,
    torch_facts,
)

GPU_CACHE_VERSION = 2  # 2: folders keyed by their stat key, not their mtime
GPU_CACHE_NAME = "gpu-stack-cache"
#: A file changed this close to the run is not cached (its stat key could repeat).
RACY_SECONDS = 3
MAX_MISSING_LISTED = 40
MAX_NAME = 2048
MAX_WALK_ENTRIES = 400000
RECORD_LIMIT = 4 << 20
#: Folders of site-packages never searched for extension modules: torch is read on its own,
#: nvidia/ holds the CUDA libraries (not extensions), the rest is metadata and bytecode.
SKIP_TOP = ("torch", "nvidia", "__pycache__")
_EXTENSION_NAME = re.compile(r"(\.abi3\.so|\.cpython-[^/]*\.so|\.so)$")


# ---------------------------------------------------------------------------------------
# The environment's binaries, with a stat-keyed cache


def extension_files(site, budget, cache):
    """Extension modules under site-packages (not torch's, not nvidia's libraries). The
    folders walked are remembered with their stat keys: when none changed (a file added,
    removed or renamed in a folder changes its mtime and its ctime; an owner can set the
    mtime back with `touch -d`, never the ctime), the last walk's answer stands."""
    snapshot = cache.walk(site)
    if snapshot is not None and same_keys(site, snapshot["dirs"]):
        cache.walk_hits += 1
        return [os.path.join(site, rel) for rel in snapshot["found"]]
    found, dirs = walk_site(site, budget)
    if budget[0] > 0:
        cache.put_walk(site, dirs, found)
    return found


def same_keys(site, dirs):
    """Whether every folder (relative to site) still has its recorded stat key."""
    fd = None
    try:
        if os.stat in getattr(os, "supports_dir_fd", ()):
            fd = os.open(site, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            stat_at = os.stat
            return all(stat_key(stat_at(rel, dir_fd=fd)) == key for rel, key in dirs)
        return all(stat_key(os.stat(os.path.join(site, rel))) == key for rel, key in dirs)
    except (OSError, TypeError, ValueError):
        return False
    finally:
        if fd is not None:
            os.close(fd)


def walk_site(site, budget):
    found, dirs, stack = [], [], [site]
    while stack and budget[0] > 0:
        path = stack.pop()
        try:
            key = stat_key(os.stat(path))  # before listing: a later change shows next time
            with os.scandir(path) as listing:
                entries = list(listing)
        except OSError:
            continue
        dirs.append((path, key))
        budget[0] -= len(entries)
        top = path == site
        for entry in entries:
            name = entry.name
            if top and (name in SKIP_TOP or name.endswith((".dist-info", ".egg-info", ".data"))):
                continue
            try:
                if entry.is_dir(follow_symlinks=top):  # a package folder may be a symlink; nothing below
                    if name != "__pycache__":
                        stack.append(entry.path)
                elif name.endswith(".so") and not name.startswith("lib") and _EXTENSION_NAME.search(name):
                    if entry.is_file(follow_symlinks=False):
                        found.append(entry.path)
                    elif not entry.is_file():  # a FIFO, a link to a device: never opened, but named
                        note_skip(entry.path, "an extension module's name on no regular file; not read")
            except OSError:
                continue
    return sorted(found), dirs


def owner_of(site, path, owners):
    """The distribution a file belongs to: by top_level.txt or the name, else (once per site)
    by the top folders its RECORD lists (sgl_kernel's RECORD holds deep_gemm/)."""
    top = os.path.relpath(path, site).split(os.sep)[0]
    found = owners.get(top) or owners.get(top.lower().replace("-", "_"))
    if found is None and not owners.get("\0records"):
        owners["\0records"] = True
        for entry in list(owners.get("\0dists", [])):
            if entry["name"].lower() == "torch":
                continue
            try:
                text = read_small_limit(os.path.join(os.path.dirname(entry["metadata"]), "RECORD"), RECORD_LIMIT)
            except (OSError, UnicodeError):
                continue
            for line in text.splitlines():
                first = line.split(",", 1)[0].split("/", 1)[0]
                if first and not first.endswith((".dist-info", ".data")) and first != "..":
                    owners.setdefault(first, entry)
        found = owners.get(top)
    return found


def distribution_owners(site):
    owners = {"\0dists": []}
    try:
        names = sorted(os.listdir(site))
    except OSError:
        return owners
    for name in names:
        if not name.endswith(".dist-info"):
            continue
        base = name[: -len(".dist-info")]
        dist, _, version = base.partition("-")
        entry = {"name": dist, "version": version, "metadata": os.path.join(site, name, "METADATA")}
        owners["\0dists"].append(entry)
        owners.setdefault(dist.lower().replace("-", "_"), entry)
        try:
            for line in read_small(os.path.join(site, name, "top_level.txt")).splitlines():
                if line.strip():
                    owners.setdefault(line.strip(), entry)
        except (OSError, UnicodeError):
            pass
    return owners


def torch_pin(owner):
    """The `torch==X` this distribution requires (its own METADATA), if it pins one."""
    if owner is None:
        return None
    if "pin" not in owner:
        owner["pin"] = None
        try:
            for req in requires_dist(owner["metadata"]):
                match = re.match(r"^\s*torch\s*(?:\[[^\]]*\])?\s*\(?\s*==\s*([^\s,;)]+)", req)
                if match and "extra" not in req.partition(";")[2]:
                    owner["pin"] = match.group(1)
        except (OSError, UnicodeError):
            pass
    return owner["pin"]


def requires_dist(path):
    """The Requires-Dist values of a METADATA file's header block. A line scan rather than
    the email parser: importing that costs more than the whole re-check."""
    found = []
    for raw in read_header_block(path).split(b"\n"):
        if raw[:14].lower() == b"requires-dist:":
            found.append(raw[14:].decode("utf-8", "replace").strip())
    return found


class GpuCache(object):
    """What earlier runs learnt, keyed by each file's stat: per binary its summary, per
    torch library the digests of the names looked up in it (exported or not). Trusted only
    in an owner-only folder and file of this user; written owner-only by rename."""

    def __init__(self, folder):
        self.folder = folder
        self.binaries, self.exports, self.walks = {}, {}, {}
        self.used, self.used_exports, self.used_walks = {}, {}, {}
        self.hits = self.walk_hits = 0
        self.dirty = False
        if not folder:
            return
        try:
            st = os.stat(fsb(folder))
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                self.folder = None  # someone else could write here: neither read nor write
                return
            with open_regular(os.path.join(folder, GPU_CACHE_NAME), MAX_CACHE_BYTES) as handle:
                info = os.fstat(handle.fileno())
                if info.st_uid != os.getuid() or info.st_mode & 0o022:
                    return
                data = json.loads(handle.read().decode("utf-8"))
            if data.get("version") == GPU_CACHE_VERSION:
                touch_user_cache(folder)
                self.binaries = valid_entries(data.get("binaries"), ("key", "value"))
                self.exports = valid_entries(data.get("exports"), ("key", "yes", "no"))
                self.walks = valid_entries(data.get("walks"), ("dirs", "found"))
        except (OSError, ValueError, AttributeError):
            pass

    def binary(self, path, key):
        entry = self.binaries.get(path)
        if entry and entry.get("key") == key:
            self.hits += 1
            self.used[path] = entry
            return entry.get("value")
        return None

    def put(self, path, key, st, value):
        if time.time() - max(st.st_mtime, st.st_ctime) < RACY_SECONDS:
            return  # changed too recently: the same stat could follow another change
        self.used[path] = {"key": key, "value": value}
        self.dirty = True

    def walk(self, site):
        entry = self.walks.get(site)
        if entry is not None:
            self.used_walks[site] = entry
        return entry

    def put_walk(self, site, dirs, found):
        if any(time.time() - max(key[1], key[2]) / 1e9 < RACY_SECONDS for _path, key in dirs):
            return  # a folder changed just now: its key could repeat after another change
        self.used_walks[site] = {"dirs": [[os.path.relpath(p, site), m] for p, m in dirs],
                                 "found": [os.path.relpath(p, site) for p in found]}
        self.dirty = True

    def memo(self, path, key):
        """{digest: exported?} for a torch library, empty when its stat changed."""
        entry = self.used_exports.get(path)
        if entry is None:
            old = self.exports.get(path)
            entry = {"key": key, "found": {}}
            if old and old.get("key") == key:
                entry["found"] = dict((int(d), True) for d in old.get("yes", ()))
                entry["found"].update((int(d), False) for d in old.get("no", ()))
            self.used_exports[path] = entry
        return entry["found"]

    def save(self):
        if not self.folder:
            return False
        if (not self.dirty and len(self.used) == len(self.binaries) and set(self.used_exports) == set(self.exports)
                and set(self.used_walks) == set(self.walks)):
            return False
        exports = {}
        for path, entry in self.used_exports.items():
            found = entry["found"]
            exports[path] = {"key": entry["key"], "yes": sorted(d for d, v in found.items() if v),
                             "no": sorted(d for d, v in found.items() if not v)}
        try:
            if not os.path.isdir(self.folder):
                parent = os.path.dirname(self.folder)
                if not os.path.isdir(parent):
                    if os.path.basename(parent) != "envdoctor":
                        return False  # a venv that is not there: create nothing in its place
                    os.makedirs(parent, 0o700)  # ~/.cache/envdoctor, owner-only
                os.mkdir(self.folder, 0o700)
                prune_user_caches(self.folder)
        except FileExistsError:
            pass
        except OSError:
            return False
        return write_private(self.folder, GPU_CACHE_NAME, {"version": GPU_CACHE_VERSION, "binaries": self.used,
                                                           "exports": exports, "walks": self.used_walks})


def valid_entries(table, keys):
    """The entries of a cache table that have the shape this code reads (anything else: gone)."""
    if not isinstance(table, dict):
        return {}
    return dict((k, v) for k, v in table.items() if isinstance(v, dict) and all(key in v for key in keys))


def gpu_cache_folder(prefix):
    """The user's cache, one folder per environment: a check writes nothing inside the
    environment it reads (and a system interpreter's prefix is not ours to write)."""
    digest = hashlib.sha1(fsb(os.path.abspath(prefix) if prefix else sys.prefix)).hexdigest()[:12]
    return os.path.join(os.path.expanduser("~"), ".cache", "envdoctor", "gpu-" + digest)


def file_key(path):
    st = os.stat(path)
    return st, stat_key(st) + [st.st_dev]


def binary_record(path, cache, symbols=True):
    """What one ELF file carries: fatbin summary, DT_NEEDED, the torch symbols it needs
    (not asked of torch's own libraries, which need each other's thousands)."""
    try:
        st, key = file_key(path)
    except OSError as exc:
        return {"error": str(exc)}
    cached = cache.binary(path, key)
    if cached is not None:
        return cached
    try:
        elf = Elf(path)
    except (OSError, ElfError, ValueError, struct.error) as exc:
        return {"error": str(exc), "size": st.st_size}
    try:
        record = {"size": st.st_size, "needed": dynamic_needed(elf), "fatbin": fatbin_summary(elf)}
        uses_torch = symbols and set(record["needed"]) & set(TORCH_LIBS)
        record["torch_needed"] = torch_undefined(elf) if uses_torch else []
    except (OSError, ElfError, ValueError, struct.error, IndexError) as exc:
        record = {"error": "malformed ELF: %s" % exc, "size": st.st_size}
    finally:
        elf.close()
    if "error" not in record:
        cache.put(path, key, st, record)
    return record


def symbol_digest(name):
    return struct.unpack("<q", hashlib.blake2b(name, digest_size=8).digest())[0]


class TorchLibraries(object):
    """torch/lib's libraries: their DT_NEEDED closure and lookups of names in them."""

    def __init__(self, torch, cache):
        self.cache = cache
        self.lib = torch.get("lib") or ""
        self.records = {}
        self.tables = {}
        self.memos = {}
        for name in torch.get("libs", []):
            self.records[name] = binary_record(os.path.join(self.lib, name), cache, symbols=False)

    def scope(self, needed):
        """The torch libraries the loader searches for a binary that needs `needed` (its
        DT_NEEDED ones and theirs, breadth first), and those it needs but torch lacks."""
        order, absent, queue = [], [], [n for n in needed if n in TORCH_LIBS]
        while queue:
            name = queue.pop(0)
            if name in order or name in absent:
                continue
            if name not in self.records or "error" in self.records[name]:
                absent.append(name)
                continue
            order.append(name)
            queue.extend(n for n in self.records[name].get("needed", []) if n in TORCH_LIBS)
        return order, absent

    def exports(self, library, name, digest):
        memo = self.memos.get(library)
        path = None
        if memo is None:
            path = os.path.join(self.lib, library)
            try:
                _st, key = file_key(path)
            except OSError:
                return False
            memo = self.memos[library] = self.cache.memo(path, key)
        if digest not in memo:
            self.cache.dirty = True
            table = self.tables.get(library)
            if table is None:
                elf = Elf(path or os.path.join(self.lib, library))
                try:
                    table = self.tables[library] = ExportTable(elf)
                finally:
                    elf.close()
            memo[digest] = table.exports(name)
        return memo[digest]

    def missing(self, record):
        """(missing names, torch libraries searched, torch libraries needed but absent)."""
        needed = record.get("needed", [])
        scope, absent = self.scope(needed)
        missing = []
        for symbol in record.get("torch_needed", []):
            name = symbol.encode("utf-8")
            digest = symbol_digest(name)
            if not any(self.exports(lib, name, digest) for lib in scope):
                missing.append(symbol)
        return missing, scope, absent


def summarize(record, site, path):
    out = {"path": path, "relpath": os.path.relpath(path, site), "size": record.get("size")}
    for key in ("error", "fatbin", "needed"):
        if record.get(key) is not None:
            out[key] = record[key]
    return out


@section("gpu-stack")
def gpu_stack_section(args, emit):
    started = time.time()
    prefix = os.path.abspath(os.path.expanduser(args["prefix"])) if args.get("prefix") else ""
    root = host_root()
    result = {"driver": driver_facts(root), "smi": smi_facts(), "prefix": prefix or sys.prefix,
              "torch": None, "binaries": []}
    sites = site_dirs(prefix) if prefix else site_dirs("")
    # binaries=False (diff, snapshot): the driver, the GPUs and torch's version, not the code
    # of torch's libraries and of the extensions; the cache (of that code) is left as it is.
    binaries = args.get("binaries", True)
    cache = GpuCache(gpu_cache_folder(prefix) if args.get("cache", True) and binaries else None)
    for site in sites:
        if result["torch"] is None and os.path.isfile(os.path.join(site, "torch", "version.py")):
            result["torch"] = torch_facts(site)
    torch = result["torch"] or {}
    libraries = TorchLibraries(torch if binaries else {}, cache)
    if "libtorch_cuda.so" in libraries.records:
        path = os.path.join(libraries.lib, "libtorch_cuda.so")
        result["binaries"].append(dict(summarize(libraries.records["libtorch_cuda.so"], torch["site"], path),
                                       kind="torch", distribution="torch", version=torch.get("version")))
    budget = [MAX_WALK_ENTRIES]
    for site in sites if binaries else ():
        owners = None
        for path in extension_files(site, budget, cache):
            record = binary_record(path, cache)
            needs_torch = bool(set(record.get("needed", [])) & set(TORCH_LIBS))
            if "error" not in record and not record.get("fatbin") and not needs_torch:
                continue
            if owners is None:
                owners = distribution_owners(site)
            owner = owner_of(site, path, owners)
            item = dict(summarize(record, site, path), kind="extension")
            if owner:
                item.update(distribution=owner["name"], version=owner["version"], torch_pin=torch_pin(owner))
            if needs_torch and "error" not in record:
                try:
                    missing, scope, absent = libraries.missing(record)
                except (OSError, ElfError, ValueError, struct.error) as exc:
                    item["abi_error"] = "reading torch's libraries: %s" % exc
                else:
                    item.update(torch_libs=scope, torch_libs_absent=absent,
                                torch_symbols=len(record.get("torch_needed", [])),
                                missing=[m[:MAX_NAME] for m in missing[:MAX_MISSING_LISTED]],
                                missing_count=len(missing))
            result["binaries"].append(item)
    result["walk_truncated"] = budget[0] <= 0
    result["cache"] = {"folder": cache.folder, "hits": cache.hits, "walks_replayed": cache.walk_hits,
                       "saved": cache.save()}
    result["seconds"] = round(time.time() - started, 4)
    return result
