# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "node": will a job start on this node? What nvidia-smi says of each GPU (`-q -x`:
# memory, ECC, row remapping, persistence, MIG, fabric state; `--query-compute-apps`: who
# holds memory; `topo -m`: how the GPUs reach each other), the NVIDIA device nodes, the
# kernel log's Xid lines (when this user may read it), who runs each GPU process (from
# /proc), and the collective-communication and JIT-toolchain facts of node_host.py and
# node_toolchain.py. Outputs are sent as nvidia-smi printed them (trimmed of the supported
# clocks tables, which are most of -q -x and of no use here): the controller parses them.
# An absent tool is a null, never a failure of the section.
#
# A test root: the controller may send `test_root` (a folder standing in for /) in the
# section's arguments. It does so only for the local machine and only when its own
# environment has ENVDOCTOR_TEST_ROOT, and the probe honours it only when its environment
# names the same folder. Over SSH the argument is never sent, so nothing a host's user
# controls (environment, files) can redirect what this section reads.

import os
import re
import shutil
import time

from envdoctor.probe.host.core import section
from envdoctor.probe.host.gpu.host import read_small_limit, rooted
from envdoctor.probe.host.node.host import collective_facts, node_environment, node_listing
from envdoctor.probe.host.node.run import run_all
from envdoctor.probe.host.node.toolchain import toolchain_facts

SMI_TIMEOUT = 20
OUTPUT_LIMIT = 4 << 20
MAX_PIDS = 256
MAX_XID_LINES = 64
APPS_FIELDS = "gpu_uuid,pid,process_name,used_memory"
_DEVICE = re.compile(r"^nvidia(\d+|ctl|-uvm|-uvm-tools|-modeset|-nvswitch\d+|-nvswitchctl)$")
_CLOCKS = re.compile(r"[ \t]*<supported_clocks>.*?</supported_clocks>\n?", re.S)
_PID_TAG = re.compile(r"<pid>\s*(\d+)\s*</pid>")
_FABRIC_STATE = re.compile(r"<fabric>\s*<state>(Completed|In Progress|Not Started)</state>")


def node_test_root(args):
    asked = args.get("test_root") or ""
    here = os.environ.get("ENVDOCTOR_TEST_ROOT") or ""
    if not asked or not here or os.path.abspath(asked) != os.path.abspath(here):
        return ""
    return os.path.abspath(asked)


def device_nodes(root):
    """The NVIDIA device nodes in /dev: kind and whether this user may open them read-write."""
    folder = rooted(root, "/dev")
    found = {}
    for name in node_listing(folder) or []:
        if not _DEVICE.match(name):
            continue
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        kind = "char" if (st.st_mode & 0o170000) == 0o020000 else "other"
        found["/dev/" + name] = {"kind": kind, "access": os.access(path, os.R_OK | os.W_OK)}
    return found


def driver_state(root):
    """Whether the kernel modules are loaded (uvm apart: it is what /dev/nvidia-uvm needs), and
    the NVSwitches the nvswitch driver lists."""
    return {
        "nvidia_loaded": os.path.exists(rooted(root, "/proc/driver/nvidia/version"))
        or os.path.isdir(rooted(root, "/sys/module/nvidia")),
        "uvm_loaded": os.path.isdir(rooted(root, "/sys/module/nvidia_uvm")),
        "nvswitches": len(node_listing(rooted(root, "/proc/driver/nvidia-nvswitch/devices")) or []),
    }


def fabric_manager_running(root):
    """Whether a process named nv-fabricmanager runs in this PID namespace (comm is cut to 15
    characters). Asked only on NVSwitch systems; None when /proc cannot be listed."""
    base = rooted(root, "/proc")
    try:
        names = os.listdir(base)
    except OSError:
        return None
    for name in names[:65536]:
        if name.isdigit():
            try:
                comm = read_small_limit(os.path.join(base, name, "comm"), 64).strip()
            except (OSError, UnicodeError):
                continue
            if comm.startswith("nv-fabricmanage"):
                return True
    return False


def fabric_reported(outputs):
    """Whether nvidia-smi states the fabric's registration itself (drivers from R550 on): then
    the walk over /proc for the fabric manager's process is not needed."""
    return bool(_FABRIC_STATE.search((outputs.get("xml") or {}).get("out") or ""))


