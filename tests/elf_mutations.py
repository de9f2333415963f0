"""Hostile variants of real shared objects, for the ELF budgets and the fuzz tests.

Each variant rewrites fields of a real ELF file (the linker's output, or a wheel's) in place:
its section headers are located from the ELF header, one of them is pointed at a region
appended to the file (sparse: a region of gigabytes costs no disk), or given a table made
here. The layout read is ELF64's (Elf64_Ehdr, Elf64_Shdr), little-endian as on x86-64.
:func:`fuzz` reads mutated copies as the gpu-stack section does, each within :func:`bounded`.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import struct
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from envdoctor.probe.host.gpu import elf as gpu_elf
from envdoctor.probe.host.gpu import stack as gpu_stack

SHDR = struct.Struct("<IIQQQQIIQQ")  # name, type, flags, addr, offset, size, link, info, align, entsize
SHT_DYNSYM, SHT_GNU_HASH = 11, 0x6FFFFFF6


@dataclass
class Section:
    index: int
    name: bytes
    type: int
    offset: int
    size: int
    at: int  # where its header is in the file


def sections(path: Path) -> list[Section]:
    """The section headers of an unmutated ELF file (read where they are: the file may be a
    sparse one of gigabytes)."""
    with open(path, "rb") as handle:
        head = handle.read(64)
        shoff, = struct.unpack_from("<Q", head, 0x28)
        shnum, shstrndx = struct.unpack_from("<HH", head, 0x3C)
        handle.seek(shoff)
        raw = handle.read(64 * shnum)
        headers = [SHDR.unpack_from(raw, 64 * i) for i in range(shnum)]
        names = headers[shstrndx]
        handle.seek(names[4])
        table = handle.read(names[5])
    found = []
    for index, header in enumerate(headers):
        end = table.find(b"\0", header[0])
        found.append(Section(index, table[header[0]:end], header[1], header[4], header[5], shoff + 64 * index))
    return found


def section(path: Path, name: bytes) -> Section:
    return next(s for s in sections(path) if s.name == name)


def set_section(path: Path, found: Section, *, offset: int | None = None, size: int | None = None) -> None:
    """Rewrite a section header's offset and size (Elf64_Shdr at 24 and 32)."""
    with open(path, "r+b") as handle:
        if offset is not None:
            handle.seek(found.at + 24)
            handle.write(struct.pack("<Q", offset))
        if size is not None:
            handle.seek(found.at + 32)
            handle.write(struct.pack("<Q", size))


def append_region(path: Path, data: bytes = b"", sparse: int = 0) -> int:
    """Append `data` (8-aligned) then `sparse` bytes of hole; returns where the region starts."""
    with open(path, "r+b") as handle:
        handle.seek(0, os.SEEK_END)
        start = handle.tell() + (-handle.tell() % 8)
        handle.truncate(start)
        handle.seek(start)
        handle.write(data)
        handle.truncate(start + len(data) + sparse)
    return start


def point_section_at_hole(path: Path, name: bytes, size: int) -> None:
    """Section `name` made `size` bytes of zeros at the end of the file (no disk used)."""
    set_section(path, section(path, name), offset=append_region(path, sparse=size), size=size)


def endless_gnu_hash_chain(path: Path, length: int) -> None:
    """.gnu.hash replaced by one whose bloom filter passes every name and whose only bucket
    starts a chain of `length` entries without the end bit."""
    found = next(s for s in sections(path) if s.type == SHT_GNU_HASH)
    table = struct.pack("<IIII", 1, 1, 1, 6) + struct.pack("<Q", (1 << 64) - 1) + struct.pack("<I", 1)
    table += b"\0" * (4 * length)
    set_section(path, found, offset=append_region(path, table), size=len(table))


def many_sections_without_names(path: Path, count: int = (1 << 20) - 1, table: int = 256 << 10) -> None:
    """The ELF header says e_shnum 0 and section 0 holds `count` (the way files of more than
    0xff00 sections say it); the name table is `table` bytes without a NUL."""
    names = append_region(path, b"A" * table)
    headers_at = append_region(path, b"", 0)
    first = SHDR.pack(0, 0, 0, 0, 0, count, 0, 0, 0, 0)
    strtab = SHDR.pack(0, 3, 0, 0, names, table, 0, 0, 1, 0)
    with open(path, "r+b") as handle:
        handle.seek(headers_at)
        handle.write(first + strtab)
        handle.truncate(headers_at + 64 * count)
        handle.seek(0x28)
        handle.write(struct.pack("<Q", headers_at))
        handle.seek(0x3C)
        handle.write(struct.pack("<HH", 0, 1))


def sparse_file(path: Path, size: int) -> None:
    """The file grown to `size` bytes with a hole (a 4 GiB .so taking 4 KB of disk)."""
    with open(path, "r+b") as handle:
        handle.truncate(size)


#: Values a mutated field takes: edges of its width, the file's own size, a sparse far end.
def interesting(rng: random.Random, width: int, file_size: int) -> int:
    top = (1 << (8 * width)) - 1
    choices = [0, 1, 8, 16, 64, top, top >> 1, file_size, file_size - 8, file_size + 8, 1 << 20, 1 << 30,
               rng.randrange(top + 1)]
    return rng.choice(choices) & top


