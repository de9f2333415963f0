# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helper of the "node" section: what a package that compiles at run time will find. Triton
# builds a small C launcher with the C compiler and this interpreter's Python.h; flashinfer,
# deep_gemm and torch extensions run nvcc from CUDA_HOME (found as torch's cpp_extension
# finds it: $CUDA_HOME, $CUDA_PATH, the folder above the `nvcc` on PATH, /usr/local/cuda)
# with the CUDA headers and ninja. Only files and PATH are looked at here; the one command,
# `nvcc --version`, is run with the section's others (node_run.py), and only when the
# toolkit has no version.json to read instead.

import json
import os
import shutil
import sys

from envdoctor.probe.host.core import pyvenv_setting, site_dirs, venv_prefix_of
from envdoctor.probe.host.gpu.host import read_small_limit, rooted, torch_facts

COMPILERS = {"cc": ("cc", "gcc", "clang"), "c++": ("c++", "g++", "clang++")}
#: Headers the CUDA JITs include (flashinfer: fp16/bf16/fp8 types; deep_gemm: cuda.h too).
CUDA_HEADERS = ("cuda_runtime.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cuda.h")


def which_all(names):
    found = {}
    for name in names:
        path = shutil.which(name)
        if path:
            found[name] = path
    return found


def cuda_home(root):
    """(folder, how it was found) as torch.utils.cpp_extension._find_cuda_home decides."""
    for name in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(name):
            return os.environ[name], "$" + name
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.dirname(os.path.dirname(nvcc)), "nvcc on PATH (%s)" % nvcc
    if os.path.isdir(rooted(root, "/usr/local/cuda")):
        return rooted(root, "/usr/local/cuda"), "/usr/local/cuda"
    return None, None


def cuda_headers(home):
    found = {}
    if not home:
        return found
    folders = [os.path.join(home, "include")]
    try:
        folders += [os.path.join(home, "targets", t, "include") for t in sorted(os.listdir(os.path.join(home, "targets")))]
    except OSError:
        pass
    for name in CUDA_HEADERS:
        found[name] = next((os.path.join(f, name) for f in folders if os.path.isfile(os.path.join(f, name))), None)
    return found


def toolkit_version(home):
    """version.json of the toolkit (CUDA >= 11.1 installers write it): its cuda_nvcc version."""
    try:
        data = json.loads(read_small_limit(os.path.join(home, "version.json"), 65536))
        return (data.get("cuda_nvcc") or data.get("cuda") or {}).get("version")
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def python_header(prefix):
    """Python.h for the job's interpreter: this interpreter's include folder when it is the
    environment's, else the base install the venv's pyvenv.cfg names (home = its bin)."""
    if not prefix or venv_prefix_of(sys.executable) == prefix:
        # sysconfig's "include" path, without importing sysconfig (10 ms): base prefix,
        # include, python<X.Y><abiflags> on every POSIX layout (Debian, pyenv, conda).
        version = "%d.%d" % sys.version_info[:2]
        include = os.path.join(getattr(sys, "base_prefix", sys.prefix), "include",
                               "python" + version + getattr(sys, "abiflags", ""))
    else:
        home = pyvenv_setting(prefix, "home") or ""
        full = pyvenv_setting(prefix, "version") or pyvenv_setting(prefix, "version_info") or ""
        version = ".".join(full.split(".")[:2])
        include = os.path.join(os.path.dirname(home.rstrip("/")), "include", "python" + version) if home else ""
    candidates = [c for c in (include, "/usr/include/python" + version, "/usr/local/include/python" + version) if c]
    path = next((os.path.join(c, "Python.h") for c in candidates if os.path.isfile(os.path.join(c, "Python.h"))), None)
    return {"version": version or None, "path": path, "looked_in": candidates}


def site_facts(prefix):
    """From the environment's site folders: torch's version.py, a deep_gemm package (sgl-kernel
    ships one), and nvcc from the nvidia-cuda-nvcc wheel."""
    facts = {"torch": None, "deep_gemm": None, "pip_nvcc": None}
    for site in site_dirs(prefix):
        if facts["torch"] is None and os.path.isfile(os.path.join(site, "torch", "version.py")):
            torch = torch_facts(site)
            facts["torch"] = {"version": torch.get("version"), "cuda": torch.get("cuda")}
        if facts["deep_gemm"] is None and os.path.isfile(os.path.join(site, "deep_gemm", "__init__.py")):
            facts["deep_gemm"] = os.path.join(site, "deep_gemm")
        nvcc = os.path.join(site, "nvidia", "cuda_nvcc", "bin", "nvcc")
        if facts["pip_nvcc"] is None and os.path.isfile(nvcc):
            facts["pip_nvcc"] = nvcc
    return facts


def toolchain_facts(root, prefix):
    """The facts, and the nvcc to ask for its version (None when version.json said it)."""
    home, source = cuda_home(root)
    nvcc = os.path.join(home, "bin", "nvcc") if home else None
    facts = {
        "compilers": dict((kind, which_all(names)) for kind, names in COMPILERS.items()),
        "cc_env": os.environ.get("CC"), "cxx_env": os.environ.get("CXX"),
        "cuda_home": home, "cuda_home_source": source,
        "nvcc": nvcc if nvcc and os.path.isfile(nvcc) else None, "nvcc_on_path": shutil.which("nvcc"),
        "nvcc_version": toolkit_version(home) if home else None, "nvcc_version_source": None,
        "headers": cuda_headers(home),
        "ninja": shutil.which("ninja"),
        "venv_ninja": None,
        "python_h": python_header(prefix),
    }
    if facts["nvcc_version"]:
        facts["nvcc_version_source"] = os.path.join(home, "version.json")
    if prefix and os.path.isfile(os.path.join(prefix, "bin", "ninja")):
        facts["venv_ninja"] = os.path.join(prefix, "bin", "ninja")
    facts.update(site_facts(prefix))
    ask = facts["nvcc"] if facts["nvcc"] and not facts["nvcc_version"] else None
    return facts, ask
