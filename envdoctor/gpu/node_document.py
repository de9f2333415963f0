"""The node's facts as JSON: the GPU part (merged into the ``gpu`` object of ``facts`` and of
the checks' details) and the host part (``node`` in ``facts``: /dev/shm, limits, network,
NCCL settings, the JIT toolchain)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envdoctor.gpu.collective_rules import shm_mount_size, nccl_setting
from envdoctor.gpu.job import job_asks
from envdoctor.gpu.node import NodeFacts, node_facts
from envdoctor.gpu.smi_text import link_kind, parse_limits
from envdoctor.gpu.smi_xml import GpuState
from envdoctor.gpu.toolchain_rules import release_of
from envdoctor.gpu.visible import Visible, visible_gpus

NCCL_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE",
                  "NCCL_SHM_DISABLE", "NCCL_NET", "NCCL_DEBUG")


def gpu_state_json(gpu: GpuState, visible: Sequence[int]) -> dict[str, Any]:
    return {
        "index": gpu.index, "name": gpu.name, "bus_id": gpu.bus_id, "uuid": gpu.uuid, "architecture": gpu.architecture,
        "minor": gpu.minor, "visible": gpu.index in visible,
        "memory_mib": {"total": gpu.total_mib, "reserved": gpu.reserved_mib, "used": gpu.used_mib, "free": gpu.free_mib},
        "persistence_mode": gpu.persistence,
        "mig": {"current": gpu.mig_current, "pending": gpu.mig_pending, "devices": gpu.mig_devices},
        "ecc": {"mode": gpu.ecc_current, "pending_mode": gpu.ecc_pending,
                "volatile_uncorrectable": gpu.volatile_uncorrectable,
                "aggregate_uncorrectable": gpu.aggregate_uncorrectable},
        "retirement_pending": gpu.retirement_pending,
        "row_remap": {"pending": gpu.remap_pending, "failure": gpu.remap_failure},
        "reset_required": gpu.reset_required, "recovery_action": gpu.recovery_action,
        "fabric": {"state": gpu.fabric_state, "status": gpu.fabric_status, "health": gpu.fabric_health},
        "errors": [{"field": f, "value": v} for f, v in gpu.errors],
    }


def visible_json(visible: Visible) -> dict[str, Any]:
    return {"indices": list(visible.indices), "CUDA_VISIBLE_DEVICES": visible.value, "set_in": visible.source or None,
            "CUDA_DEVICE_ORDER": visible.order, "stopped_at": list(visible.invalid), "mig_devices": list(visible.mig)}


def topology_json(node: NodeFacts) -> dict[str, Any]:
    topo = node.topology
    gpus = topo.gpus
    pairs = {f"{a}-{b}": topo.link(a, b) for a in gpus for b in gpus if a < b}
    kinds = {pair: link_kind(cell) for pair, cell in pairs.items()}
    return {"gpus": gpus, "links": pairs, "kinds": kinds,
            "nvlink_all_to_all": bool(kinds) and all(k == "nvlink" for k in kinds.values()),
            "cpu_affinity": topo.cpu_affinity, "numa_affinity": topo.numa_affinity, "nics": topo.nic_names,
            "error": node.topology_error}


def gpu_node_document(node: NodeFacts, visible: Visible) -> dict[str, Any]:
    """The node's GPU facts (keys beside gpu.stack's in the ``gpu`` object)."""
    log = node.log
    return {
        "driver_version": log.driver_version if log else None, "cuda_driver_version": log.cuda_version if log else None,
        "health": [gpu_state_json(g, visible.indices) for g in node.gpus],
        "health_error": node.log_error,
        "lost": [{"bus_id": bus, "reason": reason} for bus, reason in node.lost],
        "processes": [{"pid": h.pid, "gpu": h.gpu, "name": h.name, "used_mib": h.used_mib, "user": h.user,
                       "cmdline": h.cmdline, "in_pid_namespace": h.in_namespace} for h in node.holders],
        "visible": visible_json(visible),
        "topology": topology_json(node),
        "devices": dict(node.devices),
        "kernel_modules": dict(node.driver),
        "fabric_manager_running": node.raw.get("fabric_manager"),
        "xid": [{"bus": x.bus, "code": x.code, "detail": x.detail} for x in node.xids],
        "xid_error": node.xid_error,
        "node_root": node.raw.get("root"),
    }


def host_node_document(node: NodeFacts, stage_env: dict[str, str]) -> dict[str, Any]:
    """The node's host facts (``node`` in ``facts``)."""
    raw = node.raw
    shm = raw.get("shm") or {}
    limits = parse_limits(raw.get("limits"))
    toolchain = {k: v for k, v in (raw.get("toolchain") or {}).items() if k != "nvcc_version_output"}
    toolchain["nvcc_release"] = release_of(raw.get("toolchain") or {})
    return {
        "shm": {"exists": shm.get("exists"), "size": shm_mount_size((shm.get("mount") or {}).get("options"))
                or shm.get("total"), "free": shm.get("free"), "mount": shm.get("mount")},
        "limits": {"memlock": list(limits.get("Max locked memory", (None, None))),
                   "nofile": list(limits.get("Max open files", (None, None))), "unit_memlock": "bytes"},
        "interfaces": raw.get("net"), "infiniband": raw.get("infiniband"),
        "nccl": {"settings": {name: dict(zip(("value", "set_in"), nccl_setting(name, stage_env, node)))
                              for name in NCCL_VARIABLES if nccl_setting(name, stage_env, node)[0] is not None},
                 "libnccl_on_ld_library_path": raw.get("libnccl") or []},
        "container": raw.get("container") or [],
        "jit_toolchain": toolchain,
        "probe_seconds": raw.get("seconds"),
    }


def node_documents(section: Any, stage_commands: Sequence[str],
                   expected: int | None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(GPU part, host part) for ``facts`` from the probe's node section (Nones when the probe
    did not read it), seen as the host's first stage (or the default) would see them."""
    if not isinstance(section, dict):
        return None, None
    try:
        node = node_facts(section)
        ask = job_asks(stage_commands, expected)[0]
        visible = visible_gpus(node.gpus, ask.env, node.env)
        return gpu_node_document(node, visible), host_node_document(node, ask.env)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # a host's answer is untrusted input
        error = {"error": f"the probe's node facts are malformed ({type(exc).__name__})"}
        return error, error
