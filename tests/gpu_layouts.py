"""Small real ELF files for the GPU stack tests, and venv layouts holding them.

Shared objects are compiled with the machine's g++ (so .dynsym, .dynstr, .dynamic and
.gnu.version_r are the linker's own), and a ``.nv_fatbin`` section of fatbin containers
written here is added with ``objcopy --add-section``. The container layout is NVIDIA's:
a 16-byte header (magic 0xBA55ED50 u32, version u16, header size u16, payload size u64),
then entries whose header holds the kind (u16 at 0: 1 PTX, 2 cubin), the header size (u32
at 4), the payload size (u64 at 8), the PTX ISA version (minor u16 at 24, major u16 at 26),
the SM architecture (u32 at 28) and flags (u64 at 40: 0x2000 LZ4, 0x100000 arch-specific).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
FLAG_64BIT = 0x1
FLAG_LZ4 = 0x2000
FLAG_ARCH_SPECIFIC = 0x100000
ENTRY_HEADER = 64


def have_toolchain() -> bool:
    return bool(shutil.which("g++") and shutil.which("objcopy"))


@dataclass(frozen=True)
class Entry:
    kind: str  # "sass" or "ptx"
    arch: int  # 90 for sm_90 / compute_90
    specific: bool = False
    isa: tuple[int, int] = (8, 4)
    compressed: bool = False
    payload: bytes = b"\0" * 24


def sass(arch: int, specific: bool = False, compressed: bool = False) -> Entry:
    return Entry("sass", arch, specific, compressed=compressed)


def ptx(arch: int, isa: tuple[int, int] = (8, 4), specific: bool = False) -> Entry:
    return Entry("ptx", arch, specific, isa)


def entry_bytes(entry: Entry) -> bytes:
    flags = FLAG_64BIT | (FLAG_LZ4 if entry.compressed else 0) | (FLAG_ARCH_SPECIFIC if entry.specific else 0)
    kind = 1 if entry.kind == "ptx" else 2
    payload = entry.payload + b"\0" * (-len(entry.payload) % 8)
    minor, major = (entry.isa[1], entry.isa[0]) if entry.kind == "ptx" else (8, 1)
    header = struct.pack("<HHIQIIHHIIIQQQ", kind, 0x0101, ENTRY_HEADER, len(payload), 0, 0, minor, major,
                         entry.arch, 0, 0, flags, 0, 0)
    assert len(header) == ENTRY_HEADER
    return header + payload


def container(*entries: Entry) -> bytes:
    body = b"".join(entry_bytes(e) for e in entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


def fatbin(*containers: bytes, padding: int = 0) -> bytes:
    """Containers one after the other, with `padding` zero bytes (a multiple of 8) between."""
    return (b"\0" * padding).join(containers)


_BUILT: dict[str, Path] = {}


def compile_so(path: Path, source: str, *, libs: list[Path] = (), soname: str | None = None,  # type: ignore[assignment]  # tuple default
               fatbin_data: bytes | None = None, lang: str = "c++") -> Path:
    """Compile source into the shared object path (linked against libs), then add .nv_fatbin.
    The same inputs were compiled before in this process: that file is copied instead."""
    path.parent.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(repr((source, lang, soname or path.name, fatbin_data,
                               [(lib.name, hashlib.sha256(lib.read_bytes()).hexdigest()) for lib in libs])).encode())
    built = _BUILT.get(key.hexdigest())
    if built is not None and built.exists():
        shutil.copyfile(built, path)
        path.chmod(0o755)
        return path
    _compile(path, source, libs, soname, fatbin_data, lang)
    keep = Path(tempfile.mkdtemp(prefix="gpu-so-")) / path.name
    atexit.register(shutil.rmtree, keep.parent, True)
    shutil.copyfile(path, keep)
    _BUILT[key.hexdigest()] = keep
    return path


def _compile(path: Path, source: str, libs: list[Path], soname: str | None, fatbin_data: bytes | None,
             lang: str) -> None:
    src = path.with_suffix(".src.cpp" if lang == "c++" else ".src.c")
    src.write_text(source)
    argv = ["g++", "-x", lang, "-shared", "-fPIC", "-O0", "-o", str(path), str(src),
            f"-Wl,-soname,{soname or path.name}", "-Wl,--no-as-needed"]
    argv += ["-x", "none", *(str(lib) for lib in libs)]
    subprocess.run(argv, check=True, capture_output=True)
    src.unlink()
    if fatbin_data is not None:
        blob = path.with_suffix(".fatbin")
        blob.write_bytes(fatbin_data)
        subprocess.run(["objcopy", "--add-section", f".nv_fatbin={blob}",
                        "--set-section-flags", ".nv_fatbin=alloc,readonly", str(path)], check=True, capture_output=True)
        blob.unlink()


#: A c10 the way torch's is compiled: a class with members in namespace c10, free functions
#: in at::, and THP* C functions. `drop` leaves a member out (a newer or older torch).
C10_SOURCE = """
namespace c10 {
struct SymInt { long v; bool sym_ne(const SymInt& o) const; bool sym_eq(const SymInt& o) const; };
%s
bool SymInt::sym_eq(const SymInt& o) const { return v == o.v; }
}
namespace at { int add_one(int x) { return x + 1; } }
extern "C" int THPVariable_Check(void* p) { return p != 0; }
"""
SYM_NE = "bool SymInt::sym_ne(const SymInt& o) const { return v != o.v; }"

EXTENSION_SOURCE = """
#include <string>
namespace c10 { struct SymInt { long v; bool sym_ne(const SymInt& o) const; bool sym_eq(const SymInt& o) const; }; }
namespace at { int add_one(int x); }
extern "C" int THPVariable_Check(void* p);
extern "C" __attribute__((weak)) int THPOptional_Hook(void);
std::string name() { return std::string("ext") + std::to_string(at::add_one(1)); }
extern "C" int PyInit_ext(void) {
  c10::SymInt a{1}, b{2};
  return a.sym_ne(b) + a.sym_eq(b) + THPVariable_Check(&a) + (THPOptional_Hook ? 1 : 0) + (int)name().size();
}
"""

SYM_NE_MANGLED = "_ZNK3c106SymInt6sym_neERKS0_"


def torch_layout(site: Path, *, version: str = "2.9.1+cu128", cuda: str | None = "12.8",
                 with_sym_ne: bool = True, cuda_lib_fatbin: bytes | None = None) -> Path:
    """site/torch with version.py and lib/libc10.so, libtorch.so (needs libc10), and
    libtorch_cuda.so (with a .nv_fatbin when given)."""
    lib = site / "torch" / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    cuda_text = f"'{cuda}'" if cuda else "None"
    (site / "torch" / "version.py").write_text(
        "from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda']\n"
        f"__version__ = '{version}'\ndebug = False\ncuda: Optional[str] = {cuda_text}\n"
        "git_version = '0000000000000000000000000000000000000000'\nhip: Optional[str] = None\n")
    c10 = compile_so(lib / "libc10.so", C10_SOURCE % (SYM_NE if with_sym_ne else ""))
    compile_so(lib / "libtorch.so", "namespace torch { int version() { return 1; } }", libs=[c10])
    compile_so(lib / "libtorch_cuda.so", "namespace c10 { namespace cuda { int count() { return 0; } } }",
               libs=[c10], fatbin_data=cuda_lib_fatbin)
    return site / "torch"


def extension(site: Path, relpath: str, *, fatbin_data: bytes | None = None, torch: bool = True,
              dist: tuple[str, str] | None = None, pin: str | None = None) -> Path:
    """An extension module at site/relpath, linked against torch's libc10/libtorch (found
    through $ORIGIN-free absolute paths is not how wheels do it: we link the files by path
    and the loader finds them through their soname in the test's LD_LIBRARY_PATH)."""
    path = site / relpath
    libs = [site / "torch" / "lib" / "libc10.so", site / "torch" / "lib" / "libtorch.so"] if torch else []
    source = EXTENSION_SOURCE if torch else 'extern "C" int PyInit_plain(void) { return 0; }'
    compile_so(path, source, libs=libs, fatbin_data=fatbin_data)
    if dist:
        name, version = dist
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        requires = f"Requires-Dist: torch=={pin}\n" if pin else ""
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires}\n")
        (info / "top_level.txt").write_text(relpath.split("/", 1)[0] + "\n")
    return path


