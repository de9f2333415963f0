# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "system": what a bug report and a multi-node job need to know of the machine
# beyond its Python environments: the OS, kernel, C library, CPU, memory, limits, the CUDA
# toolkit's version file, the job-relevant environment variables (secrets masked here, on
# the host: a secret's value never leaves it, only a fingerprint that tells two apart) and,
# when asked, `nvidia-smi topo -m` as text. Everything is read from files, except the
# topology, which only nvidia-smi knows; nvcc's version is the string `nvcc --version`
# prints, read from the binary, never run.

import hashlib
import os
import platform
import re
import sys

from envdoctor.probe.host.core import open_regular, regular_chunks, run_command, section

#: Most bytes read of one small system file (/proc/cpuinfo of a 256-CPU host is ~300 KB).
SMALL_FILE_LIMIT = 4 << 20
TOPOLOGY_LIMIT = 64 * 1024
MAX_ENV_VALUE = 4096
#: Variables the probe's own wrapper sets: never part of what the host has.
OWN_PREFIX = "ENVDOCTOR_"


def read_limited(path, limit=SMALL_FILE_LIMIT):
    """The text of a regular file, at most `limit` bytes (the one place this module reads a
    file: a FIFO or device in its place is refused, never waited on)."""
    with open_regular(path) as handle:
        return handle.read(limit).decode("utf-8", "replace")


def os_release():
    """PRETTY_NAME, ID and VERSION_ID of /etc/os-release (or /usr/lib/os-release)."""
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            text = read_limited(path, 65536)
        except (OSError, UnicodeError):
            continue
        found = {"source": path}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and key in ("PRETTY_NAME", "ID", "VERSION_ID", "NAME"):
                found[key.lower()] = value.strip().strip("\"'")
        return found
    return {"error": "no /etc/os-release"}


