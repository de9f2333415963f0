"""Judge a GpuStack: driver floors, kernels for each GPU, extension ABI. Pure.

Each finding is a value with its level (fail, warn, info), the part it belongs to
(driver, arch, abi) and what fixes it by hand. The check turns them into one result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envdoctor.gpu import tables
from envdoctor.gpu.stack import Binary, Gpu, GpuStack, Usability, arch_list_for, usability
from envdoctor.gpu.tables import version_key

Demangler = Callable[[Iterable[str]], Mapping[str, str]]


@dataclass(frozen=True)
class Finding:
    level: str
    part: str
    message: str
    remedy: str | None = None

    def to_json(self) -> dict[str, str]:
        data = {"level": self.level, "part": self.part, "message": self.message}
        if self.remedy:
            data["fix"] = self.remedy
        return data


@dataclass(frozen=True)
class Verdict:
    findings: tuple[Finding, ...]
    #: Why the driver and kernel parts were not judged (no GPU and none expected).
    skipped: str | None = None

    def at(self, level: str) -> list[Finding]:
        return [f for f in self.findings if f.level == level]


def judge(stack: GpuStack, expected_gpus: int | None, demangle: Demangler | None = None) -> Verdict:
    findings: list[Finding] = []
    skipped = None
    expected = bool(expected_gpus)
    if not stack.gpus:
        reason = stack.smi_error or ("no nvidia-smi on PATH" if not stack.smi else "nvidia-smi listed no GPU")
        if expected:
            findings.append(Finding("fail", "driver", f"{expected_gpus} GPU(s) expected but none answered ({reason}): "
                                    "neither the driver nor the kernels can be checked",
                                    "install or repair the NVIDIA driver (nvidia-smi must list the GPUs)"))
        else:
            skipped = f"{reason} and no GPUs are expected (gpus = N / --gpus N): driver and kernel checks skipped"
    else:
        findings += driver_findings(stack)
        findings += arch_findings(stack, expected)
    findings += abi_findings(stack, demangle)
    return Verdict(tuple(findings), skipped)


def _below(have: str | None, row: tables.Row | None) -> bool:
    have_key, need_key = version_key(have), version_key(row.value if row else None)
    return have_key is not None and need_key is not None and have_key < need_key


def _branch(version: str) -> str:
    return "R" + version.split(".")[0]


def driver_findings(stack: GpuStack) -> list[Finding]:
    driver = stack.driver.version
    out: list[Finding] = [Finding("warn", "driver", note) for note in stack.driver.notes if "differs" in note]
    if driver is None:
        return out + [Finding("warn", "driver", "no driver version could be read (/sys/module/nvidia/version, "
                              "/proc/driver/nvidia/version, libcuda.so.<ver>, nvidia-smi)")]
    cuda = stack.torch_cuda
    if cuda:
        floor, minimum = tables.major_floor(cuda), tables.toolkit_min_driver(cuda)
        torch = f"torch {stack.torch_version} (CUDA {cuda})"
        if floor is None or minimum is None:
            out.append(Finding("info", "driver", f"the minimum driver for CUDA {cuda} is unknown to envdoctor's table"))
        need = minimum.value if minimum else None
        floor_value = floor.value if floor else ""
        if _below(driver, floor):
            out.append(Finding(
                "fail", "driver",
                f"driver {driver} ({stack.driver.source}) is below CUDA {cuda.split('.')[0]}.x's floor "
                f"{floor_value}: {torch} fails with 'CUDA driver version is insufficient'",
                f"install driver branch {_branch(need or floor_value)} or newer (>= {need or floor_value}), "
                "or a torch built for the CUDA this driver supports"))
        elif need and _below(driver, minimum):
            out.append(Finding(
                "warn", "driver",
                f"driver {driver} runs {torch} only through minor-version compatibility (floor {floor_value}, "
                f"CUDA {cuda} wants >= {need}): machine code runs, PTX newer than the driver cannot be JIT-compiled",
                f"install driver branch {_branch(need)} or newer (>= {need})"))
    out += _extension_runtime_floors(stack, driver)
    for cc in sorted({g.cc_text for g in stack.gpus if g.cc}):
        generation = tables.generation_min_driver(cc)
        names = ", ".join(sorted({g.name for g in stack.gpus if g.cc_text == cc}))
        if generation is None:
            continue
        toolkit, row = generation
        if _below(driver, row):
            out.append(Finding(
                "fail", "driver",
                f"{names} (CC {cc}) needs driver >= {row.value} (CUDA {toolkit.value} is the first to support it); "
                f"the driver is {driver}",
                f"install driver branch {_branch(row.value)} or newer (>= {row.value})"))
    return out


def _extension_runtime_floors(stack: GpuStack, driver: str) -> list[Finding]:
    """An extension linked against another CUDA major's runtime (libcudart.so.13 beside a
    CUDA 12 torch) needs that major's driver floor too."""
    torch_major = (stack.torch_cuda or "").split(".")[0]
    out: list[Finding] = []
    for major in sorted({n.rsplit(".", 1)[-1] for b in stack.binaries for n in b.needed
                         if n.startswith("libcudart.so.")} - {torch_major}):
        floor = tables.lookup(tables.MAJOR_FLOOR, major)
        if floor is not None and _below(driver, floor):
            users = ", ".join(sorted({b.label for b in stack.binaries if f"libcudart.so.{major}" in b.needed}))
            out.append(Finding("fail", "driver", f"{users} link(s) libcudart.so.{major}: CUDA {major}.x needs driver "
                               f">= {floor.value}, the driver is {driver}",
                               f"install driver branch {_branch(floor.value)} or newer"))
    return out


