# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "gpu-stack" section (sent before gpu_stack.py): the NVIDIA driver's
# version from its files, the GPUs from nvidia-smi, and torch/version.py read as text.
#
# ENVDOCTOR_SYSFS_ROOT (in the probe's environment) names a folder that stands in for "/"
# when the driver's files are read (sys/module/nvidia/version, proc/driver/nvidia/version,
# the loader folders holding libcuda.so.<ver>, /usr/local/cuda-X.Y/compat), so that a test
# can play a host with a driver; a folder laid out as /sys itself (module/nvidia/version)
# works too. It changes only where a few small text files and file names are read; the
# facts name the path they came from, so a faked root is visible in every report.

import os
import re

from envdoctor.probe.host.core import read_regular, run_command
from envdoctor.probe.host.gpu.elf import TORCH_LIBS

MAX_TEXT = 65536
_VERSION_TEXT = re.compile(r"(\d+\.\d+(?:\.\d+)?)")
_LIBCUDA = re.compile(r"^libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$")


def host_root():
    root = os.environ.get("ENVDOCTOR_SYSFS_ROOT") or ""
    return os.path.abspath(root) if root else ""


def rooted(root, path):
    return os.path.join(root, path.lstrip("/")) if root else path


def read_small(path):
    return read_small_limit(path, MAX_TEXT)


def read_small_limit(path, limit):
    """The first `limit` bytes of a text file (sysfs and procfs files say their size is 0)."""
    return read_regular(path, limit, head=True).decode("utf-8", "replace")


def driver_facts(root):
    """The kernel module's version (sysfs, then procfs), user-space libcuda.so.<ver> names
    and the cuda-compat folders, each with where it was read."""
    facts = {"root": root or None, "kernel": None, "libcuda": [], "compat": [], "errors": []}
    candidates = [("sys/module/nvidia/version", "sys")]
    if root and os.path.isfile(os.path.join(root, "module", "nvidia", "version")):
        candidates.insert(0, ("module/nvidia/version", "sys"))
    candidates.append(("proc/driver/nvidia/version", "proc"))
    for relative, kind in candidates:
        path = rooted(root, "/" + relative)
        try:
            text = read_small(path)
        except (OSError, UnicodeError) as exc:
            if getattr(exc, "errno", None) not in (2, 20):
                facts["errors"].append("%s: %s" % (path, exc))
            continue
        line = text.strip().splitlines()[0] if text.strip() else ""
        if kind == "proc":  # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed ..."
            found = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", text)
            version = found.group(1) if found else None
        else:
            found = _VERSION_TEXT.match(line.strip())
            version = found.group(1) if found else None
        if version:
            facts["kernel"] = {"version": version, "source": path}
            break
        facts["errors"].append("%s: no version in %r" % (path, line[:80]))
    facts["gpus"] = proc_gpus(root)
    facts["libcuda"] = libcuda_files(root)
    facts["compat"] = compat_folders(root)
    return facts


def proc_gpus(root):
    """GPU model names the kernel module lists (/proc/driver/nvidia/gpus/*/information):
    what is known of the GPUs when nvidia-smi is not on PATH (a slim container)."""
    import glob

    found = []
    for path in sorted(glob.glob(rooted(root, "/proc/driver/nvidia/gpus/*/information")))[:64]:
        try:
            text = read_small(path)
        except (OSError, UnicodeError):
            continue
        model = re.search(r"^Model:\s*(.+?)\s*$", text, re.M)
        if model:
            found.append({"name": model.group(1), "source": path})
    return found


def loader_folders(root):
    folders = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p.startswith("/")]
    folders += ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu",
                "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64", "/usr/lib/wsl/lib"]
    seen, result = set(), []
    for folder in folders:
        if folder not in seen:
            seen.add(folder)
            result.append(folder)
    return result


def libcuda_files(root):
    found = []
    for order, folder in enumerate(loader_folders(root)):
        path = rooted(root, folder)
        try:
            names = os.listdir(path)
        except OSError:
            continue
        for name in sorted(names):
            match = _LIBCUDA.match(name)
            if match and match.group(1).count(".") >= 1 and not name.endswith(".so.1"):
                found.append({"path": os.path.join(path, name), "version": match.group(1), "order": order,
                              "ld_library_path": folder in os.environ.get("LD_LIBRARY_PATH", "").split(":")})
    return found


def compat_folders(root):
    """/usr/local/cuda-X.Y/compat with its libcuda version, and whether the loader would pick
    it first (LD_LIBRARY_PATH before the system folders, or an ld.so.conf.d entry)."""
    import glob

    ld_path = [p.rstrip("/") for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    conf_text = ""
    for conf in sorted(glob.glob(rooted(root, "/etc/ld.so.conf.d/*.conf")))[:64]:
        try:
            conf_text += read_small(conf) + "\n"
        except (OSError, UnicodeError):
            pass
    found = []
    for folder in sorted(glob.glob(rooted(root, "/usr/local/cuda*/compat")))[:16]:
        host_folder = "/" + os.path.relpath(folder, root) if root else folder
        versions = []
        try:
            versions = sorted(m.group(1) for m in (_LIBCUDA.match(n) for n in os.listdir(folder)) if m)
        except OSError:
            pass
        found.append({"path": folder, "versions": versions,
                      "on_ld_library_path": host_folder.rstrip("/") in ld_path,
                      "in_ld_so_conf": host_folder.rstrip("/") in conf_text})
    return found


def smi_facts():
    import shutil

    smi = shutil.which("nvidia-smi")
    if not smi:
        return {"path": None, "gpus": []}
    fields = "name,compute_cap,driver_version"
    status, out, err = run_command([smi, "--query-gpu=" + fields, "--format=csv,noheader"], timeout=20)
    if status != 0 and "compute_cap" in (out + err):
        fields = "name,driver_version"  # drivers before R510 know no compute_cap field
        status, out, err = run_command([smi, "--query-gpu=" + fields, "--format=csv,noheader"], timeout=20)
    result = {"path": smi, "status": status, "fields": fields.split(","), "gpus": []}
    if status != 0:
        result["error"] = (err.strip() or out.strip())[:500]
        return result
    for line in out.splitlines()[:256]:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(result["fields"]) or not parts[0]:
            continue
        result["gpus"].append(dict(zip(result["fields"], parts)))
    return result


_PY_ASSIGN = re.compile(r"^(__version__|cuda|git_version|hip)\s*(?::[^=]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)",
                        re.M)


_PY_DEBUG = re.compile(r"^debug\s*(?::[^=]*)?=\s*(True|False)\b", re.M)


def torch_facts(site):
    """torch/version.py read as text (torch is never imported), and its libraries' paths."""
    folder = os.path.join(site, "torch")
    try:
        text = read_small(os.path.join(folder, "version.py"))
    except (OSError, UnicodeError) as exc:
        return {"error": "torch/version.py: %s" % exc, "site": site}
    values = {}
    for match in _PY_ASSIGN.finditer(text):
        values[match.group(1)] = match.group(2) if match.group(2) is not None else match.group(3)
    lib = os.path.join(folder, "lib")
    debug = _PY_DEBUG.search(text)
    return {"site": site, "version": values.get("__version__"), "cuda": values.get("cuda"),
            "hip": values.get("hip"), "git_version": values.get("git_version"), "lib": lib,
            "debug": debug.group(1) == "True" if debug else None,
            "libs": sorted(n for n in TORCH_LIBS if os.path.isfile(os.path.join(lib, n)))}
