"""The gpu-stack probe section over small real ELF files (g++ and objcopy), fake driver roots
and a fake nvidia-smi; the dynamic loader itself is the oracle for missing symbols."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from envdoctor.probe.host.gpu import elf as gpu_elf
from envdoctor.probe.host.gpu import host as gpu_host
from envdoctor.probe.host.gpu import stack as gpu_stack
from tests.gpu_layouts import (
    SYM_NE_MANGLED,
    container,
    extension,
    fake_driver_root,
    fake_nvidia_smi,
    fatbin,
    have_toolchain,
    ptx,
    sass,
    torch_layout,
)

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs g++ and objcopy")


def site_of(prefix: Path) -> Path:
    site = prefix / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    return site


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The section's cache lives in ~/.cache/envdoctor: a home of the test's own."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def cache_folder(prefix: Path) -> Path:
    return Path(gpu_stack.gpu_cache_folder(str(prefix)))


def run_section(prefix: Path, monkeypatch: pytest.MonkeyPatch, *, root: Path | None = None,
                smi_dir: Path | None = None, **args: object) -> dict:
    monkeypatch.delenv("ENVDOCTOR_SYSFS_ROOT", raising=False)
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    if root is not None:
        monkeypatch.setenv("ENVDOCTOR_SYSFS_ROOT", str(root))
    monkeypatch.setenv("PATH", f"{smi_dir}:/usr/bin:/bin" if smi_dir else "/usr/bin:/bin")
    return gpu_stack.gpu_stack_section({"prefix": str(prefix), **args}, None)


def loader_error(path: Path, lib: Path) -> str:
    """What the real dynamic loader says when Python loads the extension (RTLD_NOW)."""
    code = f"import ctypes,os\ntry:\n ctypes.CDLL({str(path)!r}, os.RTLD_NOW)\nexcept OSError as e:\n print(e)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "LD_LIBRARY_PATH": str(lib)}, check=True)
    return done.stdout.strip()


def test_fatbin_entries_read_from_headers(tmp_path: Path) -> None:
    """SASS, arch-specific SASS and PTX with its ISA are read from entry headers; padding
    between containers and LZ4-flagged payloads change nothing."""
    data = fatbin(container(sass(80), sass(90, specific=True, compressed=True), ptx(90, (8, 4))),
                  container(sass(100, specific=True)), padding=16)
    so = extension(tmp_path, "pkg/_k.abi3.so", fatbin_data=data, torch=False)
    elf = gpu_elf.Elf(str(so))
    try:
        summary = gpu_elf.fatbin_summary(elf)
    finally:
        elf.close()
    assert summary["containers"] == 2 and summary["entries"] == 4
    assert summary["groups"] == [
        {"sass": ["sm_100a"], "ptx": [], "count": 1},
        {"sass": ["sm_80", "sm_90a"], "ptx": ["compute_90@8.4"], "count": 1},
    ]


def test_no_fatbin_section_is_none(tmp_path: Path) -> None:
    """A shared object without .nv_fatbin has no GPU code summary."""
    so = extension(tmp_path, "pkg/plain.abi3.so", torch=False)
    elf = gpu_elf.Elf(str(so))
    try:
        assert gpu_elf.fatbin_summary(elf) is None
    finally:
        elf.close()


def test_not_an_elf_file_is_an_error(tmp_path: Path) -> None:
    """A file that is not a 64-bit ELF is refused with a reason, not a crash."""
    bad = tmp_path / "bad.so"
    bad.write_bytes(b"\x7fELF\x01" + b"\0" * 100)
    with pytest.raises(gpu_elf.ElfError, match="64-bit"):
        gpu_elf.Elf(str(bad))
    bad.write_bytes(b"hello")
    with pytest.raises(gpu_elf.ElfError):
        gpu_elf.Elf(str(bad))


def test_missing_symbol_matches_the_dynamic_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An extension built against a c10 with SymInt::sym_ne, beside a torch without it: the
    probe names exactly the symbol the real loader reports as undefined."""
    prefix = tmp_path / "venv"
    site = site_of(prefix)
    torch_layout(site, with_sym_ne=True)
    ext = extension(site, "vllm/_C.abi3.so", fatbin_data=fatbin(container(sass(90))), dist=("vllm", "0.11.0"),
                    pin="2.8.0")
    torch_layout(site, with_sym_ne=False)  # the installed torch moved on
    lib = site / "torch" / "lib"
    assert SYM_NE_MANGLED in loader_error(ext, lib)
    result = run_section(prefix, monkeypatch)
    item = next(b for b in result["binaries"] if b["relpath"] == "vllm/_C.abi3.so")
    assert item["missing"] == [SYM_NE_MANGLED] and item["missing_count"] == 1
    assert item["distribution"] == "vllm" and item["version"] == "0.11.0" and item["torch_pin"] == "2.8.0"
    assert item["torch_libs"] == ["libc10.so", "libtorch.so"]


