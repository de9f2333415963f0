"""docs/snapshot.md's tables against vLLM's collect_env.py and SGLang's check_env.py field lists,
and against a real snapshot of this machine (a node laid out with torch's version file, a
driver root and an nvidia-smi): every field the docs call covered is there, with what the
system itself says."""

from __future__ import annotations

import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from envdoctor.engine.executor import FleetSettings
from envdoctor.engine.graph import load_checks
from envdoctor.inventory import HostSpec
from envdoctor.operations.compare import snapshot_hosts
from envdoctor.report.snapshot_report import render_host
from tests.fleet_layouts import fake_driver_root, fake_smi, fake_torch, metadata_only_distribution

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "snapshot.md"

#: The fields of SystemEnv in vllm/collect_env.py (vllm-project/vllm, main).
COLLECT_ENV_FIELDS = (
    "torch_version", "is_debug_build", "cuda_compiled_version", "gcc_version", "clang_version", "cmake_version",
    "os", "libc_version", "python_version", "python_platform", "is_cuda_available", "cuda_runtime_version",
    "cuda_module_loading", "nvidia_driver_version", "nvidia_gpu_models", "cudnn_version", "xpu_available",
    "xpu_runtime_version", "intel_graphics_compiler_version", "intel_gpu_models", "oneapi_compiler_version",
    "level_zero_loader_version", "level_zero_driver_version", "oneccl_version", "libigdgmm_version",
    "vllm_xpu_kernels_version", "sycl_version", "pip_version", "pip_packages", "conda_packages",
    "hip_compiled_version", "hip_runtime_version", "miopen_runtime_version", "caching_allocator_config",
    "is_xnnpack_available", "cpu_info", "rocm_version", "vllm_version", "vllm_build_flags", "gpu_topo", "env_vars",
)
#: The keys python/sglang/check_env.py's GPUEnv prints (sgl-project/sglang).
CHECK_ENV_KEYS = ("Python", "CUDA available", "GPU N", "GPU N Compute Capability", "CUDA_HOME", "NVCC",
                  "CUDA Driver Version", "PyTorch", "package versions", "NVIDIA Topology", "Hypervisor vendor",
                  "ulimit soft")


