"""The text formats the node section sends back, read into values. Pure.

- ``nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory
  --format=csv,noheader,nounits``: one line per process, ``GPU-<uuid>, <pid>, <name>,
  <MiB>``; a value nvidia-smi cannot read is ``[N/A]`` or ``[Insufficient Permissions]``.
- ``nvidia-smi topo -m``: a matrix whose header names the devices (``GPU0``..., ``NIC0``...),
  then ``CPU Affinity``, ``NUMA Affinity`` and (newer drivers) ``GPU NUMA ID``; each row a
  device and its link to every other: ``X`` itself, ``NV<n>`` n bonded NVLinks, ``PIX``,
  ``PXB``, ``PHB``, ``NODE``, ``SYS`` (``SOC`` on old drivers) for PCIe paths of growing
  length; then the legend and "NIC Legend" (``NIC0: mlx5_0``).
- The kernel log's ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.``
- ``/proc/self/limits`` and ``nvcc --version`` ("Cuda compilation tools, release 12.8, V12.8.93").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from envdoctor.gpu.smi_xml import known

#: What a link class means for peer-to-peer traffic between two GPUs.
LINK_KINDS = {"X": "self", "PIX": "pcie-switch", "PXB": "pcie-switches", "PHB": "host-bridge", "NODE": "numa-node",
              "SYS": "cross-socket", "SOC": "cross-socket"}
_DEVICE_LABEL = re.compile(r"^(GPU|NIC|NVS)\d+$|^mlx\d+_\d+$")
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\):\s*(\d+)(?:,\s*(.*))?")
_NVCC = re.compile(r"release (\d+\.\d+)(?:, V(\d+\.\d+\.\d+))?")
_LIMIT = re.compile(r"^(Max [a-z ]+?)\s{2,}(\S+)\s+(\S+)")


@dataclass(frozen=True)
class ComputeApp:
    gpu_uuid: str
    pid: int
    name: str
    used_mib: int | None


def parse_compute_apps(text: str) -> list[ComputeApp]:
    """Lines of --query-compute-apps (noheader, nounits). A process name may hold commas:
    the first two fields and the last are fixed, the name is what lies between."""
    apps = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[1].isdigit() or not parts[0].startswith(("GPU-", "MIG-")):
            continue
        used = known(parts[-1])
        apps.append(ComputeApp(parts[0], int(parts[1]), ",".join(parts[2:-1]).strip(),
                               int(used) if used is not None and used.isdigit() else None))
    return apps


@dataclass(frozen=True)
class Topology:
    devices: tuple[str, ...] = ()
    #: (row device, column device) -> the cell as printed (``NV18``, ``SYS``, ...).
    links: dict[tuple[str, str], str] = field(default_factory=dict)
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> list[int]:
        return [int(d[3:]) for d in self.devices if d.startswith("GPU")]

    def link(self, a: int, b: int) -> str | None:
        return self.links.get((f"GPU{a}", f"GPU{b}"))


def parse_topology(text: str) -> Topology:
    """The matrix of ``nvidia-smi topo -m``; empty when the text holds none."""
    lines = text.splitlines()
    header_at = next((i for i, line in enumerate(lines) if re.match(r"^\s+GPU0\b", line)), None)
    if header_at is None:
        return Topology()
    devices = tuple(word for word in lines[header_at].split() if _DEVICE_LABEL.match(word))
    links: dict[tuple[str, str], str] = {}
    cpu, numa, nics = {}, {}, {}
    for line in lines[header_at + 1:]:
        words = line.split()
        if not words or words[0] not in devices:
            if line.strip().startswith("Legend"):
                break
            continue
        cells = words[1:1 + len(devices)]
        links.update(((words[0], other), cell) for other, cell in zip(devices, cells))
        rest = words[1 + len(devices):]
        if words[0].startswith("GPU") and rest:
            cpu[words[0]] = rest[0]
            if len(rest) > 1:
                numa[words[0]] = rest[1]
    for line in lines:
        match = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line)
        if match:
            nics[match.group(1)] = match.group(2)
    return Topology(devices, links, cpu, numa, nics)


def link_kind(cell: str | None) -> str:
    if not cell:
        return "unknown"
    if re.fullmatch(r"NV\d+", cell):
        return "nvlink"
    return LINK_KINDS.get(cell, "unknown")


@dataclass(frozen=True)
class Xid:
    bus: str
    code: int
    detail: str


def parse_xids(lines: list[str]) -> list[Xid]:
    found = []
    for line in lines:
        match = _XID.search(line)
        if match:
            found.append(Xid(match.group(1).lower(), int(match.group(2)), (match.group(3) or "").strip()[:300]))
    return found


def parse_limits(text: str | None) -> dict[str, tuple[int | None, int | None]]:
    """``{"Max locked memory": (soft, hard)}`` in the file's units; None is unlimited."""
    limits: dict[str, tuple[int | None, int | None]] = {}
    for line in (text or "").splitlines():
        match = _LIMIT.match(line)
        if match:
            soft, hard = (None if v == "unlimited" else int(v) if v.isdigit() else None
                          for v in (match.group(2), match.group(3)))
            limits[match.group(1)] = (soft, hard)
    return limits


def nvcc_release(text: str | None) -> str | None:
    """The CUDA release nvcc --version names ("12.8"), or None."""
    match = _NVCC.search(text or "")
    return match.group(1) if match else None