def test_matching_torch_has_nothing_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the torch it was built against, the loader loads the extension and the probe
    finds nothing missing; versioned libstdc++ names and weak references are not torch's."""
    prefix = tmp_path / "venv"
    site = site_of(prefix)
    torch_layout(site)
    ext = extension(site, "vllm/_C.abi3.so")
    assert loader_error(ext, site / "torch" / "lib") == ""
    elf = gpu_elf.Elf(str(ext))
    try:
        needed = gpu_elf.torch_undefined(elf)
    finally:
        elf.close()
    assert needed == sorted(["THPVariable_Check", "_ZN2at7add_oneEi", SYM_NE_MANGLED, "_ZNK3c106SymInt6sym_eqERKS0_"])
    item = next(b for b in run_section(prefix, monkeypatch)["binaries"] if b["relpath"] == "vllm/_C.abi3.so")
    assert item["missing"] == [] and item["torch_symbols"] == 4


def test_extension_needing_an_absent_torch_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An extension whose DT_NEEDED names a torch library the installed torch lacks says so."""
    prefix = tmp_path / "venv"
    site = site_of(prefix)
    torch_layout(site)
    extension(site, "ext/_C.abi3.so")
    (site / "torch" / "lib" / "libtorch.so").unlink()
    item = next(b for b in run_section(prefix, monkeypatch)["binaries"] if b["relpath"] == "ext/_C.abi3.so")
    assert item["torch_libs_absent"] == ["libtorch.so"]


def test_cache_replays_and_notices_a_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A re-check reads no ELF file; replacing torch's library is seen through its stat key."""
    prefix = tmp_path / "venv"
    site = site_of(prefix)
    torch_layout(site)
    extension(site, "vllm/_C.abi3.so", fatbin_data=fatbin(container(sass(90))))
    monkeypatch.setattr(gpu_stack, "RACY_SECONDS", -1)
    first = run_section(prefix, monkeypatch)
    assert first["cache"]["saved"] and first["cache"]["hits"] == 0
    folder = cache_folder(prefix)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / gpu_stack.GPU_CACHE_NAME).stat().st_mode) == 0o600

    def no_elf(path: str) -> None:
        raise AssertionError(f"read {path} again")

    monkeypatch.setattr(gpu_stack, "Elf", no_elf)
    second = run_section(prefix, monkeypatch)
    assert second["cache"]["hits"] >= 4 and second["binaries"] == first["binaries"]
    monkeypatch.undo()
    monkeypatch.setattr(gpu_stack, "RACY_SECONDS", -1)
    torch_layout(site, with_sym_ne=False)
    third = run_section(prefix, monkeypatch)
    item = next(b for b in third["binaries"] if b["relpath"] == "vllm/_C.abi3.so")
    assert item["missing"] == [SYM_NE_MANGLED]


def test_cache_someone_else_could_write_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group-writable cache folder is neither read nor written."""
    prefix = tmp_path / "venv"
    site = site_of(prefix)
    torch_layout(site)
    folder = cache_folder(prefix)
    folder.mkdir(parents=True)
    folder.chmod(0o775)
    result = run_section(prefix, monkeypatch)
    assert result["cache"]["folder"] is None and not (folder / gpu_stack.GPU_CACHE_NAME).exists()


def test_driver_from_fake_sys_root_and_gpus_from_fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENVDOCTOR_SYSFS_ROOT stands in for / and nvidia-smi is the one on PATH."""
    prefix = tmp_path / "venv"
    site_of(prefix)
    root = fake_driver_root(tmp_path / "root", "575.57.08")
    smi = fake_nvidia_smi(tmp_path / "bin", [("NVIDIA B300 SXM6 AC", "10.3", "575.57.08")])
    result = run_section(prefix, monkeypatch, root=root, smi_dir=smi.parent)
    assert result["driver"]["kernel"] == {"version": "575.57.08",
                                          "source": str(root / "sys" / "module" / "nvidia" / "version")}
    assert result["smi"]["gpus"] == [{"name": "NVIDIA B300 SXM6 AC", "compute_cap": "10.3",
                                      "driver_version": "575.57.08"}]


