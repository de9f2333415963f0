"""The snapshot of one host: what a bug report to vLLM, SGLang or speculators needs.

Pure: a document (JSON-ready) built from the host's facts and check results. The fields
follow what vLLM's ``collect_env.py`` and SGLang's ``check_env.py`` print (docs/snapshot.md
compares them field by field), read from files by the probe instead of by importing torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from envdoctor.compare.have import job_env
from envdoctor.engine.facts import Environment, HostFacts
from envdoctor.engine.results import CheckResult, Status
from envdoctor.gpu.stack import GpuStack
from envdoctor.inventory import HostSpec
from envdoctor.patching.ledger import applied_patches, parse_ledger, unfinished

#: Packages a bug report names by exactly this name (the issue templates' and check_env.py's lists).
RELEVANT_NAMES = frozenset({
    "sglang", "sgl-kernel", "vllm", "tokenizers", "speculators", "torchao", "aiohttp", "fastapi", "hf-transfer",
    "huggingface-hub", "interegular", "modelscope", "orjson", "outlines", "packaging", "psutil", "pydantic",
    "python-multipart", "pyzmq", "uvicorn", "uvloop", "xgrammar", "openai", "tiktoken", "anthropic", "litellm",
    "decord", "decord2", "safetensors", "accelerate", "sentencepiece", "xformers", "flash-attn", "deep-gemm",
    "cuda-python", "nvidia-ml-py",
})
#: Parts of a name that make a package relevant wherever they occur (collect_env.py's patterns).
RELEVANT_PARTS = ("torch", "numpy", "mypy", "flake8", "triton", "optree", "onnx", "nccl", "transformers", "zmq",
                  "nvidia", "pynvml", "flashinfer", "helion")


#: The patterns torch's ``collect_env`` keeps ``pip list --format=freeze`` lines by (PIP_PATTERNS,
#: COMMON_PATTERNS, NVIDIA_PATTERNS and ONEAPI_PATTERNS of ``torch/utils/collect_env.py``, torch
#: 2.14): a line is kept when one occurs anywhere in it, name or version, case and all.
COLLECT_ENV_PATTERNS = (
    "mypy", "flake8", "onnx", "torch", "numpy", "triton", "optree", "cuda-cudart", "cuda-cupti", "cuda-libraries",
    "cuda-opencl", "cuda-nvrtc", "cuda-runtime", "cublas", "cudnn", "cufft", "curand", "cusolver", "cusparse", "nccl",
    "nvjitlink", "nvtx", "dpcpp-cpp-rt", "intel-cmplr-lib-rt", "intel-cmplr-lib-ur", "intel-cmplr-lic-rt",
    "intel-opencl-rt", "intel-sycl-rt", "mkl", "onemkl-sycl-blas", "onemkl-sycl-dft", "onemkl-sycl-lapack",
    "onemkl-sycl-rng", "onemkl-sycl-sparse", "intel-openmp", "tbb", "impi-rt", "impi-devel", "oneccl", "oneccl-devel",
    "intel-pti", "umf", "tcmlib",
)


def relevant(key: str) -> bool:
    return key in RELEVANT_NAMES or any(part in key for part in RELEVANT_PARTS)


def pip_line(name: str, version: str) -> str:
    """A distribution as ``pip list --format=freeze`` prints it: its metadata's name, ``==``, its version."""
    return f"{name}=={version}"


def in_collect_env(name: str, version: str) -> bool:
    """Whether collect_env lists the distribution among its ``[pip3]`` lines."""
    line = pip_line(name, version)
    return any(pattern in line for pattern in COLLECT_ENV_PATTERNS)


