"""gpu.health: will CUDA initialise, and are the GPUs fit to run? Pure.

The device nodes CUDA opens (``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/nvidia<minor>``:
without uvm, ``cuInit`` fails although nvidia-smi works), GPUs nvidia-smi lost, fields in
error (``ERR!``, ``Unknown Error``), volatile uncorrectable ECC errors, pending page
retirement and row remapping, a reset or recovery action the driver asks for, MIG mode
against what the job expects (whole GPUs, unless it names MIG devices), persistence mode,
the NVSwitch fabric's state (a GPU the fabric manager has not registered fails CUDA with
error 802, "system not yet initialized"), and Xid events in the kernel log.

A GPU the job will see fails the check; a hidden one only warns.
"""

from __future__ import annotations

from collections.abc import Sequence

from envdoctor.gpu.node import NodeFacts
from envdoctor.gpu.smi_xml import GpuState
from envdoctor.gpu.verdicts import Finding

#: Xid codes that point at the hardware or the driver rather than the application (NVIDIA's
#: Xid catalog): double-bit ECC, page retirement and row remapping, NVLink, fallen off
#: the bus, GSP, uncontained ECC, micro-controller halts.
HARDWARE_XIDS = {48: "double-bit ECC error", 61: "internal micro-controller breakpoint",
                 62: "internal micro-controller halt", 63: "ECC page retirement or row remapping event",
                 64: "ECC page retirement or row remapper recording failure", 74: "NVLink error",
                 79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate",
                 94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error",
                 140: "unrecovered ECC error"}
RESET = "drain the node and reset the GPU (as root, with no process on it: nvidia-smi -r -i {i}) or reboot"
FABRIC = ("start the fabric manager as root (systemctl enable --now nvidia-fabricmanager; its version must equal the "
          "driver's), then check `nvidia-smi -q | grep -A2 Fabric`")


def judge_health(node: NodeFacts, visible: Sequence[int], expected: int | None,
                 mig_named: bool) -> list[Finding]:
    out: list[Finding] = []
    out += smi_findings(node, expected)
    out += device_findings(node, visible)
    for gpu in node.gpus:
        level = "fail" if gpu.index in visible else "warn"
        hidden = "" if gpu.index in visible else " (not visible to the job)"
        out += [Finding(f.level if level == "fail" else "warn", f.part, f.message + hidden, f.remedy)
                for f in gpu_findings(gpu, mig_named)]
    off = [g.index for g in node.gpus if (g.persistence or "").lower() == "disabled"]
    if off:
        out.append(Finding("warn", "persistence", f"persistence mode is off on GPU {_list(off)}: the driver "
                           "tears the GPU state down between jobs (slow first CUDA call; settings reset)",
                           "as root: nvidia-smi -pm 1, or run nvidia-persistenced"))
    out += fabric_manager_findings(node)
    out += xid_findings(node)
    return out


def _list(indices: Sequence[int]) -> str:
    return ", ".join(str(i) for i in indices)


def smi_findings(node: NodeFacts, expected: int | None) -> list[Finding]:
    out = [Finding("fail", "lost", f"nvidia-smi cannot open the GPU at {bus}: {reason}",
                   "reboot the host (a lost GPU comes back only after a reset); if it recurs, have the GPU, its "
                   "slot or riser serviced (look for Xid 79 in the kernel log)") for bus, reason in node.lost]
    if node.log is None and node.log_error:
        level = "fail" if expected or node.devices else "warn"
        out.append(Finding(level, "smi", f"nvidia-smi -q -x failed: {node.log_error}",
                           "check the NVIDIA driver (a reboot after a driver upgrade often fixes a version mismatch)"))
    return out


def device_findings(node: NodeFacts, visible: Sequence[int]) -> list[Finding]:
    if not (node.gpus or node.devices or node.driver.get("nvidia_loaded")):
        return []
    out = []
    needed = ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    needed += [f"/dev/nvidia{g.minor}" for g in node.gpus if g.index in visible and g.minor is not None]
    missing = [p for p in needed if p not in node.devices]
    if "/dev/nvidia-uvm" in missing:
        loaded = node.driver.get("uvm_loaded")
        how = ("the nvidia_uvm module is loaded but its device node was never made" if loaded else
               "the nvidia_uvm kernel module is not loaded")
        out.append(Finding("fail", "devices", f"/dev/nvidia-uvm is missing ({how}): CUDA cannot initialise "
                           "(cuInit fails) although nvidia-smi works",
                           "as root: nvidia-modprobe -u -c=0 (loads nvidia_uvm and creates /dev/nvidia-uvm); "
                           "in a container, pass the device (--device /dev/nvidia-uvm, or the NVIDIA container runtime)"))
        missing.remove("/dev/nvidia-uvm")
    if missing:
        out.append(Finding("fail", "devices", f"missing device node(s) {', '.join(missing)}: CUDA cannot open "
                           "these GPUs", "as root: nvidia-modprobe -c=<minor> for each; in a container, pass the "
                           "devices (or use the NVIDIA container runtime)"))
    denied = sorted(p for p, info in node.devices.items() if p in needed and info.get("access") is False)
    if denied:
        out.append(Finding("fail", "devices", f"this user may not open {', '.join(denied)} (permission denied)",
                           "add the user to the group that owns the device nodes (often `video`), or fix their mode"))
    return out