def mutate(path: Path, rng: random.Random, found: list[Section]) -> str:
    """One random mutation of a real ELF file, in place, given its sections as they were before
    any mutation; returns what was done (for a failure's message)."""
    size = path.stat().st_size
    kind = rng.choice(["ehdr", "shdr", "shdr", "content", "content", "hole"])
    with open(path, "r+b") as handle:
        if kind == "ehdr":
            field, width = rng.choice([(0x28, 8), (0x3A, 2), (0x3C, 2), (0x3E, 2), (0x05, 1)])
            value = interesting(rng, width, size)
            handle.seek(field)
            handle.write(value.to_bytes(width, "little"))
            return f"ELF header field at {field:#x} = {value}"
        target = rng.choice(found)
        if kind == "shdr":
            field, width = rng.choice([(0, 4), (4, 4), (24, 8), (32, 8), (40, 4), (56, 8)])
            value = interesting(rng, width, size)
            handle.seek(target.at + field)
            handle.write(value.to_bytes(width, "little"))
            return f"section {target.name!r} header field {field} = {value}"
        if kind == "content" and target.size and target.offset + target.size <= size:
            count = rng.randint(1, 16)
            for _ in range(count):
                at = target.offset + rng.randrange(target.size)
                handle.seek(at)
                handle.write(bytes([rng.choice([0, 0xFF, rng.randrange(256)])]))
            return f"{count} bytes of {target.name!r} changed"
    hole = rng.choice([1 << 20, 64 << 20, 1 << 30, 4 << 30])
    set_section(path, target, offset=append_region(path, sparse=hole), size=hole)
    return f"section {target.name!r} pointed at a hole of {hole} bytes"


#: What one hostile file may cost, at most.
SECONDS = 2.0
PEAK_BYTES = 200 << 20
#: Errors the gpu-stack section turns into a binary's "error" (anything else would be a bug).
REPORTED = (OSError, gpu_elf.ElfError, ValueError, struct.error, IndexError)


@contextmanager
def bounded() -> Iterator[None]:
    """Asserts that the block took at most SECONDS (an alarm ends it at twice that) and raised
    this process's peak memory by at most PEAK_BYTES (the kernel's high-water mark, reset
    first through clear_refs)."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    before = _rss()
    started = time.monotonic()

    def too_long(signum: int, frame: object) -> None:
        raise AssertionError(f"still running after {2 * SECONDS:g} s")

    previous = signal.signal(signal.SIGALRM, too_long)
    signal.setitimer(signal.ITIMER_REAL, 2 * SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    elapsed = time.monotonic() - started
    assert elapsed < SECONDS, f"took {elapsed:.1f} s"
    assert _hwm() - before < PEAK_BYTES, f"peak memory grew by {(_hwm() - before) >> 20} MiB"


def _status(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise AssertionError(field)


def _rss() -> int:
    return _status("VmRSS:")


def _hwm() -> int:
    return _status("VmHWM:")


class NoCache:
    """binary_record's cache, remembering nothing."""

    def binary(self, path: str, key: object) -> None:
        return None

    def put(self, *args: object) -> None:
        return None


def read_like_the_section(path: Path) -> dict[str, object]:
    """What gpu-stack does with one binary: its record, then lookups of its torch names (and a
    few others) in its own export table, as TorchLibraries.exports does in torch's."""
    record = gpu_stack.binary_record(str(path), NoCache())
    if "error" in record:
        return record
    elf = gpu_elf.Elf(str(path))
    try:
        table = gpu_elf.ExportTable(elf)
    finally:
        elf.close()
    for name in [*record.get("torch_needed", []), "_ZNK3c106SymInt6sym_neERKS0_", "PyInit_ext", "nothing"]:
        table.exports(name.encode())
    return record



def fuzz(sources: Sequence[Path], folder: Path, rng: random.Random, cases: int) -> dict[str, int]:
    """`cases` mutated copies of the sources (1 to 3 mutations each), each read as the gpu-stack
    section reads a binary, within bounded(); returns how many were read and how many were
    reported as errors. Anything else (a slow read, a peak of memory, another exception) fails
    with the mutations that led to it."""
    outcomes: dict[str, int] = {}
    layouts: dict[Path, list[Section]] = {}
    for case in range(cases):
        source = rng.choice(list(sources))
        path = folder / f"case{case}-{source.name}"
        shutil.copyfile(source, path)
        found = layouts.setdefault(source, sections(source))
        done = [mutate(path, rng, found) for _ in range(rng.randint(1, 3))]
        try:
            with bounded():
                record = read_like_the_section(path)
        except REPORTED as exc:  # (ExportTable on a file binary_record read): what the section reports
            record = {"error": str(exc)}
        except AssertionError as exc:
            raise AssertionError(f"{source.name} after {done}: {exc}") from None
        except Exception as exc:
            raise AssertionError(f"{source.name} after {done}: {type(exc).__name__}: {exc}") from exc
        kind = "error" if "error" in record else "read"
        outcomes[kind] = outcomes.get(kind, 0) + 1
        path.unlink()
    return outcomes
