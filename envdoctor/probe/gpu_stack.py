# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "gpu-stack": the NVIDIA driver version, the GPUs and their compute capability,
# torch's version and CUDA runtime, and, for torch's libraries and every extension module of
# the environment, the GPU code it carries (.nv_fatbin entry headers) and the torch symbols
# it needs that the installed torch does not export. Files are read, never imported: ELF
# headers, section headers, the dynamic sections and the fatbin entry headers, nothing else.
#
# ENVDOCTOR_SYSFS_ROOT (in the probe's environment) names a folder that stands in for "/"
# when the driver's files are read (sys/module/nvidia/version, proc/driver/nvidia/version,
# the loader folders holding libcuda.so.<ver>, /usr/local/cuda-X.Y/compat), so that a test
# can play a host with a driver; a folder laid out as /sys itself (module/nvidia/version)
# works too. It changes only where a few small text files and file names are read; the
# facts name the path they came from, so a faked root is visible in every report.
#
# The exported torch-namespace symbols of each torch library are kept as 8-byte digests in
# the environment's .envdoctor folder (or the user's cache for a system interpreter),
# owner-only and keyed by the library's stat; the per-binary summaries beside them, keyed
# the same way. A re-check of an unchanged environment reads no ELF file at all.

import hashlib
import json
import os
import re
import struct
import sys
import time
from array import array

from envdoctor.probe.audit_hash import write_private
from envdoctor.probe.audit_record import fsb, stat_key
from envdoctor.probe.core import open_regular, read_headers, run_command, section, site_dirs

GPU_CACHE_VERSION = 1
GPU_CACHE_NAME = "gpu-stack-cache"
#: A file changed this close to the run is not cached (its stat key could repeat).
RACY_SECONDS = 3
#: Torch's own libraries: the ones an extension's symbols are looked up in.
TORCH_LIBS = ("libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so",
              "libtorch_python.so")
#: Mangled names in the c10/at/torch/caffe2 namespaces (also their vtables, typeinfo,
#: guard variables and thunks), and THP* (torch's Python bindings, C or C++ names).
TORCH_SYMBOL = re.compile(
    br"(?:_Z(?:T[VIS]|GV|Thn?\d+_|Tv[n\d_]+)?N[rVK]*[RO]?(?:3c10|2at|5torch|6caffe2)"
    br"|_Z\d+THP|THP|aoti_torch_)")
FATBIN_MAGIC = 0xBA55ED50
ENTRY_PTX, ENTRY_CUBIN = 1, 2
FLAG_ARCH_SPECIFIC = 0x100000
MAX_CONTAINERS = 200000
MAX_ENTRIES = 2000000
MAX_MISSING_LISTED = 40
MAX_WALK_ENTRIES = 400000
MAX_TEXT = 65536
#: Folders of site-packages never searched for extension modules: torch is read on its own,
#: nvidia/ holds the CUDA libraries (not extensions), the rest is metadata and bytecode.
SKIP_TOP = ("torch", "nvidia", "__pycache__")
_EXTENSION_NAME = re.compile(r"(\.abi3\.so|\.cpython-[^/]*\.so|\.so)$")
_VERSION_TEXT = re.compile(r"(\d+\.\d+(?:\.\d+)?)")
_LIBCUDA = re.compile(r"^libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$")

SHT_DYNAMIC, SHT_DYNSYM, SHT_GNU_HASH, SHT_GNU_VERNEED, SHT_GNU_VERSYM = 6, 11, 0x6ffffff6, 0x6ffffffe, 0x6fffffff
DT_NEEDED = 1


class ElfError(Exception):
    pass