def _gpu_groups(stack: GpuStack) -> dict[str, list[Gpu]]:
    groups: dict[str, list[Gpu]] = {}
    for gpu in stack.gpus:
        groups.setdefault(f"{gpu.name} (CC {gpu.cc_text})", []).append(gpu)
    return groups


def _code(binary: Binary) -> str:
    sass = ", ".join(binary.sass) or "none"
    ptx = ", ".join(binary.ptx) or "none"
    return f"SASS {sass}; PTX {ptx}"


def _describe(use: Usability) -> str:
    if use.none:
        return "no usable kernel"
    text = f"{use.usable} of {use.relevant} kernel containers with code for this generation usable"
    return text + (f", {use.via_ptx_only} only through PTX JIT" if use.via_ptx_only else "")


def arch_findings(stack: GpuStack, expected: bool) -> list[Finding]:
    out: list[Finding] = []
    driver = stack.driver.version
    if stack.torch_version and not stack.torch_cuda:
        out.append(Finding("fail" if expected else "warn", "arch",
                           f"torch {stack.torch_version} is not a CUDA build: jobs will not use the GPUs",
                           "install a CUDA build of torch (a +cuXXX wheel) that fits the driver"))
    for label, gpus in _gpu_groups(stack).items():
        cc = gpus[0].cc
        if cc is None:
            out.append(Finding("warn", "arch", f"{label}: compute capability unknown (nvidia-smi has no compute_cap "
                               "and the name is not in envdoctor's table): kernels not checked"))
            continue
        arch_list = arch_list_for(gpus)
        variants: dict[tuple[str, str], list[tuple[Binary, Usability]]] = {}
        for binary in stack.binaries:
            if binary.has_fatbin and binary.containers:
                variants.setdefault((binary.distribution or binary.top, binary.module), []).append(
                    (binary, usability(binary, cc, driver)))
        for group in variants.values():
            binary, use = dispatched(group, cc)
            out += _arch_verdict(binary, use, label, arch_list)
    return out


#: How a package picks among per-architecture builds of one module (folders smXY/).
#: sgl_kernel/load_utils.py (0.3.x): sm90/ on compute capability 9.0 exactly, sm100/ on
#: every other GPU. A package not listed here is judged by its best build.
VARIANT_FOLDER: dict[str, Callable[[tuple[int, int]], str]] = {
    "sgl_kernel": lambda cc: "sm90" if cc == (9, 0) else "sm100",
}


def dispatched(group: list[tuple[Binary, Usability]], cc: tuple[int, int]) -> tuple[Binary, Usability]:
    """The build of a module the package loads on this GPU (or the best, when unknown)."""
    if len(group) > 1:
        choose = VARIANT_FOLDER.get(group[0][0].top)
        if choose is not None:
            wanted = choose(cc)
            for binary, use in group:
                if binary.relpath.split("/")[-2:-1] == [wanted]:
                    return binary, use
    return max(group, key=lambda pair: (pair[1].usable, -pair[1].via_ptx_only))