def test_driver_from_proc_and_a_sys_shaped_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/driver/nvidia/version is parsed when sysfs has nothing; a root shaped like /sys works."""
    prefix = tmp_path / "venv"
    site_of(prefix)
    root = fake_driver_root(tmp_path / "root", "535.104.05", proc=True)
    assert run_section(prefix, monkeypatch, root=root)["driver"]["kernel"]["version"] == "535.104.05"
    sys_root = tmp_path / "sys"
    (sys_root / "module" / "nvidia").mkdir(parents=True)
    (sys_root / "module" / "nvidia" / "version").write_text("580.65.06\n")
    assert run_section(prefix, monkeypatch, root=sys_root)["driver"]["kernel"]["version"] == "580.65.06"


def test_libcuda_and_cuda_compat_in_a_container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the kernel module's files, libcuda.so.<ver> names the driver; a cuda-compat
    folder on LD_LIBRARY_PATH is reported as first on the loader path."""
    prefix = tmp_path / "venv"
    site_of(prefix)
    root = tmp_path / "root"
    libdir = root / "usr" / "lib" / "x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    (libdir / "libcuda.so.550.54.15").write_bytes(b"")
    (libdir / "libcuda.so.1").write_bytes(b"")
    compat = root / "usr" / "local" / "cuda-12.8" / "compat"
    compat.mkdir(parents=True)
    (compat / "libcuda.so.570.124.06").write_bytes(b"")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/cuda-12.8/compat")
    monkeypatch.setenv("ENVDOCTOR_SYSFS_ROOT", str(root))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    driver = gpu_host.driver_facts(gpu_host.host_root())
    assert driver["kernel"] is None
    # In loader order: the compat folder on LD_LIBRARY_PATH comes before the system folder.
    assert [(e["version"], e["ld_library_path"]) for e in driver["libcuda"]] == [("570.124.06", True),
                                                                                 ("550.54.15", False)]
    assert driver["compat"] == [{"path": str(compat), "versions": ["570.124.06"], "on_ld_library_path": True,
                                 "in_ld_so_conf": False}]


def test_old_nvidia_smi_without_compute_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An nvidia-smi that rejects compute_cap is asked again for name and driver only."""
    smi = fake_nvidia_smi(tmp_path / "bin", [("Tesla P4", None, "470.82.01")], old=True)
    monkeypatch.setenv("PATH", f"{smi.parent}:/usr/bin:/bin")
    facts = gpu_host.smi_facts()
    assert facts["fields"] == ["name", "driver_version"]
    assert facts["gpus"] == [{"name": "Tesla P4", "driver_version": "470.82.01"}]


def test_torch_version_read_as_text(tmp_path: Path) -> None:
    """torch/version.py's annotated assignments are read without importing torch."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.9.1+cu128'\ncuda: Optional[str] = '12.8'\n"
        "hip: Optional[str] = None\nraise SystemExit('imported')\n")
    facts = gpu_host.torch_facts(str(site))
    assert (facts["version"], facts["cuda"], facts["hip"]) == ("2.9.1+cu128", "12.8", None)


@pytest.mark.parametrize("name, expected", [
    ("_ZN3c1010TensorImplD2Ev", True),
    ("_ZNK3c106SymInt6sym_neERKS0_", True),
    ("_ZN2at6native5emptyEv", True),
    ("_ZTVN5torch8autograd4NodeE", True),
    ("_ZN6caffe28TypeMeta3NewEv", True),
    ("_ZNKR3c106SymInt3getEv", True),
    ("_Z16THPVariable_WrapN2at10TensorBaseE", True),
    ("THPVariableClass", True),
    ("aoti_torch_empty_strided", True),
    ("_ZNSt6vectorIiSaIiEED1Ev", False),
    ("_ZN3c1xfooEv", False),
    ("_ZN4attr3getEv", False),
    ("PyInit__C", False),
])
def test_torch_namespace_names(name: str, expected: bool) -> None:
    """Mangled c10/at/torch/caffe2 names (with cv/ref qualifiers and vtables), THP* and
    aoti_torch_* are torch's; std:: and look-alike namespaces are not."""
    assert bool(gpu_elf.TORCH_SYMBOL.match(name.encode())) is expected


def test_gnu_hash_lookup_agrees_with_a_full_scan(tmp_path: Path) -> None:
    """Looking names up through .gnu.hash gives the same answer as reading every symbol."""
    site = tmp_path / "site"
    torch_layout(site)
    elf = gpu_elf.Elf(str(site / "torch" / "lib" / "libc10.so"))
    try:
        table = gpu_elf.ExportTable(elf)
        scanned = set(table._scan())
    finally:
        elf.close()
    assert b"_ZNK3c106SymInt6sym_neERKS0_" in scanned
    for name in sorted(scanned) + [b"_ZNK3c106SymInt6sym_gtERKS0_", b"nothing"]:
        assert table.exports(name) is (name in scanned)