def fake_driver_root(root: Path, version: str | None = "570.86.15", *, proc: bool = False) -> Path:
    """A folder standing in for / with the kernel module's version file."""
    if version is not None:
        if proc:
            target = root / "proc" / "driver" / "nvidia" / "version"
            text = (f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Release Build  (dvs-builder@U16)\n"
                    "GCC version:  gcc version 12.2.0\n")
        else:
            target = root / "sys" / "module" / "nvidia" / "version"
            text = version + "\n"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return root


def fake_nvidia_smi(folder: Path, gpus: list[tuple[str, str | None, str]], *, old: bool = False) -> Path:
    """An nvidia-smi answering --query-gpu=name,compute_cap,driver_version like the real one
    (an `old` one rejects the compute_cap field, as drivers before R510 do)."""
    folder.mkdir(parents=True, exist_ok=True)
    full = "\\n".join(f"{n}, {cc}, {d}" for n, cc, d in gpus)
    short = "\\n".join(f"{n}, {d}" for n, _cc, d in gpus)
    script = folder / "nvidia-smi"
    if old:
        body = (f'case "$1" in *compute_cap*) echo \'Field "compute_cap" is not a valid field to query.\' >&2; '
                f"exit 2;; esac\nprintf '{short}\\n'\n")
    else:
        body = f"printf '{full}\\n'\n"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return script


def probe_env(root: Path | None, path_dir: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if root is not None:
        env["ENVDOCTOR_SYSFS_ROOT"] = str(root)
    if path_dir is not None:
        env["PATH"] = f"{path_dir}:{env.get('PATH', '')}"
    return env
