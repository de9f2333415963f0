# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "gpu-stack" section (sent before gpu_stack.py): what an ELF shared object
# says without being loaded. Only the ELF header, the section headers, the dynamic sections
# (.dynamic, .dynsym, .dynstr, .gnu.version, .gnu.version_r, .gnu.hash) and the entry
# headers of .nv_fatbin are read.
#
# The fatbin layout (no payload is read, so LZ4/zstd compression does not matter): a
# container is a 16-byte header (magic 0xBA55ED50 u32, version u16, header size u16,
# payload size u64) followed by entries; an entry header holds the kind (u16 at 0: 1 PTX,
# 2 cubin), its header size (u32 at 4), payload size (u64 at 8), the PTX ISA version (minor
# u16 at 24, major u16 at 26), the SM architecture (u32 at 28) and flags (u64 at 40:
# 0x2000 LZ4, 0x100000 the arch-specific "a" variant). Checked on torch 2.9.1's
# libtorch_cuda.so and vllm 0.11.0's, sgl_kernel 0.3.21's and torchao 0.18.0's extensions.

import os
import re
import struct
import sys
from array import array

from envdoctor.probe.host.core import open_regular

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

# Budgets: what a real library needs, many times over (torch 2.9.1's libtorch_cuda.so has 40
# sections, about 3,000 fatbin headers and 1.1 MB of padding between them at most; its
# libtorch_cpu.so some 200,000 dynamic symbols). A file past one is a malformed ELF.
MAX_SECTIONS = 4096
#: Bytes read from one file in all (headers and the sections asked for), and per section.
MAX_FILE_READ = 512 << 20
MAX_SECTION_READ = 256 << 20
MAX_DYNAMIC_SYMBOLS = 2000000
#: Steps along one .gnu.hash chain (real chains are a few entries long).
MAX_CHAIN_STEPS = 4096
#: Fatbin container and entry headers read, and bytes of padding searched for the next container.
MAX_FATBIN_HEADERS = 200000
MAX_FATBIN_PADDING = 64 << 20
PADDING_CHUNK = 1 << 20
#: Longest name read from a string table: a section name, a library, a symbol (mangled C++
#: names of deeply nested templates reach a few KB).
MAX_SECTION_NAME = 256
MAX_LIBRARY_NAME = 4096
MAX_SYMBOL_NAME = 65536
#: .gnu.version_r: libraries and versions named.
MAX_VERSION_NEEDS = 65536

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
        self.left = MAX_FILE_READ
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
        if size > MAX_SECTION_READ:
            raise ElfError("a read of %d bytes (at offset %d), more than the %d MiB read of one section"
                           % (size, offset, MAX_SECTION_READ >> 20))
        if size > self.left:
            raise ElfError("more than the %d MiB read of one file" % (MAX_FILE_READ >> 20))
        self.left -= size
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
        if shnum > MAX_SECTIONS:
            raise ElfError("%d section headers, more than the %d read" % (shnum, MAX_SECTIONS))
        self.sections = self._headers(self.read(shoff, shnum * 64))
        if shstrndx >= shnum:
            raise ElfError("no section name table")
        names = self.data(self.sections[shstrndx])
        self.by_name = {}
        for header in self.sections:
            try:
                name = cstring(names, header[0], MAX_SECTION_NAME)
            except ElfError:
                continue  # no section this code reads has such a name
            self.by_name.setdefault(name, header)

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


def cstring(table, index, limit=MAX_SYMBOL_NAME):
    """The NUL-ended name at `index` of a string table; a name without its NUL within `limit`
    bytes is an ElfError (searching on to the table's end, name after name, is what made a
    256 KiB table without NUL cost seconds)."""
    if index >= len(table):
        return b""
    stop = table.find(b"\0", index, index + limit + 1)
    if stop < 0:
        if len(table) - index <= limit:
            return table[index:]  # the table's last name, its NUL missing
        raise ElfError("a name of more than %d bytes (no NUL) in a string table" % limit)
    return table[index:stop]


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
    budget = {"headers": MAX_FATBIN_HEADERS, "padding": MAX_FATBIN_PADDING}
    fmt = elf.end
    while pos + 16 <= end:
        spend(budget, "headers", 1, "fatbin headers")
        magic, _version, head, payload = struct.unpack(fmt + "IHHQ", elf.read(pos, 16))
        if magic != FATBIN_MAGIC:
            pos = next_container(elf, pos, end, budget)
            continue
        containers += 1
        sass, ptx = set(), set()
        entry, stop = pos + head, min(pos + head + payload, end)
        while entry + 48 <= stop:
            spend(budget, "headers", 1, "fatbin headers")
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


