"""python.jit-toolchain: can the packages that compile at run time compile here? Pure.

Which packages compile at run time, and what they run:

- triton builds a small C launcher on first use: a C compiler and this interpreter's Python.h;
- flashinfer JIT-compiles its CUDA kernels (unless flashinfer-jit-cache holds them):
  nvcc from CUDA_HOME, the CUDA headers (cuda_fp8.h, cuda_bf16.h ...), a C++ host compiler,
  ninja;
- deep_gemm (its own wheel, or bundled by sgl-kernel) compiles with nvcc (NVRTC with
  DG_JIT_USE_NVRTC=1) against the CUDA headers;
- deepspeed builds its ops as torch extensions when they were not prebuilt: nvcc, ninja,
  a C++ compiler, Python.h.

nvcc's release is held against torch's CUDA (torch's extension builder refuses another
major release) and against the GPUs (Blackwell needs CUDA 12.8 or newer, Hopper 12.0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envdoctor.engine.facts import Environment
from envdoctor.gpu.node import NodeFacts
from envdoctor.gpu.smi_text import nvcc_release
from envdoctor.gpu.verdicts import Finding

FLASHINFER_HEADERS = ("cuda_runtime.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h")
DEEP_GEMM_HEADERS = ("cuda_runtime.h", "cuda_bf16.h", "cuda_fp8.h", "cuda.h")
#: The first CUDA release that compiles for each architecture nvidia-smi names.
ARCH_MIN_CUDA = {"blackwell": (12, 8), "hopper": (12, 0)}


@dataclass(frozen=True)
class JitUser:
    """A package that compiles at run time, what it needs, and whether a miss fails the job."""

    name: str
    version: str
    needs: tuple[str, ...]
    headers: tuple[str, ...] = ()
    level: str = "fail"
    note: str = ""


def jit_users(env: Environment | None, toolchain: Mapping[str, Any], node_env: Mapping[str, str]) -> list[JitUser]:
    installed = env.installed if env else {}
    users = []
    if "triton" in installed:
        users.append(JitUser("triton", installed["triton"].version, ("cc", "python_h")))
    for name in ("flashinfer-python", "flashinfer"):
        if name in installed:
            cached = "flashinfer-jit-cache" in installed
            users.append(JitUser(name, installed[name].version, ("nvcc", "headers", "cxx", "ninja"), FLASHINFER_HEADERS,
                                 "warn" if cached else "fail",
                                 "flashinfer-jit-cache holds prebuilt kernels" if cached else "no flashinfer-jit-cache"))
            break
    deep_gemm = installed.get("deep-gemm") or installed.get("deep_gemm")
    if deep_gemm or toolchain.get("deep_gemm"):
        nvrtc = node_env.get("DG_JIT_USE_NVRTC") == "1"
        needs = ("headers", "cxx") if nvrtc else ("nvcc", "headers", "cxx")
        users.append(JitUser("deep_gemm", deep_gemm.version if deep_gemm else f"bundled at {toolchain['deep_gemm']}",
                             needs, DEEP_GEMM_HEADERS, note="DG_JIT_USE_NVRTC=1" if nvrtc else ""))
    if "deepspeed" in installed:
        users.append(JitUser("deepspeed", installed["deepspeed"].version, ("nvcc", "headers", "cxx", "ninja", "python_h"),
                             ("cuda_runtime.h",), "warn", "ops not prebuilt are compiled on first use"))
    return users


def judge_toolchain(users: list[JitUser], toolchain: Mapping[str, Any], node: NodeFacts) -> list[Finding]:
    out = []
    for need, check in (("cc", _cc), ("cxx", _cxx), ("python_h", _python_h), ("nvcc", _nvcc), ("ninja", _ninja)):
        who = [u for u in users if need in u.needs]
        if not who:
            continue
        found = check(toolchain)
        if found is not None:
            level = "fail" if any(u.level == "fail" for u in who) else "warn"
            if found[0] == "warn":
                level = "warn"
            out.append(Finding(level, need, f"{_names(who)} {found[1]}", found[2]))
    out += _header_findings([u for u in users if "headers" in u.needs], toolchain)
    out += _version_findings([u for u in users if "nvcc" in u.needs], toolchain, node)
    return out


def _names(users: list[JitUser]) -> str:
    parts = [f"{u.name} {u.version}" + (f" ({u.note})" if u.note else "") for u in users]
    return " and ".join(parts) + (" compiles" if len(users) == 1 else " compile") + " at run time:"


def _cc(t: Mapping[str, Any]) -> tuple[str, str, str] | None:
    if t.get("cc_env") or (t.get("compilers") or {}).get("cc"):
        return None
    return ("fail", "no C compiler (cc, gcc, clang on PATH, or $CC)", "install one (apt-get install gcc) or set CC")


def _cxx(t: Mapping[str, Any]) -> tuple[str, str, str] | None:
    if t.get("cxx_env") or (t.get("compilers") or {}).get("c++"):
        return None
    return ("fail", "no C++ compiler for nvcc's host code (c++, g++, clang++ on PATH, or $CXX)",
            "install one (apt-get install g++) or set CXX")


def _python_h(t: Mapping[str, Any]) -> tuple[str, str, str] | None:
    header = t.get("python_h") or {}
    if header.get("path"):
        return None
    version = header.get("version") or "3"
    looked = ", ".join(header.get("looked_in") or []) or "nowhere"
    return ("fail", f"no Python.h for Python {version} (looked in {looked})",
            f"install the interpreter's headers (apt-get install python{version}-dev, or the same Python built "
            "with its include folder)")


def _nvcc(t: Mapping[str, Any]) -> tuple[str, str, str] | None:
    if t.get("nvcc"):
        return None
    home, source = t.get("cuda_home"), t.get("cuda_home_source")
    where = f"CUDA_HOME is {home} ({source}) and has no bin/nvcc" if home else \
        "CUDA_HOME and CUDA_PATH are unset, no nvcc is on PATH and there is no /usr/local/cuda"
    extra = f"; the nvidia-cuda-nvcc wheel's {t['pip_nvcc']} is not where CUDA_HOME points" if t.get("pip_nvcc") else ""
    return ("fail", f"no nvcc: {where}{extra}",
            "install the CUDA toolkit of torch's CUDA release and set CUDA_HOME to it (e.g. /usr/local/cuda-12.8), "
            "or install the prebuilt kernels (flashinfer-jit-cache for torch's CUDA)")


def _ninja(t: Mapping[str, Any]) -> tuple[str, str, str] | None:
    if t.get("ninja"):
        return None
    if t.get("venv_ninja"):
        return ("warn", f"ninja is only at {t['venv_ninja']}, not on PATH: torch's extension builder runs `ninja` "
                "from PATH, which lacks the venv's bin unless the job activates it",
                "activate the venv in the stage's command, or put its bin folder on PATH")
    return ("fail", "no ninja on PATH", "install it (apt-get install ninja-build, or pip install ninja into the venv "
            "and activate it)")


def _header_findings(users: list[JitUser], t: Mapping[str, Any]) -> list[Finding]:
    if not users or not t.get("cuda_home"):
        return []
    present = t.get("headers") or {}
    missing = sorted({h for u in users for h in u.headers if not present.get(h)})
    if not missing:
        return []
    level = "fail" if any(u.level == "fail" for u in users) else "warn"
    return [Finding(level, "headers", f"{_names(users)} CUDA_HOME={t['cuda_home']} ({t.get('cuda_home_source')}) "
                    f"lacks {', '.join(missing)}", "point CUDA_HOME at a full CUDA toolkit (its include folder holds "
                    "cuda_fp8.h from CUDA 11.8 on), or install the toolkit's development headers")]


def release_of(t: Mapping[str, Any]) -> str | None:
    version = t.get("nvcc_version")
    if version:
        return ".".join(str(version).split(".")[:2])
    return nvcc_release(t.get("nvcc_version_output"))


def _version_findings(users: list[JitUser], t: Mapping[str, Any], node: NodeFacts) -> list[Finding]:
    release = release_of(t)
    if not users or not t.get("nvcc") or not release:
        return []
    have = tuple(int(p) for p in release.split("."))
    out = []
    torch_cuda = ((t.get("torch") or {}).get("cuda")) or None
    if torch_cuda:
        want = tuple(int(p) for p in torch_cuda.split(".")[:2])
        if have[0] != want[0]:
            out.append(Finding("fail", "nvcc", f"{_names(users)} nvcc is CUDA {release} but torch was built with CUDA "
                               f"{torch_cuda}: torch's extension builder refuses another major release",
                               f"set CUDA_HOME to a CUDA {torch_cuda} toolkit"))
        elif have < want:
            out.append(Finding("warn", "nvcc", f"{_names(users)} nvcc is CUDA {release}, older than torch's {torch_cuda}",
                               f"set CUDA_HOME to a CUDA {torch_cuda} toolkit"))
    for arch in sorted({(g.architecture or "").lower() for g in node.gpus} & set(ARCH_MIN_CUDA)):
        floor = ARCH_MIN_CUDA[arch]
        if have < floor:
            out.append(Finding("fail", "nvcc", f"{_names(users)} nvcc is CUDA {release}, which cannot compile for "
                               f"{arch.title()} GPUs (CUDA {floor[0]}.{floor[1]} or newer)",
                               f"set CUDA_HOME to a CUDA {floor[0]}.{floor[1]}+ toolkit"))
    return out
