"""Pure rules of gpu.stack: which code runs on which GPU, driver floors, ABI verdicts, tables."""

from __future__ import annotations

from typing import Any

import pytest

from envdoctor.gpu import tables
from envdoctor.gpu.stack import GpuStack, ptx_runs, sass_runs, usability
from envdoctor.gpu.verdicts import judge
from envdoctor.engine.graph import CheckContext
from envdoctor.inventory import HostSpec
from envdoctor.probe.program import ProbeOutput
from envdoctor.engine.facts import HostFacts

from envdoctor.checks.gpu import gpu_stack as gpu_stack_check

TORCH_291 = ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


def binary(relpath: str, sass: list[str], ptx: list[str] = (), *, kind: str = "extension",  # type: ignore[assignment]  # tuple default
           count: int = 1, **extra: Any) -> dict[str, Any]:
    return {"path": "/v/site/" + relpath, "relpath": relpath, "kind": kind,
            "fatbin": {"containers": count, "groups": [{"sass": sass, "ptx": list(ptx), "count": count}]}, **extra}


def raw(gpus: list[tuple[str, str]] = (), driver: str | None = "580.65.06", torch: str = "2.9.1+cu128",  # type: ignore[assignment]  # tuple default
        cuda: str | None = "12.8", binaries: list[dict[str, Any]] = (), smi: bool = True) -> dict[str, Any]:  # type: ignore[assignment]  # tuple default
    return {
        "driver": {"kernel": {"version": driver, "source": "/sys/module/nvidia/version"} if driver else None,
                   "libcuda": [], "compat": []},
        "smi": {"path": "/usr/bin/nvidia-smi" if smi else None,
                "gpus": [{"name": n, "compute_cap": cc, "driver_version": driver or ""} for n, cc in gpus]},
        "torch": {"version": torch, "cuda": cuda} if torch else None,
        "binaries": [binary("torch/lib/libtorch_cuda.so", TORCH_291, kind="torch", count=390), *binaries],
    }


def levels(stack_raw: dict[str, Any], expected: int | None = None) -> list[tuple[str, str]]:
    verdict = judge(GpuStack.from_probe(stack_raw), expected)
    return [(f.level, f.part) for f in verdict.findings]


@pytest.mark.parametrize("arch, cc, runs", [
    ("sm_80", (8, 0), True), ("sm_80", (8, 6), True), ("sm_86", (8, 0), False), ("sm_80", (9, 0), False),
    ("sm_90a", (9, 0), True), ("sm_100a", (10, 3), False), ("sm_100", (10, 3), True), ("sm_120a", (12, 1), False),
    ("sm_120", (12, 1), True), ("sm_70", (6, 1), False), ("sm_100f", (10, 3), True),
])
def test_sass_rules(arch: str, cc: tuple[int, int], runs: bool) -> None:
    """SASS sm_XY runs on X.Z with Z >= Y; sm_XYa only on exactly X.Y."""
    assert sass_runs(arch, cc) is runs


@pytest.mark.parametrize("arch, isa, cc, driver, runs", [
    ("compute_90", "8.4", (10, 3), "580.65.06", True),     # JIT to a newer GPU
    ("compute_90", "8.4", (8, 0), "580.65.06", False),     # never to an older one
    ("compute_90", "8.8", (9, 0), "570.86.15", False),     # ISA 8.8 (CUDA 12.9) needs >= 575.51.03
    ("compute_90", "8.8", (9, 0), "575.51.03", True),
    ("compute_90a", "8.4", (10, 0), "580.65.06", False),   # arch-specific PTX: exactly 9.0
    ("compute_90", "8.6", (9, 0), "580.65.06", None),      # ISA the table does not know
])
def test_ptx_rules(arch: str, isa: str, cc: tuple[int, int], driver: str, runs: bool | None) -> None:
    """PTX compute_XY JITs on CC >= X.Y when the driver knows its ISA; unknown ISA is None."""
    assert ptx_runs(arch, isa, cc, driver) is runs


def test_matching_stack_passes() -> None:
    """torch 2.9.1+cu128 on an H100 with a new driver and a clean extension: nothing found."""
    assert levels(raw([("NVIDIA H100 80GB HBM3", "9.0")],
                      binaries=[binary("vllm/_C.abi3.so", ["sm_80", "sm_90"], missing=[], missing_count=0)])) == []


def test_cc_61_fails_for_torch_291() -> None:
    """torch 2.9.1 carries no sm_6x code and no PTX: a Pascal GPU fails."""
    verdict = judge(GpuStack.from_probe(raw([("Tesla P40", "6.1")])), None)
    fail = [f for f in verdict.findings if f.level == "fail"]
    assert len(fail) == 1 and "libtorch_cuda.so" in fail[0].message and "CC 6.1" in fail[0].message
    assert 'TORCH_CUDA_ARCH_LIST="6.1"' in (fail[0].remedy or "")