def spend(budget, kind, amount, what):
    budget[kind] -= amount
    if budget[kind] < 0:
        raise ElfError("more %s than the budget allows (%s)" % (what, {
            "headers": "%d" % MAX_FATBIN_HEADERS, "padding": "%d MiB" % (MAX_FATBIN_PADDING >> 20)}[kind]))


def next_container(elf, pos, end, budget):
    """The next 8-aligned position (from `pos`, which is aligned) where a container's magic
    stands, or `end`: padding is searched a chunk at a time, not 8 bytes per read (a 64 MiB
    sparse section took a minute that way), and only up to MAX_FATBIN_PADDING bytes."""
    magic = struct.pack(elf.end + "I", FATBIN_MAGIC)
    while pos + 16 <= end:
        size = min(PADDING_CHUNK, end - pos)
        spend(budget, "padding", size, "padding between fatbin containers")
        chunk = elf.read(pos, size)
        at = chunk.find(magic)
        while at >= 0 and at % 8:
            at = chunk.find(magic, at + 1)
        if at >= 0:
            return pos + at
        pos += size - size % 8
    return end


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
                found.append(cstring(strtab, value, MAX_LIBRARY_NAME).decode("utf-8", "replace"))
                if len(found) > MAX_SECTIONS:
                    raise ElfError("more than %d DT_NEEDED entries" % MAX_SECTIONS)
    return found


def version_bound(elf):
    """Indexes of .gnu.version that name a version of a library (GLIBC_2.34 of libc.so.6):
    a symbol bound to one of them is that library's, never torch's (torch is unversioned)."""
    bound = {}
    steps = 0
    for header in elf.of_type(SHT_GNU_VERNEED):
        strtab = elf.data(elf.linked(header))
        data, off = elf.data(header), 0
        while off + 16 <= len(data):
            steps += 1
            _ver, count, name, aux, nxt = struct.unpack_from(elf.end + "HHIII", data, off)
            library = cstring(strtab, name, MAX_LIBRARY_NAME).decode("utf-8", "replace")
            a = off + aux
            for _ in range(count):
                steps += 1
                if a + 16 > len(data) or steps > MAX_VERSION_NEEDS:
                    break
                _hash, _flags, other, vname, anext = struct.unpack_from(elf.end + "IHHII", data, a)
                bound[other & 0x7FFF] = (library, cstring(strtab, vname, MAX_LIBRARY_NAME).decode("utf-8", "replace"))
                if not anext:
                    break
                a += anext
            if not nxt or steps > MAX_VERSION_NEEDS:
                break
            off += nxt
    return bound


def torch_undefined(elf):
    """Undefined, non-weak dynamic symbols in torch's namespaces that no version binds to
    another library: what the dynamic loader must find in the torch libraries."""
    tables = elf.of_type(SHT_DYNSYM)
    if not tables:
        return []
    raw = symbol_table(elf, tables[0])
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


def symbol_table(elf, header):
    """The bytes of a .dynsym section, refused beyond MAX_DYNAMIC_SYMBOLS entries."""
    if header[4] // 24 > MAX_DYNAMIC_SYMBOLS:
        raise ElfError("%d dynamic symbols, more than the %d read" % (header[4] // 24, MAX_DYNAMIC_SYMBOLS))
    return elf.data(header)


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
        self.symbols = symbol_table(elf, tables[0]) if tables else b""
        self.strtab = elf.data(elf.linked(tables[0])) if tables else b""
        self.all = None
        if hashes and tables:
            data = elf.data(hashes[0])
            self.nbuckets, self.symoffset, bloom_size, self.shift = struct.unpack_from(elf.end + "IIII", data, 0)
            bloom_end = 16 + 8 * bloom_size
            if bloom_end + 4 * self.nbuckets > len(data):
                raise ElfError(".gnu.hash is shorter than its bloom filter and buckets")
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
        steps = 0
        while 0 <= index - self.symoffset < len(self.chains):
            steps += 1
            if steps > MAX_CHAIN_STEPS:
                raise ElfError("a .gnu.hash chain of more than %d entries (no end mark)" % MAX_CHAIN_STEPS)
            chained = self.chains[index - self.symoffset]
            if (chained | 1) == (h | 1) and 24 * index + 8 <= len(self.symbols):
                sym, info, other, shndx = struct.unpack_from(fmt, self.symbols, 24 * index)
                if cstring(self.strtab, sym) == name:
                    return bool(shndx) and (info >> 4) in (1, 2, 10) and other & 3 not in (1, 2)
            if chained & 1:
                return False
            index += 1
        return False
