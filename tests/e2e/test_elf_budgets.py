"""ELF and fatbin reading under fixed budgets: hostile shared objects cost a bounded time and
memory, and a fuzz over mutated real ones (the linker's output) never escapes as a crash."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from envdoctor.probe.host.gpu import elf as gpu_elf
from tests import elf_mutations as mutations
from tests.elf_mutations import bounded, fuzz, read_like_the_section
from tests.gpu_layouts import container, extension, fatbin, have_toolchain, ptx, sass, torch_layout

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs g++ and objcopy to build real ELF files")


@pytest.fixture(scope="module")
def real_objects(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Shared objects the real compiler and linker made: torch's c10/libtorch/libtorch_cuda
    (with a fatbin) and an extension with a fatbin of two containers and padding."""
    site = tmp_path_factory.mktemp("elf") / "site"
    data = fatbin(container(sass(80), sass(90, specific=True), ptx(90)), container(sass(100)), padding=24)
    torch_layout(site, cuda_lib_fatbin=data)
    ext = extension(site, "pkg/_ext.abi3.so", fatbin_data=data)
    lib = site / "torch" / "lib"
    return [lib / "libc10.so", lib / "libtorch.so", lib / "libtorch_cuda.so", ext]


def copy_of(source: Path, folder: Path, name: str) -> Path:
    target = folder / name
    shutil.copyfile(source, target)
    return target


def test_sparse_fatbin_padding_is_searched_by_chunks(real_objects: list[Path], tmp_path: Path) -> None:
    """A .nv_fatbin of 64 MiB of zeros (a hole) is searched a chunk at a time: no container, quickly."""
    path = copy_of(real_objects[3], tmp_path, "padded.so")
    mutations.point_section_at_hole(path, b".nv_fatbin", 64 << 20)
    with bounded():
        record = read_like_the_section(path)
    assert record["fatbin"] == {"containers": 0, "entries": 0, "groups": []}


def test_padding_beyond_the_budget_is_an_error(real_objects: list[Path], tmp_path: Path) -> None:
    """A 1 GiB .nv_fatbin hole in a 4 GiB sparse file stops at the padding budget with a reason."""
    path = copy_of(real_objects[3], tmp_path, "huge.so")
    mutations.sparse_file(path, 4 << 30)
    mutations.point_section_at_hole(path, b".nv_fatbin", 1 << 30)
    with bounded():
        record = read_like_the_section(path)
    assert "padding between fatbin containers" in record["error"]


def test_containers_after_padding_are_still_found(real_objects: list[Path]) -> None:
    """The chunked padding search finds the container after 24 bytes of padding, as the real layout has it."""
    record = read_like_the_section(real_objects[3])
    assert record["fatbin"]["containers"] == 2 and record["fatbin"]["entries"] == 4


def test_gnu_hash_chain_without_an_end_is_cut(real_objects: list[Path], tmp_path: Path) -> None:
    """A .gnu.hash whose chain of 100,000 entries has no end bit: each lookup stops at the step budget."""
    path = copy_of(real_objects[0], tmp_path, "chain.so")
    mutations.endless_gnu_hash_chain(path, 100_000)
    elf = gpu_elf.Elf(str(path))
    try:
        table = gpu_elf.ExportTable(elf)
    finally:
        elf.close()
    with bounded():
        for index in range(100):
            with pytest.raises(gpu_elf.ElfError, match="chain of more than"):
                table.exports(b"name%d" % index)


def test_a_million_section_headers_are_refused(real_objects: list[Path], tmp_path: Path) -> None:
    """2^20-1 section headers (counted in section 0) with a 256 KiB name table without NUL are refused at once."""
    path = copy_of(real_objects[0], tmp_path, "sections.so")
    mutations.many_sections_without_names(path)
    with bounded():
        record = read_like_the_section(path)
    assert "1048575 section headers" in record["error"]


def test_a_gigabyte_dynstr_is_not_read(real_objects: list[Path], tmp_path: Path) -> None:
    """A .dynstr of 1 GiB (a hole) is refused by the per-section budget, not read into memory."""
    path = copy_of(real_objects[3], tmp_path, "dynstr.so")
    mutations.point_section_at_hole(path, b".dynstr", 1 << 30)
    with bounded():
        record = read_like_the_section(path)
    assert "more than the 256 MiB read of one section" in record["error"]


def test_names_without_nul_are_cut_at_their_budget() -> None:
    """cstring stops looking for a NUL after its limit; a short last name without NUL is kept."""
    table = b"\0libc.so.6\0" + b"A" * 10_000
    assert gpu_elf.cstring(table, 1, 64) == b"libc.so.6"
    assert gpu_elf.cstring(b"\0abc", 1, 64) == b"abc"
    with pytest.raises(gpu_elf.ElfError, match="more than 64 bytes"):
        gpu_elf.cstring(table, 11, 64)


def test_fuzzed_real_objects_cost_bounded_time_and_memory(real_objects: list[Path], tmp_path: Path) -> None:
    """400 seeded mutations of real shared objects (header fields, section headers, section
    bytes, sections pointed at holes of up to 4 GiB): each is read within the time and memory
    bounds, and what goes wrong is one of the errors the section reports for a binary."""
    outcomes = fuzz(real_objects, tmp_path, random.Random(20261201), 400)
    assert outcomes.get("read") and outcomes.get("error"), outcomes  # the mutations reached both outcomes