def test_sm100a_only_core_extension_fails_on_b300() -> None:
    """sgl_kernel built for sm_100a/sm_120a without PTX has no kernel for CC 10.3 or 12.1."""
    ext = binary("sgl_kernel/sm100/common_ops.abi3.so", ["sm_100a", "sm_120a"])
    assert ("fail", "arch") in levels(raw([("NVIDIA B300 SXM6 AC", "10.3")], binaries=[ext]))
    assert ("fail", "arch") in levels(raw([("NVIDIA GB10", "12.1")], binaries=[ext]))
    assert ("fail", "arch") not in levels(raw([("NVIDIA B200", "10.0")], binaries=[ext]))


def test_the_variant_the_package_loads_decides() -> None:
    """sgl_kernel loads sm90/common_ops on CC 9.0 only and sm100/ elsewhere: an sm90 build
    that would run on an A100 does not save it; a package without a known rule gets its best."""
    variants = [binary("sgl_kernel/sm90/common_ops.abi3.so", ["sm_90a", "sm_80"]),
                binary("sgl_kernel/sm100/common_ops.abi3.so", ["sm_100a"])]
    assert levels(raw([("NVIDIA H100", "9.0")], binaries=variants)) == []
    assert levels(raw([("NVIDIA B200", "10.0")], binaries=variants)) == []
    assert levels(raw([("NVIDIA A100", "8.0")], binaries=variants)) == [("fail", "arch")]
    other = [binary("pkg/sm90/_C.abi3.so", ["sm_80"]), binary("pkg/sm100/_C.abi3.so", ["sm_100a"])]
    assert levels(raw([("NVIDIA A100", "8.0")], binaries=other)) == []


def test_extension_roles() -> None:
    """No kernel at all: fail for a core module, warn for another extension, info for FA3."""
    gpus = [("NVIDIA A100-SXM4-80GB", "8.0")]
    assert levels(raw(gpus, binaries=[binary("vllm/_moe_C.abi3.so", ["sm_90a"])])) == [("fail", "arch")]
    assert levels(raw(gpus, binaries=[binary("other/_k.abi3.so", ["sm_90a"])])) == [("warn", "arch")]
    assert levels(raw(gpus, binaries=[binary("vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so", ["sm_90a"])])) == [
        ("info", "arch")]


def test_partial_and_ptx_only_warn() -> None:
    """Some same-generation containers unusable, or usable only through PTX JIT: warn."""
    partial = {"path": "/v/site/vllm/_C.abi3.so", "relpath": "vllm/_C.abi3.so", "kind": "extension",
               "fatbin": {"groups": [{"sass": ["sm_100"], "ptx": [], "count": 5},
                                     {"sass": ["sm_100a"], "ptx": [], "count": 5},
                                     {"sass": ["sm_90a"], "ptx": [], "count": 5}]}}
    stack = GpuStack.from_probe(raw([("NVIDIA B300", "10.3")], binaries=[partial]))
    use = usability(stack.binaries[1], (10, 3), "580.65.06")
    assert (use.usable, use.relevant, use.partial) == (5, 10, True)  # sm_90a is Hopper's, not counted
    assert levels(raw([("NVIDIA B300", "10.3")], binaries=[partial])) == [("warn", "arch")]
    ptx_only = binary("flash/_fa2.abi3.so", ["sm_80"], ["compute_80@8.4"])
    assert levels(raw([("NVIDIA H100", "9.0")], binaries=[ptx_only])) == [("warn", "arch")]


@pytest.mark.parametrize("driver, expected", [
    ("580.65.06", []),
    ("570.26", []),
    ("550.54.15", [("warn", "driver")]),    # minor-version compatible: PTX JIT fails
    ("525.60.13", [("warn", "driver")]),
    ("520.61.05", [("fail", "driver")]),    # below CUDA 12.x's floor
])
def test_driver_floors_for_cuda_128(driver: str, expected: list[tuple[str, str]]) -> None:
    """CUDA 12.8: fail below 525.60.13, warn below 570.26, pass from there (on an A100)."""
    assert levels(raw([("NVIDIA A100", "8.0")], driver=driver)) == expected


def test_generation_floor() -> None:
    """A B300 needs a driver that knows CC 10.3 (CUDA 12.9's 575.51.03)."""
    found = levels(raw([("NVIDIA B300 SXM6 AC", "10.3")], driver="570.86.15"))
    assert ("fail", "driver") in found