def libc():
    """The C library as glibc names itself (confstr), else what platform finds in the binary."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        text = None
    if text:
        name, _, version = text.partition(" ")
        return {"name": name, "version": version}
    name, version = platform.libc_ver()
    return {"name": name or None, "version": version or None}


def cpu_facts():
    facts = {"logical": os.cpu_count()}
    try:
        facts["usable"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        facts["usable"] = facts["logical"]
    try:
        text = read_limited("/proc/cpuinfo")
    except (OSError, UnicodeError) as exc:
        facts["error"] = "/proc/cpuinfo: %s" % exc
        text = ""
    sockets, flags = set(), ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep:
            continue
        if key in ("model name", "Model", "cpu model") and "model" not in facts:
            facts["model"] = value
        elif key == "vendor_id" and "vendor" not in facts:
            facts["vendor"] = value
        elif key == "physical id":
            sockets.add(value)
        elif key in ("flags", "Features") and not flags:
            flags = value
    facts["sockets"] = len(sockets) or None
    facts["hypervisor"] = "hypervisor" in flags.split()
    try:
        facts["numa_nodes"] = len([n for n in os.listdir("/sys/devices/system/node") if re.match(r"node\d+$", n)])
    except OSError:
        facts["numa_nodes"] = None
    for key, path in (("vendor_of_machine", "/sys/class/dmi/id/sys_vendor"),
                      ("product", "/sys/class/dmi/id/product_name"), ("hypervisor_type", "/sys/hypervisor/type")):
        try:
            facts[key] = read_limited(path, 256).strip() or None
        except (OSError, UnicodeError):
            facts[key] = None
    return facts


def memory_facts():
    try:
        text = read_limited("/proc/meminfo", 65536)
    except (OSError, UnicodeError) as exc:
        return {"error": "/proc/meminfo: %s" % exc}
    found = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if key in ("MemTotal", "MemAvailable", "SwapTotal") and parts and parts[0].isdigit():
            found[key] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return {"total": found.get("MemTotal"), "available": found.get("MemAvailable"), "swap": found.get("SwapTotal")}


def limits():
    import resource

    found = {}
    for name in ("RLIMIT_NOFILE", "RLIMIT_MEMLOCK", "RLIMIT_NPROC", "RLIMIT_STACK"):
        which = getattr(resource, name, None)
        if which is None:
            continue
        soft, hard = resource.getrlimit(which)
        unlimited = resource.RLIM_INFINITY
        found[name[7:].lower()] = [None if soft == unlimited else soft, None if hard == unlimited else hard]
    return found


_CUDA_TXT = re.compile(r"CUDA Version\s+(\d+(?:\.\d+)+)")
#: What `nvcc --version` prints, held as a string in the nvcc binary itself.
_NVCC_RELEASE = re.compile(br"Cuda compilation tools, release [0-9.]+, V(\d+(?:\.\d+)+)")
#: Most bytes of an nvcc binary searched for its version (CUDA 13's is ~30 MB, its string at ~24 MB).
NVCC_LIMIT = 256 << 20
#: A wrapper script in nvcc's place (`exec /usr/local/cuda-13.0/bin/nvcc "$@"`) is this small at most.
WRAPPER_LIMIT = 8192
_EXEC_TARGET = re.compile(r"(?:^|[;&|\s])exec\s+[\"']?(/[^\s\"';&|]*/nvcc)[\"']?(?=\s|$)", re.M)


_NVCC_SEEN = {}


def nvcc_release(path):
    """(version, source) of the nvcc binary at `path`, from the string `nvcc --version` prints
    (read in chunks, never run); (None, why) when it has none. Each binary is read once a run."""
    real = os.path.realpath(path)
    if real not in _NVCC_SEEN:
        _NVCC_SEEN[real] = _nvcc_release_read(path)
    version, why = _NVCC_SEEN[real]
    return (version, path) if version else (None, why)


def _nvcc_release_read(path):
    tail, offset = b"", 0
    try:
        for chunk in regular_chunks(path, NVCC_LIMIT, head=True, note=False):
            data = tail + chunk
            found = _NVCC_RELEASE.search(data)
            if found:
                return found.group(1).decode("ascii"), path
            tail, offset = data[-200:], offset + len(chunk)
    except OSError as exc:
        return None, "%s: %s" % (path, exc.strerror or exc)
    return None, "%s: no version string in its first %d bytes" % (path, min(offset, NVCC_LIMIT))


def nvcc_target(path, hops=4):
    """The nvcc binary that `path` runs: itself, or what a small wrapper script in its place
    execs (`/usr/local/bin/nvcc` holding `exec /usr/local/cuda-13.0/bin/nvcc "$@"`), followed
    `hops` times at most."""
    for _ in range(hops):
        try:
            head = read_limited(path, WRAPPER_LIMIT + 1)
        except (OSError, UnicodeError):
            return path
        if not head.startswith("#!") or len(head) > WRAPPER_LIMIT:
            return path
        found = _EXEC_TARGET.search(head)
        if not found or os.path.realpath(found.group(1)) == os.path.realpath(path):
            return path
        path = found.group(1)
    return path


def cuda_toolkit_version(home):
    """(version, source) of the CUDA toolkit at `home`: its version.json (CUDA 11.1+), its
    version.txt, else the string its bin/nvcc prints for `nvcc --version` (a toolkit made of
    NVIDIA's wheels, `nvidia-cuda-nvcc` and `cuda-toolkit`, has neither file)."""
    import json

    try:
        data = json.loads(read_limited(os.path.join(home, "version.json"), 1 << 20))
        version = str((data.get("cuda") or {}).get("version") or "") or None
        if version:
            return version, os.path.join(home, "version.json")
    except (OSError, ValueError, AttributeError):
        pass
    try:
        found = _CUDA_TXT.search(read_limited(os.path.join(home, "version.txt"), 4096))
    except (OSError, UnicodeError):
        found = None
    if found:
        return found.group(1), os.path.join(home, "version.txt")
    nvcc = os.path.join(home, "bin", "nvcc")
    if os.path.isfile(nvcc):
        version, source = nvcc_release(nvcc_target(nvcc))
        if version:
            return version, source
    return None, None


def cuda_toolkit():
    """The CUDA toolkit torch's extension builder would pick (CUDA_HOME, CUDA_PATH, else
    /usr/local/cuda) and its version; and `nvcc_on_path`: the nvcc that `nvcc --version` runs
    (what collect_env reports as "CUDA runtime version"), through a wrapper script to the
    binary, with the version it prints (else its toolkit's version file's)."""
    import shutil

    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    facts = {"home": home, "exists": os.path.isdir(home), "version": None, "source": None}
    if facts["exists"]:
        facts["version"], facts["source"] = cuda_toolkit_version(home)
        facts["nvcc"] = os.path.isfile(os.path.join(home, "bin", "nvcc"))
    on_path = shutil.which("nvcc")
    if on_path:
        # What the binary itself prints first (`V12.8.93`, where version.json may say 12.8.1).
        binary = nvcc_target(on_path)
        version, source = nvcc_release(binary)
        if version is None:
            version, source = cuda_toolkit_version(os.path.dirname(os.path.dirname(os.path.realpath(binary))))
        facts["nvcc_on_path"] = {"path": on_path, "binary": binary, "version": version, "source": source}
    else:
        facts["nvcc_on_path"] = None
    return facts


def fingerprint(name, value):
    """12 hex digits that tell two secrets apart without showing either (domain-separated
    from a bare hash; a guessable secret stays guessable from it)."""
    data = ("envdoctor-env\0%s\0%s" % (name, value)).encode("utf-8", "surrogateescape")
    return hashlib.sha256(data).hexdigest()[:12]


def job_environment(args):
    """The variables named by the request's prefixes and names, with secrets masked: a
    secret name (logsafe's SECRET_NAME, sent in the request) hides the whole value; a
    secret inside a value (a token, a URL's password: SECRET_VALUE) hides that part. A
    masked value carries a fingerprint, so nodes with different secrets still differ."""
    prefixes = tuple(args.get("prefixes") or ())
    names = set(args.get("names") or ())
    secret_name = re.compile(args["secret_name"]) if args.get("secret_name") else None
    secret_value = re.compile(args["secret_value"]) if args.get("secret_value") else None
    found, masked = {}, []
    for name in sorted(os.environ):
        if name.startswith(OWN_PREFIX) or not (name in names or name.startswith(prefixes)):
            continue
        value = os.environ[name]
        shown = value[:MAX_ENV_VALUE]
        if secret_name is not None and secret_name.search(name):
            shown = "***"
        elif secret_value is not None:
            shown = secret_value.sub("***", shown)
        if shown != value[:MAX_ENV_VALUE]:
            shown = "%s (fingerprint %s)" % (shown, fingerprint(name, value))
            masked.append(name)
        found[name] = shown
    return {"vars": found, "masked": masked}


def topology():
    import shutil

    smi = shutil.which("nvidia-smi")
    if not smi:
        return {"text": None, "error": "nvidia-smi is not on PATH"}
    status, out, err = run_command([smi, "topo", "-m"], timeout=20)
    if status != 0:
        return {"text": None, "error": (err.strip() or out.strip())[:500] or "exit status %d" % status}
    return {"text": out.rstrip()[:TOPOLOGY_LIMIT], "error": None}


@section("system")
def system_section(args, emit):
    uname = os.uname()
    result = {
        "os": os_release(),
        "machine": uname.machine,
        "kernel": uname.release,
        "kernel_build": uname.version,
        "libc": libc(),
        "python": {"version": sys.version.replace("\n", " "), "executable": sys.executable,
                   "implementation": platform.python_implementation(),
                   "full_version": platform.python_version(), "bits": sys.maxsize.bit_length() + 1,
                   "platform": platform.platform()},
        "cpu": cpu_facts(),
        "memory": memory_facts(),
        "limits": limits(),
        "cuda_toolkit": cuda_toolkit(),
        "environment": job_environment(args),
    }
    if args.get("topology"):
        result["topology"] = topology()
    return result