def process_owner(root, pid, users):
    """User and command line of a GPU process from /proc; `exists` False when this PID
    namespace has no such process (nvidia-smi in a container names the host's PIDs)."""
    folder = rooted(root, "/proc/%d" % pid)
    info = {"exists": os.path.isdir(folder), "uid": None, "user": None, "cmdline": None}
    if not info["exists"]:
        return info
    try:
        status = read_small_limit(os.path.join(folder, "status"), 8192)
        match = re.search(r"^Uid:\s+(\d+)", status, re.M)
        if match:
            info["uid"] = int(match.group(1))
            info["user"] = user_name(root, info["uid"], users)
    except (OSError, UnicodeError):
        pass
    try:
        raw = read_small_limit(os.path.join(folder, "cmdline"), 4096)
        info["cmdline"] = " ".join(part for part in raw.split("\0") if part)[:400] or None
    except (OSError, UnicodeError):
        pass
    return info


def user_name(root, uid, users):
    if root:  # a test root names its users in its own etc/passwd
        if "table" not in users:
            text = read_small_limit(rooted(root, "/etc/passwd"), 1 << 20) if os.path.isfile(
                rooted(root, "/etc/passwd")) else ""
            rows = (line.split(":") for line in text.splitlines())
            users["table"] = dict((int(f[2]), f[0]) for f in rows if len(f) > 2 and f[2].isdigit())
        return users["table"].get(uid)
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def gpu_pids(outputs):
    pids = []
    apps = outputs.get("apps") or {}
    for line in (apps.get("out") or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[1].isdigit():
            pids.append(int(parts[1]))
    pids += [int(p) for p in _PID_TAG.findall((outputs.get("xml") or {}).get("out") or "")]
    return sorted(set(pids))[:MAX_PIDS]


def xid_lines(result):
    """The kernel log's NVRM Xid lines (the newest MAX_XID_LINES), or why it could not be read."""
    if result is None:
        return {"lines": [], "error": "no dmesg on PATH"}
    lines = [line.strip() for line in result["out"].splitlines() if "NVRM: Xid" in line]
    facts = {"lines": lines[-MAX_XID_LINES:], "error": None}
    if result["status"] != 0:
        facts["error"] = (result["err"].strip() or "dmesg exited with %d" % result["status"])[:300]
    return facts


@section("node")
def node_section(args, emit):
    started = time.time()
    root = node_test_root(args)
    prefix = os.path.abspath(os.path.expanduser(args["prefix"])) if args.get("prefix") else ""
    smi = shutil.which("nvidia-smi")
    toolchain, nvcc = toolchain_facts(root, prefix)
    commands = {}
    if smi:
        commands["xml"] = [smi, "-q", "-x"]
        commands["apps"] = [smi, "--query-compute-apps=" + APPS_FIELDS, "--format=csv,noheader,nounits"]
        commands["topo"] = [smi, "topo", "-m"]
    dmesg = shutil.which("dmesg") if args.get("kernel_log", True) else None
    if dmesg:
        commands["dmesg"] = [dmesg]
    if nvcc:
        commands["nvcc"] = [nvcc, "--version"]
    outputs = run_all(commands, args.get("timeout", SMI_TIMEOUT), OUTPUT_LIMIT, tail=("dmesg",))
    if "xml" in outputs:
        outputs["xml"]["out"] = _CLOCKS.sub("", outputs["xml"]["out"])
    if "nvcc" in outputs:
        toolchain["nvcc_version_output"] = (outputs["nvcc"]["out"] + outputs["nvcc"]["err"])[-2000:]
    drivers = driver_state(root)
    users = {}
    result = {
        "root": root or None,
        "nvidia_smi": smi,
        "smi": dict((k, outputs[k]) for k in ("xml", "apps", "topo") if k in outputs),
        "processes": dict((str(pid), process_owner(root, pid, users)) for pid in gpu_pids(outputs)),
        "devices": device_nodes(root),
        "driver": drivers,
        "fabric_manager": fabric_manager_running(root) if drivers["nvswitches"] and not fabric_reported(outputs)
        else None,
        "xid": xid_lines(outputs.get("dmesg")) if args.get("kernel_log", True) else None,
        "env": node_environment(),
        "toolchain": toolchain,
    }
    result.update(collective_facts(root))
    result["seconds"] = round(time.time() - started, 4)
    return result