def table(heading: str) -> dict[str, tuple[str, str]]:
    """The rows of the table under ``heading``: field -> (covered, snapshot path)."""
    text = PAGE.read_text(encoding="utf-8").split(heading, 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = (cells[1], cells[2].strip("`"))
    return rows


TABLES = {"collect_env": (table("vLLM's `collect_env.py`"), COLLECT_ENV_FIELDS),
          "check_env": (table("SGLang's `check_env.py`"), CHECK_ENV_KEYS)}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_page_lists_each_field_once_and_says_where_the_snapshot_has_it(name):
    """Every field of the tool is a row, no row is another field; a covered row names a path."""
    rows, fields = TABLES[name]
    assert sorted(rows) == sorted(fields)
    for field, (covered, path) in rows.items():
        assert covered in ("yes", "partly", "no"), field
        assert bool(path) == (covered != "no"), f"{field}: a covered field names its snapshot path, no other"


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A snapshot of this machine, the job's environment laid out as a GPU node's: torch 2.9.1
    for CUDA 12.8, vllm and the NCCL and cuDNN wheels, driver 580.95.05, two H100s, a CUDA toolkit."""
    root = tmp_path_factory.mktemp("node")
    prefix = root / "venv"
    fake_torch(prefix, "2.9.1+cu128", "12.8")
    for name, version in (("vllm", "0.11.0"), ("nvidia-nccl-cu12", "2.27.3"), ("nvidia-cudnn-cu12", "9.10.2.21"),
                          ("transformers", "4.57.1")):
        metadata_only_distribution(prefix, name, version)
    toolkit = root / "cuda"
    toolkit.mkdir()
    (toolkit / "version.json").write_text('{"cuda": {"name": "CUDA SDK", "version": "12.8.1"}}')
    # nvcc on PATH as a wrapper script (as /usr/local/bin/nvcc often is) of a binary that holds the
    # string `nvcc --version` prints, in a toolkit made of wheels (no version file).
    wheels = root / "cuda-wheels" / "bin"
    wheels.mkdir(parents=True)
    (wheels / "nvcc").write_bytes(b"\x7fELF" + b"\0" * 4096 + b"Cuda compilation tools, release 12.8, V12.8.93\0")
    (root / "bin").mkdir(exist_ok=True)
    (root / "bin" / "nvcc").write_text(f'#!/bin/sh\nexec {wheels / "nvcc"} "$@"\n')
    (root / "bin" / "nvcc").chmod(0o755)
    smi = fake_smi(root / "bin", [("NVIDIA H100 80GB HBM3", "9.0")] * 2, "580.95.05")
    env = {"ENVDOCTOR_SYSFS_ROOT": str(fake_driver_root(root / "sys", "580.95.05")), "CUDA_HOME": str(toolkit),
           "PATH": f"{smi.parent}:{os.environ['PATH']}", "CUDA_MODULE_LOADING": "LAZY",
           "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "TORCH_CUDA_ARCH_LIST": "9.0",
           "HOME": str(root / "home")}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        found = snapshot_hosts([HostSpec("local", None, venv=str(prefix))], load_checks(), FleetSettings())
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    assert found[0].document is not None, found[0].problem
    return {"document": found[0].document, "text": render_host(found[0])}


MISSING = object()
#: Fields that are null on an NVIDIA node by right (collect_env prints "N/A" for them there).
NULL_ON_CUDA = {"hip_compiled_version"}


def path_value(document: dict[str, Any], path: str) -> Any:
    value: Any = document
    for part in path.split("."):
        value = value.get(part, MISSING) if isinstance(value, dict) else MISSING
    return value


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_field_the_page_calls_covered_is_in_the_snapshot(snapshot, name):
    """On a node that has them, each covered field's snapshot path holds a value (a ROCm build's
    field is there, null, on a CUDA node)."""
    rows, _ = TABLES[name]
    empty = [field for field, (covered, path) in rows.items() if covered != "no"
             and path_value(snapshot["document"], path) in ((MISSING,) if field in NULL_ON_CUDA
                                                            else (MISSING, None, "", [], {}))]
    assert empty == []


def test_the_values_are_what_the_node_and_the_system_say(snapshot):
    """torch, its CUDA build, the driver, the GPUs with their compute capability, the toolkit, the
    wheels, the environment variables collect_env prints, and the system's own facts."""
    doc = snapshot["document"]
    assert doc["torch"] == {"version": "2.9.1+cu128", "cuda": "12.8", "hip": None, "debug": False,
                            "git_version": "0" * 40}
    assert doc["driver"]["version"] == "580.95.05"
    assert doc["gpus"] == [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"},
                           {"index": 1, "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}]
    assert doc["cuda_toolkit"]["version"] == "12.8.1"
    assert doc["cuda_runtime_version"] == "12.8.93"  # the wrapper's binary, as `nvcc --version` would say
    assert doc["cuda_toolkit"]["nvcc_on_path"]["binary"].endswith("cuda-wheels/bin/nvcc")
    assert doc["nccl"] == "2.27.3 (nvidia-nccl-cu12)" and doc["cudnn"] == "9.10.2.21 (nvidia-cudnn-cu12)"
    assert {"vllm": "0.11.0", "transformers": "4.57.1", "nvidia-nccl-cu12": "2.27.3"}.items() <= doc["packages"].items()
    assert {"CUDA_MODULE_LOADING": "LAZY", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            "TORCH_CUDA_ARCH_LIST": "9.0"}.items() <= doc["environment_variables"].items()
    assert doc["topology"]["text"].startswith("\tGPU0\tGPU1")
    assert doc["python"]["version"] == sys.version.replace("\n", " ") or doc["python"]["full_version"]
    assert doc["libc"] == "-".join(platform.libc_ver())
    release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    assert doc["os"] == f"{release['PRETTY_NAME'].strip(chr(34))} ({platform.machine()})"


def test_the_text_block_reads_like_collect_envs(snapshot):
    """The labels a bug report reader looks for, with the node's values."""
    text = snapshot["text"]
    for line in ("PyTorch version             : 2.9.1+cu128", "CUDA used to build PyTorch  : 12.8",
                 "Nvidia driver version       : 580.95.05",
                 "GPU models and configuration: GPU 0,1: NVIDIA H100 80GB HBM3 (compute capability 9.0)",
                 "CUDA runtime version        : 12.8.93 (nvcc on PATH: ",
                 "vllm==0.11.0", "CUDA_MODULE_LOADING=LAZY", "GPU topology:"):
        assert line in text, line
    assert re.search(r"Libc version\s+: glibc-\d", text)
