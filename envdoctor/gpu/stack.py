"""What the probe's "gpu-stack" section found, as values, and the rules that judge it.

Pure: no I/O. The rules (NVIDIA CUDA Programming Guide, "Binary Compatibility" and
"Architecture-Specific Features"):

- SASS ``sm_XY`` runs on compute capability X.Z with the same major X and Z >= Y;
- an arch-specific ``sm_XYa`` (and ``compute_XYa``) runs only on exactly X.Y;
- PTX ``compute_XY`` is JIT-compiled by the driver for any CC >= X.Y, when the driver is
  at least as new as the toolkit that introduced the PTX's ISA version.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envdoctor.gpu import tables
from envdoctor.gpu.tables import version_key

CC = tuple[int, int]

#: Extensions a serving stack cannot start without: no usable kernel for a GPU fails.
CORE_MODULES = {("vllm", "_C"), ("vllm", "_moe_C"), ("sgl_kernel", "common_ops")}
#: Optional kernels (flash-attention 3, FlashMLA): the framework falls back; inform only.
#: sgl_kernel/flash_ops is its FA3 build (sgl_kernel/flash_attn.py: "Can not import FA3").
_OPTIONAL = re.compile(r"(^|[_/])(fa3|flash_attn_3|flashmla|flash_mla)([_/.]|$)|hopper|^sgl_kernel/flash_ops\.", re.I)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    cc: CC | None
    cc_source: str

    @property
    def cc_text(self) -> str:
        return f"{self.cc[0]}.{self.cc[1]}" if self.cc else "unknown"


@dataclass(frozen=True)
class Container:
    """One fatbin container's code: SASS archs and PTX as (arch, ISA version)."""

    sass: tuple[str, ...]
    ptx: tuple[tuple[str, str], ...]
    count: int


@dataclass(frozen=True)
class Binary:
    path: str
    relpath: str
    kind: str
    distribution: str | None = None
    version: str | None = None
    torch_pin: str | None = None
    containers: tuple[Container, ...] = ()
    has_fatbin: bool = False
    needed: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    missing_count: int = 0
    torch_libs_absent: tuple[str, ...] = ()
    error: str | None = None

    @property
    def module(self) -> str:
        return self.relpath.rsplit("/", 1)[-1].split(".", 1)[0]

    @property
    def top(self) -> str:
        return self.relpath.split("/", 1)[0]

    @property
    def role(self) -> str:
        """torch, core, optional or extension (see CORE_MODULES and _OPTIONAL)."""
        if self.kind == "torch":
            return "torch"
        if (self.top, self.module) in CORE_MODULES:
            return "core"
        return "optional" if _OPTIONAL.search(self.relpath) else "extension"

    @property
    def label(self) -> str:
        owner = f"{self.distribution} {self.version}" if self.distribution else self.top
        return f"{owner} ({self.relpath})"

    @property
    def sass(self) -> list[str]:
        return sorted({a for c in self.containers for a in c.sass}, key=_arch_order)

    @property
    def ptx(self) -> list[str]:
        return sorted({a for c in self.containers for a, _isa in c.ptx}, key=_arch_order)


@dataclass(frozen=True)
class Driver:
    version: str | None
    source: str
    kernel: str | None = None
    user_space: str | None = None
    compat: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuStack:
    driver: Driver
    gpus: tuple[Gpu, ...]
    smi: str | None
    smi_error: str | None
    torch_version: str | None
    torch_cuda: str | None
    binaries: tuple[Binary, ...] = ()
    root: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_probe(cls, raw: Mapping[str, Any]) -> GpuStack:
        torch = raw.get("torch") or {}
        smi = raw.get("smi") or {}
        driver_raw = raw.get("driver") or {}
        return cls(
            driver=_driver(driver_raw, smi),
            gpus=tuple(_gpu(i, g) for i, g in enumerate(smi.get("gpus") or driver_raw.get("gpus") or [])),
            smi=smi.get("path"),
            smi_error=smi.get("error"),
            torch_version=torch.get("version"),
            torch_cuda=torch.get("cuda"),
            binaries=tuple(_binary(b) for b in raw.get("binaries") or []),
            root=driver_raw.get("root"),
            raw=raw,
        )


def _driver(raw: Mapping[str, Any], smi: Mapping[str, Any]) -> Driver:
    kernel = (raw.get("kernel") or {}).get("version")
    source = (raw.get("kernel") or {}).get("source", "")
    libcuda = sorted(raw.get("libcuda") or [], key=lambda e: e.get("order", 0))
    user_space = libcuda[0]["version"] if libcuda else None
    notes: list[str] = []
    compat = None
    for folder in raw.get("compat") or []:
        if (folder.get("on_ld_library_path") or folder.get("in_ld_so_conf")) and folder.get("versions"):
            compat = folder["versions"][-1]
            notes.append(f"cuda-compat {compat} from {folder['path']} is on the loader path and overrides the driver's libcuda")
            break
    smi_driver = next((g.get("driver_version") for g in smi.get("gpus") or [] if g.get("driver_version")), None)
    version = compat or kernel or user_space or smi_driver
    if compat:
        source = f"{source or 'driver'} with cuda-compat"
    elif not kernel and user_space:
        source = libcuda[0]["path"]
    elif not kernel and smi_driver:
        source = "nvidia-smi"
    if kernel and user_space and not compat and kernel != user_space:
        notes.append(f"user-space {libcuda[0]['path']} ({user_space}) differs from the kernel module ({kernel})")
    return Driver(version, source, kernel, user_space, compat, tuple(notes))