def test_absent_venv_is_left_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A venv path that does not exist gets no torch, no binaries, and no folder created."""
    prefix = tmp_path / "no venv"
    result = run_section(prefix, monkeypatch)
    assert result["torch"] is None and result["binaries"] == [] and not result["cache"]["saved"]
    assert not prefix.exists()


def test_the_cache_is_written_outside_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check writes nothing inside the environment it reads: the cache goes to ~/.cache/envdoctor."""
    prefix = tmp_path / "venv"
    torch_layout(site_of(prefix))
    monkeypatch.setattr(gpu_stack, "RACY_SECONDS", -1)  # files just written count as settled
    before = sorted(p for p in prefix.rglob("*"))
    assert run_section(prefix, monkeypatch)["cache"]["saved"]
    assert sorted(p for p in prefix.rglob("*")) == before
    assert (cache_folder(prefix) / gpu_stack.GPU_CACHE_NAME).is_file()
    assert cache_folder(prefix).parent == tmp_path / "home" / ".cache" / "envdoctor"


def test_walk_is_replayed_until_a_folder_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The folders' stat keys stand for the walk: unchanged, it is replayed; a new extension in
    a new package or beside an old one is found."""
    prefix = tmp_path / "venv"
    site = site_of(prefix)
    torch_layout(site)
    extension(site, "a/_C.abi3.so", fatbin_data=fatbin(container(sass(90))))
    monkeypatch.setattr(gpu_stack, "RACY_SECONDS", -1)
    assert run_section(prefix, monkeypatch)["cache"]["walks_replayed"] == 0
    again = run_section(prefix, monkeypatch)
    assert again["cache"]["walks_replayed"] == 1 and [b["relpath"] for b in again["binaries"]][1:] == ["a/_C.abi3.so"]
    extension(site, "a/sub/_D.abi3.so", fatbin_data=fatbin(container(sass(80))))
    found = run_section(prefix, monkeypatch)
    assert found["cache"]["walks_replayed"] == 0
    assert [b["relpath"] for b in found["binaries"]][1:] == ["a/_C.abi3.so", "a/sub/_D.abi3.so"]


def test_a_folder_dated_back_after_a_new_extension_is_walked_again(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A new extension added to a walked folder whose mtime is then set back (`touch -d`) is
    found: the folder's ctime changed, and the walk is keyed by (size, mtime, ctime, inode)."""
    prefix = tmp_path / "venv"
    site = site_of(prefix)
    torch_layout(site)
    extension(site, "a/_C.abi3.so", fatbin_data=fatbin(container(sass(90))))
    monkeypatch.setattr(gpu_stack, "RACY_SECONDS", -1)
    run_section(prefix, monkeypatch)
    folder = site / "a"
    before = folder.stat()
    extension(site, "a/_E.abi3.so", fatbin_data=fatbin(container(sass(80))))
    os.utime(folder, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert folder.stat().st_mtime_ns == before.st_mtime_ns and folder.stat().st_size == before.st_size
    found = run_section(prefix, monkeypatch)
    assert found["cache"]["walks_replayed"] == 0
    assert [b["relpath"] for b in found["binaries"]][1:] == ["a/_C.abi3.so", "a/_E.abi3.so"]


def test_gpus_from_proc_when_nvidia_smi_is_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without nvidia-smi, the kernel module's per-GPU information files name the GPUs."""
    prefix = tmp_path / "venv"
    site_of(prefix)
    root = fake_driver_root(tmp_path / "root", "580.95.05")
    info = root / "proc" / "driver" / "nvidia" / "gpus" / "0000:1b:00.0" / "information"
    info.parent.mkdir(parents=True)
    info.write_text("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 123\nBus Type: \t PCIe\n")
    result = run_section(prefix, monkeypatch, root=root)
    assert result["smi"]["path"] is None
    assert result["driver"]["gpus"] == [{"name": "NVIDIA H100 80GB HBM3", "source": str(info)}]


def test_damaged_cache_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache file of the wrong shape costs a cold run, never a failed section."""
    prefix = tmp_path / "venv"
    site = site_of(prefix)
    torch_layout(site)
    extension(site, "vllm/_C.abi3.so", fatbin_data=fatbin(container(sass(90))))
    folder = cache_folder(prefix)
    folder.mkdir(mode=0o700, parents=True)
    for text in ('{"version": 1, "binaries": [], "exports": {"x": 1}, "walks": {"s": {"dirs": 5}}}', "not json"):
        (folder / gpu_stack.GPU_CACHE_NAME).write_text(text)
        (folder / gpu_stack.GPU_CACHE_NAME).chmod(0o600)
        result = run_section(prefix, monkeypatch)
        assert [b["relpath"] for b in result["binaries"]] == ["torch/lib/libtorch_cuda.so", "vllm/_C.abi3.so"]