def test_abi_missing_symbols_fail_with_pin_and_demangled_names() -> None:
    """Missing torch symbols fail, naming the extension, the pin and the demangled symbol;
    the differing pin also warns; the remedy names the pin."""
    ext = binary("vllm/_C.abi3.so", ["sm_90"], distribution="vllm", version="0.11.0", torch_pin="2.8.0",
                 missing=["_ZNK3c106SymInt6sym_neERKS0_"], missing_count=1)
    verdict = judge(GpuStack.from_probe(raw([("NVIDIA H100", "9.0")], binaries=[ext])), None,
                    lambda names: {n: "c10::SymInt::sym_ne(c10::SymInt const&) const" for n in names})
    (fail,) = [f for f in verdict.findings if f.level == "fail"]
    assert "vllm 0.11.0" in fail.message and "torch==2.8.0" in fail.message
    assert "c10::SymInt::sym_ne(c10::SymInt const&) const" in fail.message
    assert fail.remedy and "torch==2.8.0" in fail.remedy
    assert [f.level for f in verdict.findings if "requires torch==2.8.0" in f.message] == ["warn"]


def test_pin_matching_the_local_build_passes() -> None:
    """torch==2.9.1 is met by 2.9.1+cu128 (PEP 440 ignores the local label)."""
    ext = binary("vllm/_C.abi3.so", ["sm_90"], distribution="vllm", version="0.12.0", torch_pin="2.9.1")
    assert levels(raw([("NVIDIA H100", "9.0")], binaries=[ext])) == []


def test_no_gpu_without_expectation_skips_driver_and_arch_but_not_abi() -> None:
    """No GPU and none expected: driver and kernels are skipped with the reason; ABI runs."""
    ext = binary("vllm/_C.abi3.so", ["sm_100a"], missing=["_ZN2at3fooEv"], missing_count=1)
    verdict = judge(GpuStack.from_probe(raw([], driver=None, smi=False, binaries=[ext])), None)
    assert verdict.skipped and "no nvidia-smi on PATH" in verdict.skipped
    assert [(f.level, f.part) for f in verdict.findings] == [("fail", "abi")]


def test_expected_gpus_missing_fails() -> None:
    """gpus = N and no GPU answering: the driver part fails instead of being skipped."""
    verdict = judge(GpuStack.from_probe(raw([], driver=None, smi=False)), 8)
    assert verdict.skipped is None and [(f.level, f.part) for f in verdict.findings] == [("fail", "driver")]


def test_cpu_torch_with_gpus_warns() -> None:
    """A CPU build of torch on a GPU host warns (fails when GPUs are expected)."""
    stack_raw = raw([("NVIDIA H100", "9.0")], torch="2.9.1+cpu", cuda=None)
    stack_raw["binaries"] = []
    assert levels(stack_raw) == [("warn", "arch")]
    assert levels(stack_raw, expected=1) == [("fail", "arch")]


def test_cc_from_name_table_when_smi_has_no_compute_cap() -> None:
    """Without compute_cap the name table gives the CC and says so; unknown names stay unknown."""
    stack_raw = raw([("Tesla P4", "")])
    stack = GpuStack.from_probe(stack_raw)
    assert stack.gpus[0].cc == (6, 1) and stack.gpus[0].cc_source.startswith("name table")
    stack_raw["smi"]["gpus"][0]["name"] = "NVIDIA Future X9"
    assert GpuStack.from_probe(stack_raw).gpus[0].cc is None
    assert ("warn", "arch") in levels(stack_raw)


def test_tables_have_sources_and_no_guesses() -> None:
    """Every row names its source; keys the tables do not hold are unknown (None)."""
    for rows in (tables.TOOLKIT_MIN_DRIVER, tables.MAJOR_FLOOR, tables.PTX_ISA_TOOLKIT, tables.GENERATION_TOOLKIT,
                 tables.GPU_NAMES):
        assert all(row.source and row.value for row in rows)
    assert tables.toolkit_min_driver("12.8").value == "570.26"  # type: ignore[union-attr]
    assert tables.major_floor("12.4").value == "525.60.13"  # type: ignore[union-attr]
    assert tables.toolkit_min_driver("12.7") is None and tables.ptx_min_driver("8.6") is None
    assert tables.cc_from_name("NVIDIA GB200") .value == "10.0"  # type: ignore[union-attr]
    assert tables.cc_from_name("NVIDIA L40S").value == "8.9"  # type: ignore[union-attr]
    assert tables.cc_from_name("NVIDIA L4").value == "8.9"  # type: ignore[union-attr]


def test_check_reports_probe_error_and_skip() -> None:
    """The check: a failed probe section is an error; no GPU and no expectation passes with
    the skip reason in its message (the ABI part ran)."""
    spec = HostSpec("h", None)
    broken = HostFacts.from_probe(ProbeOutput(sections={}, errors={"gpu-stack": "Traceback\nOSError: boom"}))
    assert gpu_stack_check(CheckContext(spec, broken)).status == "error"
    facts = HostFacts.from_probe(ProbeOutput(sections={"gpu-stack": raw([], driver=None, smi=False)}))
    result = gpu_stack_check(CheckContext(spec, facts))
    assert result.status == "pass" and "driver and kernel checks skipped" in result.message
    assert result.details["gpu"]["torch"] == {"version": "2.9.1+cu128", "cuda": "12.8"}