def _gpu(index: int, raw: Mapping[str, Any]) -> Gpu:
    name = str(raw.get("name", ""))
    found = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(raw.get("compute_cap", "")))
    if found:
        return Gpu(index, name, (int(found.group(1)), int(found.group(2))), "nvidia-smi")
    row = tables.cc_from_name(name)
    if row is not None:
        major, minor = row.value.split(".")
        return Gpu(index, name, (int(major), int(minor)), f"name table ({row.key}: {row.source})")
    return Gpu(index, name, None, "unknown")


def _binary(raw: Mapping[str, Any]) -> Binary:
    fatbin = raw.get("fatbin") or {}
    containers = []
    for group in fatbin.get("groups") or []:
        ptx = tuple(_ptx_entry(str(p)) for p in group.get("ptx") or [])
        containers.append(Container(tuple(str(a) for a in group.get("sass") or []), ptx, int(group.get("count", 1))))
    return Binary(
        path=str(raw.get("path", "")), relpath=str(raw.get("relpath", "")), kind=str(raw.get("kind", "extension")),
        distribution=raw.get("distribution"), version=raw.get("version"), torch_pin=raw.get("torch_pin"),
        containers=tuple(containers), has_fatbin=bool(fatbin), needed=tuple(raw.get("needed") or ()),
        missing=tuple(raw.get("missing") or ()), missing_count=int(raw.get("missing_count") or 0),
        torch_libs_absent=tuple(raw.get("torch_libs_absent") or ()), error=raw.get("error") or raw.get("abi_error"),
    )


def _ptx_entry(text: str) -> tuple[str, str]:
    """'compute_90@8.4' (the probe's form) -> ('compute_90', '8.4')."""
    arch, _, isa = text.partition("@")
    return arch, isa


def _arch_order(arch: str) -> tuple[int, str]:
    found = re.search(r"(\d+)([a-z]?)$", arch)
    return (int(found.group(1)), found.group(2)) if found else (0, arch)


def parse_arch(arch: str) -> tuple[CC, bool] | None:
    """'sm_90a' / 'compute_120' -> ((9, 0), arch-specific?)."""
    found = re.fullmatch(r"(?:sm|compute)_(\d+)(\d)([af]?)", arch)
    if not found:
        return None
    return (int(found.group(1)), int(found.group(2))), found.group(3) == "a"


def sass_runs(arch: str, cc: CC) -> bool:
    parsed = parse_arch(arch)
    if parsed is None:
        return False
    (major, minor), specific = parsed
    if specific:
        return cc == (major, minor)
    return cc[0] == major and cc[1] >= minor


def ptx_runs(arch: str, isa: str, cc: CC, driver: str | None) -> bool | None:
    """Whether the driver can JIT this PTX for the GPU; None when the driver is unknown."""
    parsed = parse_arch(arch)
    if parsed is None:
        return False
    target, specific = parsed
    if (specific and cc != target) or cc < target:
        return False
    row = tables.ptx_min_driver(isa)
    have, need = version_key(driver), version_key(row.value if row else None)
    if need is None or have is None:
        return None
    return have >= need


@dataclass(frozen=True)
class Usability:
    """How much of a binary's GPU code one GPU can run.

    ``relevant`` counts the containers with code for this GPU's generation (an arch of the
    same major), usable or not: a library dispatches those on this GPU. Code only for other
    generations (a Hopper-only cutlass kernel on a Blackwell GPU, an sm_80/sm_89 kernel on
    Hopper) is dispatched elsewhere, and a binary with nothing usable at all is ``none``
    whatever it targets. An sm_100a kernel on a B300 (CC 10.3) is relevant and unusable:
    it is what a library dispatches on any CC 10.x, and it runs only on CC 10.0."""

    containers: int
    relevant: int
    usable: int
    via_ptx_only: int

    @property
    def none(self) -> bool:
        return self.containers > 0 and self.usable == 0

    @property
    def partial(self) -> bool:
        return 0 < self.usable < self.relevant

    @property
    def ptx_only(self) -> bool:
        """Every usable container runs only after the driver JIT-compiles its PTX."""
        return self.usable > 0 and self.via_ptx_only == self.usable


def _same_generation(arch: str, cc: CC) -> bool:
    parsed = parse_arch(arch)
    return parsed is not None and parsed[0][0] == cc[0]


def usability(binary: Binary, cc: CC, driver: str | None) -> Usability:
    total = relevant = usable = ptx_only = 0
    for container in binary.containers:
        total += container.count
        if any(sass_runs(a, cc) for a in container.sass):
            usable += container.count
        elif any(ptx_runs(a, isa, cc, driver) is not False for a, isa in container.ptx):
            usable += container.count
            ptx_only += container.count
        elif not any(_same_generation(a, cc) for a in list(container.sass) + [a for a, _isa in container.ptx]):
            continue
        relevant += container.count
    return Usability(total, relevant, usable, ptx_only)


def arch_list_for(gpus: Sequence[Gpu]) -> str:
    """A TORCH_CUDA_ARCH_LIST that builds machine code for these GPUs ("9.0;10.3")."""
    return ";".join(f"{major}.{minor}" for major, minor in sorted({g.cc for g in gpus if g.cc}))
