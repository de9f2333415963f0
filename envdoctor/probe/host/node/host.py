# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helper of the "node" section: what collective communication (NCCL, gloo) will meet on
# this host, read from files: /dev/shm's mount and free space, the process limits, the
# network interfaces and InfiniBand ports in /sys, the NCCL_* settings (environment,
# ~/.nccl.conf, /etc/nccl.conf), and libnccl files on LD_LIBRARY_PATH. Every file is read
# as a regular file within a small budget; anything unreadable is left out (unknown), never
# an error of the section. Paths go through `rooted` (the tests' stand-in root, see node.py).

import os
import re

from envdoctor.probe.host.gpu.host import read_small_limit, rooted

NODE_SMALL = 16384
MAX_NAMES = 256
#: Environment variables the checks read: which GPUs the job sees, how NCCL and gloo pick
#: their transports, and where the JIT toolchain is. Values are cut to MAX_VALUE.
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
             "CC", "CXX", "LD_LIBRARY_PATH", "VLLM_NCCL_SO_PATH", "DG_JIT_USE_NVRTC", "TORCH_CUDA_ARCH_LIST")
ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_")
MAX_VALUE = 1024
_LIBNCCL = re.compile(r"^libnccl\.so\.(\d+\.\d+\.\d+)$")


def node_read(path, limit=NODE_SMALL):
    try:
        return read_small_limit(path, limit)
    except (OSError, UnicodeError):
        return None


def node_environment():
    found = {}
    for name, value in sorted(os.environ.items()):
        if name in ENV_NAMES or name.startswith(ENV_PREFIXES):
            found[name] = value[:MAX_VALUE]
            if len(found) >= 128:
                break
    return found


def nccl_conf_files(root):
    """NCCL reads ~/.nccl.conf, then /etc/nccl.conf, for variables the environment lacks."""
    found = {}
    for path in (os.path.join(os.path.expanduser("~"), ".nccl.conf"), "/etc/nccl.conf"):
        text = node_read(rooted(root, path))
        if text is not None:
            found[path] = text
    return found


def node_listing(path):
    try:
        return sorted(os.listdir(path))[:MAX_NAMES]
    except OSError:
        return None


def interfaces(root):
    """Network interfaces (/sys/class/net) with their operstate; None when unreadable."""
    base = rooted(root, "/sys/class/net")
    names = node_listing(base)
    if names is None:
        return None
    found = {}
    for name in names:
        state = node_read(os.path.join(base, name, "operstate"), 64)
        found[name] = {"operstate": state.strip() if state else None}
    return found


def infiniband(root):
    """RDMA devices (/sys/class/infiniband) with each port's state and link layer."""
    base = rooted(root, "/sys/class/infiniband")
    names = node_listing(base)
    if names is None:
        return {}
    found = {}
    for hca in names:
        ports = {}
        for port in node_listing(os.path.join(base, hca, "ports")) or []:
            folder = os.path.join(base, hca, "ports", port)
            state = node_read(os.path.join(folder, "state"), 64)
            layer = node_read(os.path.join(folder, "link_layer"), 64)
            ports[port] = {"state": state.strip() if state else None, "link_layer": layer.strip() if layer else None}
        found[hca] = {"ports": ports}
    return found


def shm_facts(root):
    """/dev/shm: its mount line (size= is what a container's --shm-size set) and statvfs."""
    path = rooted(root, "/dev/shm")
    facts = {"path": "/dev/shm", "exists": os.path.isdir(path), "mount": None, "total": None, "free": None}
    mounts = node_read(rooted(root, "/proc/self/mounts"), 1 << 20) or ""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "/dev/shm":
            facts["mount"] = {"source": fields[0], "fstype": fields[2], "options": fields[3]}
    if facts["exists"]:
        try:
            st = os.statvfs(path)
            facts["total"] = st.f_blocks * st.f_frsize
            facts["free"] = st.f_bavail * st.f_frsize
        except OSError:
            pass
    return facts


def limits_text(root):
    """/proc/self/limits as the kernel prints it: what the job started from this login inherits."""
    return node_read(rooted(root, "/proc/self/limits"))


def libnccl_on_path():
    """libnccl.so.X.Y.Z files in the LD_LIBRARY_PATH folders: the loader may pick them before
    the NCCL wheel torch was built against."""
    found = []
    for folder in [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p.startswith("/")][:32]:
        for name in node_listing(folder) or []:
            match = _LIBNCCL.match(name)
            if match:
                found.append({"path": os.path.join(folder, name), "version": match.group(1)})
    return found


def container_hints(root):
    hints = [path for path in ("/.dockerenv", "/run/.containerenv") if os.path.exists(rooted(root, path))]
    if os.environ.get("container"):
        hints.append("container=" + os.environ["container"][:64])
    return hints


def collective_facts(root):
    return {"shm": shm_facts(root), "limits": limits_text(root), "net": interfaces(root),
            "infiniband": infiniband(root), "nccl_conf": nccl_conf_files(root), "libnccl": libnccl_on_path(),
            "container": container_hints(root)}
