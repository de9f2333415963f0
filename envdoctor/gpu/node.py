"""What the probe's "node" section found, as values: each GPU's state, the processes holding
memory and who runs them, the topology, the device nodes, the kernel's Xid lines, and the
raw host facts the collective and toolchain rules read. Pure: parsing only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envdoctor.gpu.smi_text import ComputeApp, Topology, Xid, parse_compute_apps, parse_topology, parse_xids
from envdoctor.gpu.smi_xml import GpuState, SmiLog, SmiXmlError, lost_gpus, parse_smi_xml

SECTION = "node"


@dataclass(frozen=True)
class Holder:
    """A process holding GPU memory: nvidia-smi's view, and /proc's where this PID namespace has it."""

    pid: int
    gpu: int | None
    name: str
    used_mib: int | None
    user: str | None = None
    cmdline: str | None = None
    in_namespace: bool = True

    def describe(self) -> str:
        who = f"user {self.user}" if self.user else "user unknown"
        what = self.cmdline or self.name
        memory = f"{self.used_mib / 1024:.1f} GiB" if self.used_mib is not None else "memory unknown"
        where = "" if self.in_namespace else " (not in this PID namespace: another container or the host)"
        return f"pid {self.pid} ({who}: {what[:120]}) {memory}{where}"


@dataclass(frozen=True)
class Command:
    status: int | None = None
    out: str = ""
    err: str = ""

    @classmethod
    def of(cls, raw: Any) -> Command | None:
        if not isinstance(raw, Mapping):
            return None
        status = raw.get("status")
        return cls(status if isinstance(status, int) else None, str(raw.get("out") or ""), str(raw.get("err") or ""))

    @property
    def failure(self) -> str | None:
        """Why it failed (its last words), or None when it exited 0."""
        if self.status == 0:
            return None
        words = (self.err.strip() or self.out.strip() or f"exit status {self.status}").splitlines()
        return f"{words[-1][:300]} (exit status {self.status})"


@dataclass(frozen=True)
class NodeFacts:
    raw: Mapping[str, Any]
    smi_path: str | None = None
    log: SmiLog | None = None
    log_error: str | None = None
    lost: tuple[tuple[str, str], ...] = ()
    holders: tuple[Holder, ...] = ()
    apps_error: str | None = None
    topology: Topology = field(default_factory=Topology)
    topology_error: str | None = None
    devices: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    xids: tuple[Xid, ...] = ()
    xid_error: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> tuple[GpuState, ...]:
        return self.log.gpus if self.log else ()

    @property
    def driver(self) -> Mapping[str, Any]:
        return self.raw.get("driver") or {}

    @property
    def has_nvidia(self) -> bool:
        """Whether this node has NVIDIA GPUs as far as anything shows (nvidia-smi, device
        nodes, the kernel module)."""
        return bool(self.smi_path or self.devices or self.driver.get("nvidia_loaded"))

    def holders_on(self, index: int) -> list[Holder]:
        return [h for h in self.holders if h.gpu == index]

    @classmethod
    def from_probe(cls, raw: Mapping[str, Any]) -> NodeFacts:
        smi = raw.get("smi") or {}
        xml, apps, topo = (Command.of(smi.get(k)) for k in ("xml", "apps", "topo"))
        log, log_error = None, None
        if xml is not None:
            try:
                log = parse_smi_xml(xml.out)
            except SmiXmlError as exc:
                log_error = xml.failure or str(exc)
        text = "\n".join(c.out + "\n" + c.err for c in (xml, apps, topo) if c is not None)
        lost = tuple(dict.fromkeys(lost_gpus(text)))
        gpus = log.gpus if log else ()
        holders = _holders(gpus, parse_compute_apps(apps.out) if apps else [], raw.get("processes") or {})
        xid = raw.get("xid") or {}
        return cls(
            raw=raw, smi_path=raw.get("nvidia_smi"), log=log, log_error=log_error, lost=lost, holders=holders,
            apps_error=apps.failure if apps else None,
            topology=parse_topology(topo.out) if topo else Topology(), topology_error=topo.failure if topo else None,
            devices=dict(raw.get("devices") or {}), xids=tuple(parse_xids(list(xid.get("lines") or []))),
            xid_error=xid.get("error"), env=dict(raw.get("env") or {}),
        )


def _holders(gpus: tuple[GpuState, ...], apps: list[ComputeApp], procs: Mapping[str, Any]) -> tuple[Holder, ...]:
    """One holder per (process, GPU): --query-compute-apps first; the XML's process lists
    fill in when that query failed (graphics processes such as Xorg are in the XML only)."""
    by_uuid = {g.uuid: g.index for g in gpus if g.uuid}
    seen: dict[tuple[int, int | None], Holder] = {}
    for app in apps:
        gpu = by_uuid.get(app.gpu_uuid)
        seen[(app.pid, gpu)] = _holder(app.pid, gpu, app.name, app.used_mib, procs)
    for gpu in gpus:
        for process in gpu.processes:
            if (process.pid, gpu.index) not in seen:
                seen[(process.pid, gpu.index)] = _holder(process.pid, gpu.index, process.name, process.used_mib, procs)
    return tuple(sorted(seen.values(), key=lambda h: (h.gpu if h.gpu is not None else -1, -(h.used_mib or 0), h.pid)))


def _holder(pid: int, gpu: int | None, name: str, used: int | None, procs: Mapping[str, Any]) -> Holder:
    info = procs.get(str(pid)) or {}
    return Holder(pid, gpu, name, used, user=info.get("user"), cmdline=info.get("cmdline"),
                  in_namespace=bool(info.get("exists", True)))


#: The typed view of each node section, for the four checks that read one host's section in
#: turn: keyed by the section's identity, the section kept alive beside it so that the
#: identity cannot be reused while the entry lasts; bounded, as a fleet's hosts come and go.
_PARSED: dict[int, tuple[Mapping[str, Any], NodeFacts]] = {}
_PARSED_MAX = 64


def node_facts(section: Mapping[str, Any]) -> NodeFacts:
    """NodeFacts.from_probe(section), parsed once however many checks ask."""
    hit = _PARSED.get(id(section))
    if hit is not None and hit[0] is section:
        return hit[1]
    facts = NodeFacts.from_probe(section)
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED[id(section)] = (section, facts)
    return facts