class Elf(object):
    """The section headers of a 64-bit ELF file, read with pread (close() when done).

    Only headers and the sections asked for are read. pread rather than mmap: measured on
    torch 2.9.1's 1 GB libtorch_cuda.so, the 3,000 scattered fatbin headers cost 0.22 s of
    first-touch page faults through a fresh mmap and 0.04 s through pread."""

    def __init__(self, path):
        self.handle = open_regular(path)
        try:
            self.fd = self.handle.fileno()
            self.size = os.fstat(self.fd).st_size
            self._parse()
        except BaseException:
            self.handle.close()
            raise

    def read(self, offset, size):
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ElfError("a read outside the file (offset %d, %d bytes)" % (offset, size))
        data = os.pread(self.fd, size, offset)
        if len(data) != size:
            raise ElfError("the file is shorter than its headers say")
        return data

    def _parse(self):
        head = self.read(0, 64) if self.size >= 64 else b""
        if head[:4] != b"\x7fELF":
            raise ElfError("not an ELF file")
        if head[4] != 2:
            raise ElfError("not a 64-bit ELF file")
        self.end = "<" if head[5] == 1 else ">"
        shoff, = struct.unpack_from(self.end + "Q", head, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(self.end + "HHH", head, 0x3A)
        if shoff == 0:
            raise ElfError("no section headers")
        if shentsize != 64:
            raise ElfError("unexpected section header size %d" % shentsize)
        first = self._headers(self.read(shoff, 64))[0]
        if shnum == 0:
            shnum = first[4]  # more than 0xff00 sections: the count is in section 0
        if shstrndx == 0xFFFF:
            shstrndx = first[2]
        if shnum > 1 << 20:
            raise ElfError("too many section headers")
        self.sections = self._headers(self.read(shoff, shnum * 64))
        if shstrndx >= shnum:
            raise ElfError("no section name table")
        names = self.data(self.sections[shstrndx])
        self.by_name = {}
        for header in self.sections:
            self.by_name.setdefault(cstring(names, header[0]), header)

    def _headers(self, raw):
        # (name, type, link, offset, size, entsize, info) of each Elf64_Shdr
        return [(name, kind, link, off, size, entsize, info) for name, kind, _flags, _addr, off, size, link, info,
                _align, entsize in struct.iter_unpack(self.end + "IIQQQQIIQQ", raw)]

    def data(self, header):
        if header[1] == 8:  # SHT_NOBITS
            return b""
        return self.read(header[3], header[4])

    def linked(self, header):
        if header[2] >= len(self.sections):
            raise ElfError("a section links to no section")
        return self.sections[header[2]]

    def of_type(self, kind):
        return [h for h in self.sections if h[1] == kind]

    def close(self):
        self.handle.close()


def cstring(table, index):
    if index >= len(table):
        return b""
    stop = table.find(b"\0", index)
    return table[index:stop if stop >= 0 else len(table)]


def fatbin_summary(elf):
    """The GPU code of the .nv_fatbin section, from the container and entry headers only
    (no payload is read, so compression does not matter): containers grouped by the
    architectures they carry, with how many share each set."""
    header = elf.by_name.get(b".nv_fatbin")
    if header is None or header[1] == 8:
        return None
    start = pos = header[3]
    end = min(start + header[4], elf.size)
    groups, containers, entries = {}, 0, 0
    fmt = elf.end
    while pos + 16 <= end and containers < MAX_CONTAINERS:
        magic, _version, head, payload = struct.unpack(fmt + "IHHQ", elf.read(pos, 16))
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned; padding may sit between them
            continue
        containers += 1
        sass, ptx = set(), set()
        entry, stop = pos + head, min(pos + head + payload, end)
        while entry + 48 <= stop and entries < MAX_ENTRIES:
            kind, _v, entry_head, entry_size, _c, _u, minor, major, arch, _o, _n, flags = struct.unpack(
                fmt + "HHIQIIHHIIIQ", elf.read(entry, 48))
            entries += 1
            suffix = "a" if flags & FLAG_ARCH_SPECIFIC else ""
            if kind == ENTRY_CUBIN:
                sass.add("sm_%d%s" % (arch, suffix))
            elif kind == ENTRY_PTX:
                ptx.add("compute_%d%s@%d.%d" % (arch, suffix, major, minor))
            if entry_head < 48:
                break
            entry += entry_head + entry_size
        key = (tuple(sorted(sass)), tuple(sorted(ptx)))
        groups[key] = groups.get(key, 0) + 1
        pos = max(pos + 16, pos + head + payload)
        pos += (start - pos) % 8
    return {"containers": containers, "entries": entries,
            "groups": [{"sass": list(k[0]), "ptx": list(k[1]), "count": n} for k, n in sorted(groups.items())]}


def dynamic_needed(elf):
    """DT_NEEDED names of the .dynamic section (read with its string table)."""
    found = []
    for header in elf.of_type(SHT_DYNAMIC):
        strtab = elf.data(elf.linked(header))
        raw = elf.data(header)
        for tag, value in struct.iter_unpack(elf.end + "qQ", raw[: len(raw) // 16 * 16]):
            if tag == 0:
                break
            if tag == DT_NEEDED:
                found.append(cstring(strtab, value).decode("utf-8", "replace"))
    return found


def version_bound(elf):
    """Indexes of .gnu.version that name a version of a library (GLIBC_2.34 of libc.so.6):
    a symbol bound to one of them is that library's, never torch's (torch is unversioned)."""
    bound = {}
    for header in elf.of_type(SHT_GNU_VERNEED):
        strtab = elf.data(elf.linked(header))
        data, off, guard = elf.data(header), 0, 0
        while off + 16 <= len(data) and guard < 4096:
            guard += 1
            _ver, count, name, aux, nxt = struct.unpack_from(elf.end + "HHIII", data, off)
            library = cstring(strtab, name).decode("utf-8", "replace")
            a = off + aux
            for _ in range(min(count, 4096)):
                if a + 16 > len(data):
                    break
                _hash, _flags, other, vname, anext = struct.unpack_from(elf.end + "IHHII", data, a)
                bound[other & 0x7FFF] = (library, cstring(strtab, vname).decode("utf-8", "replace"))
                if not anext:
                    break
                a += anext
            if not nxt:
                break
            off += nxt
    return bound


def torch_undefined(elf):
    """Undefined, non-weak dynamic symbols in torch's namespaces that no version binds to
    another library: what the dynamic loader must find in the torch libraries."""
    tables = elf.of_type(SHT_DYNSYM)
    if not tables:
        return []
    raw = elf.data(tables[0])
    strtab = elf.data(elf.linked(tables[0]))
    versym_headers = elf.of_type(SHT_GNU_VERSYM)
    versym = elf.data(versym_headers[0]) if versym_headers else b""
    bound = version_bound(elf) if versym else {}
    names = []
    match = TORCH_SYMBOL.match
    for index, (name, info, shndx) in enumerate(struct.iter_unpack(elf.end + "IBxH16x", raw[: len(raw) // 24 * 24])):
        if shndx != 0 or name == 0 or info >> 4 != 1:  # defined, unnamed, or local/weak
            continue
        if bound and 2 * index + 2 <= len(versym):
            if (struct.unpack_from(elf.end + "H", versym, 2 * index)[0] & 0x7FFF) in bound:
                continue
        if match(strtab, name):
            names.append(cstring(strtab, name).decode("utf-8", "replace"))
    return sorted(set(names))


def gnu_hash(name):
    h = 5381
    for byte in bytearray(name):
        h = (h * 33 + byte) & 0xFFFFFFFF
    return h


class ExportTable(object):
    """Looks names up in a library's .gnu.hash table, as the dynamic loader does: only the
    buckets and chains of the names asked for are compared, never the whole symbol table."""

    def __init__(self, elf):
        self.elf = elf
        tables = elf.of_type(SHT_DYNSYM)
        hashes = [h for h in elf.sections if h[1] == SHT_GNU_HASH]
        self.symbols = elf.data(tables[0]) if tables else b""
        self.strtab = elf.data(elf.linked(tables[0])) if tables else b""
        self.all = None
        if hashes and tables:
            data = elf.data(hashes[0])
            self.nbuckets, self.symoffset, bloom_size, self.shift = struct.unpack_from(elf.end + "IIII", data, 0)
            bloom_end = 16 + 8 * bloom_size
            self.bloom = struct.unpack_from(elf.end + "%dQ" % bloom_size, data, 16)
            self.buckets = struct.unpack_from(elf.end + "%dI" % self.nbuckets, data, bloom_end)
            chain_start = bloom_end + 4 * self.nbuckets
            self.chains = array("I", data[chain_start:chain_start + (len(data) - chain_start) // 4 * 4])
            if elf.end == ">" and sys.byteorder == "little" or elf.end == "<" and sys.byteorder == "big":
                self.chains.byteswap()
        else:
            self.all = set(self._scan())  # no .gnu.hash (rare): read every defined name once

    def _scan(self):
        for name, info, other, shndx in struct.iter_unpack(self.elf.end + "IBBH16x", self.symbols):
            if shndx and name and (info >> 4) in (1, 2, 10) and other & 3 not in (1, 2):
                yield cstring(self.strtab, name)

    def exports(self, name):
        if self.all is not None:
            return name in self.all
        h = gnu_hash(name)
        bloom = self.bloom[(h // 64) % len(self.bloom)] if self.bloom else 0
        mask = (1 << (h % 64)) | (1 << ((h >> self.shift) % 64))
        if bloom & mask != mask or not self.nbuckets:
            return False
        index = self.buckets[h % self.nbuckets]
        if index < self.symoffset:
            return False
        fmt = self.elf.end + "IBBH"
        while 0 <= index - self.symoffset < len(self.chains):
            chained = self.chains[index - self.symoffset]
            if (chained | 1) == (h | 1) and 24 * index + 8 <= len(self.symbols):
                sym, info, other, shndx = struct.unpack_from(fmt, self.symbols, 24 * index)
                if cstring(self.strtab, sym) == name:
                    return bool(shndx) and (info >> 4) in (1, 2, 10) and other & 3 not in (1, 2)
            if chained & 1:
                return False
            index += 1
        return False


# ---------------------------------------------------------------------------------------
# The driver, the GPUs, torch


def host_root():
    root = os.environ.get("ENVDOCTOR_SYSFS_ROOT") or ""
    return os.path.abspath(root) if root else ""


def rooted(root, path):
    return os.path.join(root, path.lstrip("/")) if root else path


def read_small(path):
    with open_regular(path) as handle:
        return handle.read(MAX_TEXT).decode("utf-8", "replace")


def driver_facts(root):
    """The kernel module's version (sysfs, then procfs), user-space libcuda.so.<ver> names
    and the cuda-compat folders, each with where it was read."""
    facts = {"root": root or None, "kernel": None, "libcuda": [], "compat": [], "errors": []}
    candidates = [("sys/module/nvidia/version", "sys")]
    if root and os.path.isfile(os.path.join(root, "module", "nvidia", "version")):
        candidates.insert(0, ("module/nvidia/version", "sys"))
    candidates.append(("proc/driver/nvidia/version", "proc"))
    for relative, kind in candidates:
        path = rooted(root, "/" + relative)
        try:
            text = read_small(path)
        except (OSError, UnicodeError) as exc:
            if getattr(exc, "errno", None) not in (2, 20):
                facts["errors"].append("%s: %s" % (path, exc))
            continue
        line = text.strip().splitlines()[0] if text.strip() else ""
        if kind == "proc":  # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed ..."
            found = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", text)
            version = found.group(1) if found else None
        else:
            found = _VERSION_TEXT.match(line.strip())
            version = found.group(1) if found else None
        if version:
            facts["kernel"] = {"version": version, "source": path}
            break
        facts["errors"].append("%s: no version in %r" % (path, line[:80]))
    facts["libcuda"] = libcuda_files(root)
    facts["compat"] = compat_folders(root)
    return facts


def loader_folders(root):
    folders = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p.startswith("/")]
    folders += ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu",
                "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64", "/usr/lib/wsl/lib"]
    seen, result = set(), []
    for folder in folders:
        if folder not in seen:
            seen.add(folder)
            result.append(folder)
    return result


def libcuda_files(root):
    found = []
    for order, folder in enumerate(loader_folders(root)):
        path = rooted(root, folder)
        try:
            names = os.listdir(path)
        except OSError:
            continue
        for name in sorted(names):
            match = _LIBCUDA.match(name)
            if match and match.group(1).count(".") >= 1 and not name.endswith(".so.1"):
                found.append({"path": os.path.join(path, name), "version": match.group(1), "order": order,
                              "ld_library_path": folder in os.environ.get("LD_LIBRARY_PATH", "").split(":")})
    return found


def compat_folders(root):
    """/usr/local/cuda-X.Y/compat with its libcuda version, and whether the loader would pick
    it first (LD_LIBRARY_PATH before the system folders, or an ld.so.conf.d entry)."""
    import glob

    ld_path = [p.rstrip("/") for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    conf_text = ""
    for conf in sorted(glob.glob(rooted(root, "/etc/ld.so.conf.d/*.conf")))[:64]:
        try:
            conf_text += read_small(conf) + "\n"
        except (OSError, UnicodeError):
            pass
    found = []
    for folder in sorted(glob.glob(rooted(root, "/usr/local/cuda*/compat")))[:16]:
        host_folder = "/" + os.path.relpath(folder, root) if root else folder
        versions = []
        try:
            versions = sorted(m.group(1) for m in (_LIBCUDA.match(n) for n in os.listdir(folder)) if m)
        except OSError:
            pass
        found.append({"path": folder, "versions": versions,
                      "on_ld_library_path": host_folder.rstrip("/") in ld_path,
                      "in_ld_so_conf": host_folder.rstrip("/") in conf_text})
    return found


def smi_facts():
    import shutil

    smi = shutil.which("nvidia-smi")
    if not smi:
        return {"path": None, "gpus": []}
    fields = "name,compute_cap,driver_version"
    status, out, err = run_command([smi, "--query-gpu=" + fields, "--format=csv,noheader"], timeout=20)
    if status != 0 and "compute_cap" in (out + err):
        fields = "name,driver_version"  # drivers before R510 know no compute_cap field
        status, out, err = run_command([smi, "--query-gpu=" + fields, "--format=csv,noheader"], timeout=20)
    result = {"path": smi, "status": status, "fields": fields.split(","), "gpus": []}
    if status != 0:
        result["error"] = (err.strip() or out.strip())[:500]
        return result
    for line in out.splitlines()[:256]:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(result["fields"]) or not parts[0]:
            continue
        result["gpus"].append(dict(zip(result["fields"], parts)))
    return result


_PY_ASSIGN = re.compile(r"^(__version__|cuda|git_version|hip)\s*(?::[^=]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)",
                        re.M)


def torch_facts(site):
    """torch/version.py read as text (torch is never imported), and its libraries' paths."""
    folder = os.path.join(site, "torch")
    try:
        text = read_small(os.path.join(folder, "version.py"))
    except (OSError, UnicodeError) as exc:
        return {"error": "torch/version.py: %s" % exc, "site": site}
    values = {}
    for match in _PY_ASSIGN.finditer(text):
        values[match.group(1)] = match.group(2) if match.group(2) is not None else match.group(3)
    lib = os.path.join(folder, "lib")
    return {"site": site, "version": values.get("__version__"), "cuda": values.get("cuda"),
            "hip": values.get("hip"), "git_version": values.get("git_version"), "lib": lib,
            "libs": sorted(n for n in TORCH_LIBS if os.path.isfile(os.path.join(lib, n)))}


# ---------------------------------------------------------------------------------------
# The environment's binaries, with a stat-keyed cache


def extension_files(site, budget):
    """Extension modules under site-packages (not torch's, not nvidia's libraries)."""
    found, stack = [], []
    try:
        tops = sorted(os.listdir(site))
    except OSError:
        return found
    for name in tops:
        if name in SKIP_TOP or name.endswith((".dist-info", ".egg-info", ".data")):
            continue
        stack.append(os.path.join(site, name))
    stack.reverse()
    while stack and budget[0] > 0:
        path = stack.pop()
        try:
            entries = list(os.scandir(path)) if not path.endswith(".so") else None
        except NotADirectoryError:
            entries = None
        except OSError:
            continue
        if entries is None:
            if _EXTENSION_NAME.search(path) and not os.path.basename(path).startswith("lib"):
                found.append(path)
            continue
        budget[0] -= len(entries)
        for entry in sorted(entries, key=lambda e: e.name, reverse=True):
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        stack.append(entry.path)
                elif entry.name.endswith(".so") and entry.is_file(follow_symlinks=False):
                    if _EXTENSION_NAME.search(entry.name) and not entry.name.startswith("lib"):
                        found.append(entry.path)
            except OSError:
                continue
    return sorted(found)


def owner_of(site, path, owners):
    """The distribution a file belongs to, from top_level.txt or the name (no RECORD read)."""
    top = os.path.relpath(path, site).split(os.sep)[0]
    return owners.get(top) or owners.get(top.lower().replace("-", "_"))


def distribution_owners(site):
    owners = {}
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
            for req in read_headers(owner["metadata"]).get_all("Requires-Dist") or []:
                match = re.match(r"^\s*torch\s*(?:\[[^\]]*\])?\s*\(?\s*==\s*([^\s,;)]+)", req)
                if match and "extra" not in req.partition(";")[2]:
                    owner["pin"] = match.group(1)
        except (OSError, UnicodeError):
            pass
    return owner["pin"]


class GpuCache(object):
    """What earlier runs learnt, keyed by each file's stat: per binary its summary, per
    torch library the digests of the names looked up in it (exported or not). Trusted only
    in an owner-only folder and file of this user; written owner-only by rename."""

    def __init__(self, folder):
        self.folder = folder
        self.binaries, self.exports = {}, {}
        self.used, self.used_exports = {}, {}
        self.hits = 0
        self.dirty = False
        if not folder:
            return
        try:
            st = os.stat(fsb(folder))
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                self.folder = None  # someone else could write here: neither read nor write
                return
            with open_regular(os.path.join(folder, GPU_CACHE_NAME)) as handle:
                info = os.fstat(handle.fileno())
                if info.st_uid != os.getuid() or info.st_mode & 0o022:
                    return
                data = json.loads(handle.read().decode("utf-8"))
            if data.get("version") == GPU_CACHE_VERSION:
                self.binaries = data.get("binaries") or {}
                self.exports = data.get("exports") or {}
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
        if not self.dirty and len(self.used) == len(self.binaries) and set(self.used_exports) == set(self.exports):
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
                    os.makedirs(parent, 0o700)
                os.mkdir(self.folder, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return False
        return write_private(self.folder, GPU_CACHE_NAME,
                             {"version": GPU_CACHE_VERSION, "binaries": self.used, "exports": exports})


def gpu_cache_folder(prefix):
    if prefix:
        return os.path.join(prefix, ".envdoctor")
    # The default interpreter's prefix is a system folder (/usr): keep the cache in $HOME.
    digest = hashlib.sha1(fsb(sys.prefix)).hexdigest()[:12]
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
    cache = GpuCache(gpu_cache_folder(prefix) if args.get("cache", True) else None)
    for site in sites:
        if result["torch"] is None and os.path.isfile(os.path.join(site, "torch", "version.py")):
            result["torch"] = torch_facts(site)
    torch = result["torch"] or {}
    libraries = TorchLibraries(torch, cache)
    if "libtorch_cuda.so" in libraries.records:
        path = os.path.join(libraries.lib, "libtorch_cuda.so")
        result["binaries"].append(dict(summarize(libraries.records["libtorch_cuda.so"], torch["site"], path),
                                       kind="torch", distribution="torch", version=torch.get("version")))
    budget = [MAX_WALK_ENTRIES]
    for site in sites:
        owners = None
        for path in extension_files(site, budget):
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
                                missing=missing[:MAX_MISSING_LISTED], missing_count=len(missing))
            result["binaries"].append(item)
    result["walk_truncated"] = budget[0] <= 0
    result["cache"] = {"folder": cache.folder, "hits": cache.hits, "saved": cache.save()}
    result["seconds"] = round(time.time() - started, 4)
    return result