def test_extension_on_a_newer_cuda_runtime_needs_its_floor() -> None:
    """An extension linking libcudart.so.13 beside a CUDA 12.8 torch fails on a 570 driver
    (CUDA 13.x needs >= 580.65.06) and warns about the runtime mismatch."""
    ext = binary("torchao/_C_mxfp8.abi3.so", ["sm_90"], needed=["libcudart.so.13", "libc10.so"])
    found = levels(raw([("NVIDIA H100", "9.0")], driver="570.86.15", binaries=[ext]))
    assert ("fail", "driver") in found and ("warn", "abi") in found
    assert ("fail", "driver") not in levels(raw([("NVIDIA H100", "9.0")], driver="580.65.06", binaries=[ext]))


def test_facts_document_carries_gpu() -> None:
    """`facts --format json` has a `gpu` object built from the probe's gpu-stack section."""
    from envdoctor.stages.handoff import facts_document

    facts = HostFacts.from_probe(ProbeOutput(sections={"gpu-stack": raw([("NVIDIA H100", "9.0")])}))
    doc = facts_document(HostSpec("h", None), facts, None, 5)
    assert doc["gpu"]["gpus"][0]["compute_capability"] == "9.0"
    assert doc["gpu"]["binaries"][0]["runnable"] == {"0": "yes"}
    assert facts_document(HostSpec("h", None), HostFacts.from_probe(ProbeOutput()), None, 5)["gpu"] is None


def test_malformed_probe_answer_is_an_error_result() -> None:
    """A host answering nonsense in gpu-stack gets an error result, not a crash."""
    bad = raw([("NVIDIA H100", "9.0")])
    bad["smi"]["gpus"] = ["not a mapping"]
    facts = HostFacts.from_probe(ProbeOutput(sections={"gpu-stack": bad}))
    result = gpu_stack_check(CheckContext(HostSpec("h", None), facts))
    assert result.status == "error" and "malformed" in result.message


def test_gpus_from_proc_get_cc_from_the_name_table() -> None:
    """GPUs named by /proc/driver/nvidia (no nvidia-smi) are judged with the name table's CC."""
    stack_raw = raw([], smi=False)
    stack_raw["driver"]["gpus"] = [{"name": "NVIDIA H100 80GB HBM3", "source": "/proc/driver/nvidia/gpus/x/information"}]
    stack = GpuStack.from_probe(stack_raw)
    assert [(g.name, g.cc) for g in stack.gpus] == [("NVIDIA H100 80GB HBM3", (9, 0))]
    assert judge(stack, None).skipped is None


def test_extension_without_torch_installed() -> None:
    """An extension needing torch's libraries in a venv without torch fails, saying so."""
    ext = binary("vllm/_C.abi3.so", ["sm_90"], distribution="vllm", version="0.11.0", torch_pin="2.8.0",
                 torch_libs_absent=["libc10.so", "libtorch.so"])
    stack_raw = raw([], driver=None, smi=False, torch="", binaries=[ext])
    (fail,) = judge(GpuStack.from_probe(stack_raw), None).findings
    assert "torch is not installed" in fail.message and fail.remedy == "install torch==2.8.0"


def test_driver_version_sources() -> None:
    """cuda-compat on the loader path overrides the driver's libcuda; without the kernel
    module's files the user-space libcuda.so.<ver> names it; a mismatch warns."""
    stack_raw = raw([("NVIDIA H100", "9.0")], driver="550.54.15")
    stack_raw["driver"]["compat"] = [{"path": "/usr/local/cuda-12.8/compat", "versions": ["570.124.06"],
                                      "on_ld_library_path": True, "in_ld_so_conf": False}]
    assert GpuStack.from_probe(stack_raw).driver.version == "570.124.06"
    assert levels(stack_raw) == []  # 570.124.06 meets CUDA 12.8's 570.26
    container_raw = raw([("NVIDIA H100", "9.0")], driver=None)
    container_raw["driver"]["libcuda"] = [{"path": "/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05",
                                           "version": "535.104.05", "order": 2}]
    driver = GpuStack.from_probe(container_raw).driver
    assert (driver.version, driver.source) == ("535.104.05", "/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05")
    mismatch = raw([("NVIDIA H100", "9.0")], driver="580.65.06")
    mismatch["driver"]["libcuda"] = [{"path": "/usr/lib/libcuda.so.575.57.08", "version": "575.57.08", "order": 0}]
    assert levels(mismatch) == [("warn", "driver")]