def gpu_findings(gpu: GpuState, mig_named: bool) -> list[Finding]:
    i, out = gpu.index, []
    name = f"GPU {i} ({gpu.name}, {gpu.bus_id})"
    if gpu.critical_errors:
        fields = ", ".join(f"{p}={v}" for p, v in gpu.critical_errors[:4])
        out.append(Finding("fail", "error", f"{name} reports errors instead of values ({fields}): the GPU is in an "
                           "error state", RESET.format(i=i)))
    elif gpu.errors:
        fields = ", ".join(f"{p}={v}" for p, v in gpu.errors[:4])
        out.append(Finding("warn", "error", f"{name} shows {fields} (often transient sensor readings)"))
    if gpu.volatile_uncorrectable:
        out.append(Finding("fail", "ecc", f"{name} has {gpu.volatile_uncorrectable} uncorrectable ECC error(s) since "
                           "the driver loaded: CUDA contexts on it fail or return corrupt data",
                           RESET.format(i=i) + "; if errors recur, the GPU needs service"))
    if gpu.retirement_pending:
        out.append(Finding("fail", "ecc", f"{name} has memory pages pending retirement", "reboot (or reset the GPU) "
                           "so that the pages are retired"))
    if gpu.remap_pending:
        out.append(Finding("fail", "ecc", f"{name} has a row remapping pending: the faulty memory rows stay in use "
                           "until the GPU is reset", RESET.format(i=i)))
    if gpu.remap_failure:
        out.append(Finding("fail", "ecc", f"{name} failed to remap a memory row (no spare rows left)",
                           "take the GPU out of service and have it replaced"))
    if gpu.reset_required or (gpu.recovery_action and gpu.recovery_action.lower() != "none"):
        action = gpu.recovery_action or "GPU reset required"
        out.append(Finding("fail", "reset", f"{name}: the driver asks for recovery ({action})", RESET.format(i=i)))
    elif gpu.drain_recommended:
        out.append(Finding("warn", "reset", f"{name}: the driver recommends draining and resetting it",
                           RESET.format(i=i)))
    if gpu.ecc_current and gpu.ecc_pending and gpu.ecc_current != gpu.ecc_pending:
        out.append(Finding("warn", "ecc", f"{name}: ECC mode changes from {gpu.ecc_current} to {gpu.ecc_pending} at "
                           "the next reboot", "reboot to apply it, or set it back (nvidia-smi -e)"))
    out += mig_findings(gpu, name, mig_named)
    out += fabric_findings(gpu, name)
    return out


def mig_findings(gpu: GpuState, name: str, mig_named: bool) -> list[Finding]:
    out = []
    if gpu.mig_enabled and not mig_named:
        out.append(Finding("fail", "mig", f"{name} is in MIG mode ({gpu.mig_devices} MIG device(s)): CUDA shows its "
                           "instances, not the whole GPU, and NCCL does not run across them",
                           f"as root, with no process on it: nvidia-smi -i {gpu.index} -mig 0 (or name MIG devices in "
                           "CUDA_VISIBLE_DEVICES if the job is meant for them)"))
    if gpu.mig_current and gpu.mig_pending and gpu.mig_current != gpu.mig_pending:
        out.append(Finding("warn", "mig", f"{name}: MIG mode changes from {gpu.mig_current} to {gpu.mig_pending} "
                           "after a GPU reset", f"reset the GPU (nvidia-smi -r -i {gpu.index}) to apply it"))
    return out


def fabric_findings(gpu: GpuState, name: str) -> list[Finding]:
    state, status = (gpu.fabric_state or "").lower(), gpu.fabric_status
    if state in ("not started", "in progress"):
        return [Finding("fail", "fabric", f"{name}: NVSwitch fabric registration is {gpu.fabric_state!r}: CUDA fails "
                        "with error 802 (system not yet initialized) until the fabric manager completes it", FABRIC)]
    if state == "completed" and status and status.lower() != "success":
        return [Finding("fail", "fabric", f"{name}: NVSwitch fabric registration completed with {status!r}", FABRIC)]
    if (gpu.fabric_health or "").lower() == "unhealthy":
        return [Finding("warn", "fabric", f"{name}: the NVLink fabric reports its health as Unhealthy",
                        "check `nvidia-smi -q` (Fabric > Health) and the fabric manager's log")]
    return []


def fabric_manager_findings(node: NodeFacts) -> list[Finding]:
    """On an NVSwitch system whose GPUs report no fabric state (drivers before R550 do not),
    the fabric manager's process is what remains to look at."""
    if not node.driver.get("nvswitches") or node.raw.get("fabric_manager") is not False:
        return []
    if any(g.fabric_state for g in node.gpus):
        return []
    where = " (in a container: it runs on the host, where this probe cannot see it)" if node.raw.get("container") else ""
    return [Finding("warn", "fabric", f"this node has {node.driver['nvswitches']} NVSwitch(es) but no nv-fabricmanager "
                    f"process runs{where}: without it CUDA fails with error 802", FABRIC)]


def xid_findings(node: NodeFacts) -> list[Finding]:
    hardware: dict[tuple[int, str], int] = {}
    for xid in node.xids:
        if xid.code in HARDWARE_XIDS:
            hardware[(xid.code, xid.bus)] = hardware.get((xid.code, xid.bus), 0) + 1
    return [Finding("warn", "xid", f"kernel log: Xid {code} ({HARDWARE_XIDS[code]}) on {bus}, {n} time(s) since boot",
                    "see NVIDIA's Xid catalog for the action; a GPU that logged Xid 79, 48 or 95 usually needs a "
                    "reset or service") for (code, bus), n in sorted(hardware.items())]