def _arch_verdict(binary: Binary, use: Usability, label: str, arch_list: str) -> list[Finding]:
    role = binary.role
    what = f"{binary.label} on {label}: {_describe(use)} ({_code(binary)})"
    if role == "torch":
        rebuild = (f"install a torch whose wheel carries sm_{arch_list.replace('.', '').replace(';', '/sm_')}, "
                   f"or build it from source with TORCH_CUDA_ARCH_LIST=\"{arch_list}\"")
    else:
        rebuild = (f"install a {binary.distribution or binary.top} build for this GPU, or rebuild it from source "
                   f"with TORCH_CUDA_ARCH_LIST=\"{arch_list}\" (pip install --no-binary)")
    if use.none:
        level = {"torch": "fail", "core": "fail", "optional": "info"}.get(role, "warn")
        return [Finding(level, "arch", what + ": 'no kernel image is available for execution on the device'", rebuild)]
    if use.partial or use.ptx_only:
        return [Finding("info" if role == "optional" else "warn", "arch", what, rebuild)]
    return []


def _installed_matches(pin: str, installed: str) -> bool | None:
    try:
        return SpecifierSet("==" + pin).contains(Version(installed), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return None


def abi_findings(stack: GpuStack, demangle: Demangler | None) -> list[Finding]:
    out: list[Finding] = []
    names = {s for b in stack.binaries for s in b.missing}
    shown = dict(demangle(sorted(names))) if demangle and names else {}
    torch = stack.torch_version
    pins_seen: set[tuple[str, str]] = set()
    for binary in stack.binaries:
        built_for = f"built for torch=={binary.torch_pin}" if binary.torch_pin else "built for another torch"
        if binary.torch_libs_absent:
            libs = ", ".join(binary.torch_libs_absent)
            text = (f"{binary.label} needs {libs}, which torch {torch} does not have" if torch else
                    f"{binary.label} needs torch's {libs}, and torch is not installed")
            out.append(Finding("fail", "abi", text + ": importing it fails", _pin_remedy(binary, torch)))
        if binary.missing_count:
            listed = "; ".join(shown.get(s, s) for s in binary.missing)
            more = f" (and {binary.missing_count - len(binary.missing)} more)" if binary.missing_count > len(binary.missing) else ""
            out.append(Finding("fail", "abi", f"{binary.label} ({built_for}) needs {binary.missing_count} symbol(s) "
                               f"torch {torch} does not export, importing it raises 'undefined symbol': {listed}{more}",
                               _pin_remedy(binary, torch)))
        cudart = [n for n in binary.needed if n.startswith("libcudart.so.")]
        if cudart and stack.torch_cuda and cudart[0].rsplit(".", 1)[-1] != stack.torch_cuda.split(".")[0]:
            out.append(Finding("warn", "abi", f"{binary.label} links {cudart[0]} but torch {torch} uses CUDA "
                               f"{stack.torch_cuda}: it loads only if that CUDA runtime is installed too",
                               _pin_remedy(binary, torch)))
        key = (binary.distribution or "", binary.torch_pin or "")
        if binary.torch_pin and torch and key not in pins_seen:
            pins_seen.add(key)
            if _installed_matches(binary.torch_pin, torch) is False:
                out.append(Finding("warn", "abi", f"{binary.distribution} {binary.version} requires torch=="
                                   f"{binary.torch_pin} but torch {torch} is installed: a layout change breaks it "
                                   "even when every symbol resolves", _pin_remedy(binary, torch)))
    return out


def _pin_remedy(binary: Binary, torch: str | None) -> str:
    owner = binary.distribution or binary.top
    if torch is None:
        return f"install torch=={binary.torch_pin}" if binary.torch_pin else "install the torch it was built for"
    if binary.torch_pin:
        return (f"install torch=={binary.torch_pin} (the pin of {owner} {binary.version}), or a {owner} release "
                f"built for torch {torch}")
    return f"install a {owner} release built for torch {torch}, or rebuild it against the installed torch"