def snapshot_document(spec: HostSpec, facts: HostFacts, results: Sequence[CheckResult]) -> dict[str, Any]:
    system = facts.section("system") if isinstance(facts.section("system"), Mapping) else {}
    env = job_env(spec, facts)
    doc: dict[str, Any] = {
        "os": _os(system),
        "kernel": system.get("kernel"),
        "libc": _libc(system.get("libc")),
        "cpu": system.get("cpu"),
        "memory": system.get("memory"),
        "limits": system.get("limits"),
        "python": _python(system.get("python"), env),
        "packages": _packages(env),
        **_gpu(facts, env),
        "cuda_toolkit": system.get("cuda_toolkit"),
        "cuda_runtime_version": _cuda_runtime(system.get("cuda_toolkit")),
        "environment_variables": (system.get("environment") or {}).get("vars") or {},
        "masked_variables": (system.get("environment") or {}).get("masked") or [],
        "patches": _patches(facts.section("patch-ledger")),
        # What the checks found; a skipped check (no model given, say) is only counted.
        "findings": [{"id": r.id, "status": str(r.status), "message": r.message}
                     for r in results if r.status not in (Status.PASS, Status.SKIPPED)],
        "checks": {str(status): sum(1 for r in results if r.status is status) for status in Status
                   if any(r.status is status for r in results)},
    }
    errors = {name: (text.strip().splitlines() or [""])[-1] for name, text in facts.probe.errors.items()}
    if errors:
        doc["not_collected"] = errors
    return doc


def _os(system: Mapping[str, Any]) -> str | None:
    release = system.get("os") or {}
    name = release.get("pretty_name") or release.get("name")
    return f"{name} ({system.get('machine')})" if name else None


def _libc(libc: Any) -> str | None:
    """As collect_env.py spells it: ``glibc-2.36``."""
    if not isinstance(libc, Mapping) or not libc.get("name"):
        return None
    return f"{libc['name']}-{libc.get('version') or ''}".rstrip("-")


def _python(python: Any, env: Environment | None) -> dict[str, Any]:
    found = dict(python) if isinstance(python, Mapping) else {}
    if env is not None:
        found["environment"] = env.prefix
        found["interpreter"] = env.executable or env.python
        found.setdefault("full_version", env.version)
    return found


def _packages(env: Environment | None) -> dict[str, str]:
    """The relevant packages: SGLang's and the issue templates' names, and every line collect_env
    prints under ``[pip3]`` (``nvtx``, ``nvidia-cublas``, ``mkl``...)."""
    if env is None:
        return {}
    return {d.name: d.version for key, d in sorted(env.installed.items())
            if relevant(key) or in_collect_env(d.name, d.version)}


def _cuda_runtime(toolkit: Any) -> str | None:
    """collect_env's "CUDA runtime version": what the nvcc on PATH prints for `nvcc --version`."""
    if not isinstance(toolkit, Mapping) or not isinstance(toolkit.get("nvcc_on_path"), Mapping):
        return None
    version = toolkit["nvcc_on_path"].get("version")
    return str(version) if version else None


def _gpu(facts: HostFacts, env: Environment | None) -> dict[str, Any]:
    installed = env.installed if env is not None else {}
    wheels = {prefix: next((f"{d.version} ({d.name})" for k, d in sorted(installed.items()) if k.startswith(prefix)),
                           None) for prefix in ("nvidia-nccl-cu", "nvidia-cudnn-cu")}
    section = facts.section("gpu-stack")
    system = facts.section("system") if isinstance(facts.section("system"), Mapping) else {}
    found: dict[str, Any] = {"nccl": wheels["nvidia-nccl-cu"], "cudnn": wheels["nvidia-cudnn-cu"],
                             "topology": system.get("topology")}
    if not isinstance(section, Mapping):
        return {**found, "torch": None, "driver": None, "gpus": []}
    stack = GpuStack.from_probe(section)
    torch = section.get("torch") if isinstance(section.get("torch"), Mapping) else {}
    found["torch"] = {"version": stack.torch_version, "cuda": stack.torch_cuda, "hip": torch.get("hip"),
                      "debug": torch.get("debug"), "git_version": torch.get("git_version")} if stack.torch_version \
        else None
    found["driver"] = {"version": stack.driver.version, "source": stack.driver.source,
                       "notes": list(stack.driver.notes)} if stack.driver.version else None
    found["gpus"] = [{"index": g.index, "name": g.name, "compute_capability": g.cc_text} for g in stack.gpus]
    return found


def _patches(section: Any) -> list[dict[str, str]]:
    if not isinstance(section, Mapping) or not section.get("exists"):
        return []
    entries = parse_ledger(str(line) for line in section.get("lines") or [])
    found = [{"patch": patch, "file": path, "state": "applied", "distribution": entry.distribution,
              "version": entry.version} for (patch, path), entry in applied_patches(entries).items()]
    found += [{"patch": e.patch, "file": e.file, "state": f"unfinished {e.op}", "distribution": e.distribution,
               "version": e.version} for e in unfinished(entries)]
    return found
