"""host.collectives: is the node ready for NCCL (and gloo) between the job's GPUs? Pure.

- ``/dev/shm``: NCCL's shared-memory transport and vLLM/SGLang's broadcast buffers live
  there; a container's default is 64 MiB ("Bus error", "Error while creating shared memory
  segment") unless it runs with ``--ipc=host`` or ``--shm-size``.
- Process limits (``/proc/self/limits``): RDMA registers memory, which the locked-memory
  limit bounds ("ibv_reg_mr failed"); many workers need open files.
- ``NCCL_SOCKET_IFNAME``/``GLOO_SOCKET_IFNAME`` and ``NCCL_IB_HCA`` against the interfaces
  in /sys/class/net and the RDMA devices in /sys/class/infiniband, with NCCL's syntax
  (comma list of prefixes, ``=`` exact, ``^`` excludes, ``:port``). A value comes from the
  stage's command, else the host's environment, else ~/.nccl.conf, else /etc/nccl.conf.
- The NCCL wheel against the one torch pins (its ``Requires-Dist: nvidia-nccl-cuXX==V``).
- ``nvidia-smi topo -m``: on a node whose GPUs are NVLinked all to all, a GPU reached
  without NVLink has lost its links.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from envdoctor.engine.facts import Environment
from envdoctor.gpu.node import NodeFacts
from envdoctor.gpu.smi_text import link_kind, parse_limits
from envdoctor.gpu.verdicts import Finding

MIB = 1024**2
GIB = 1024**3
SHM_NEEDED = 1 * GIB
SHM_FREE_NEEDED = 512 * MIB
MEMLOCK_NEEDED = 1 * GIB
NOFILE_WANTED = 65536
SHM_FIX = ("run the container with --ipc=host or --shm-size=16g (Kubernetes: mount an emptyDir with medium: Memory on "
           "/dev/shm)")


def nccl_setting(name: str, stage_env: Mapping[str, str], node: NodeFacts) -> tuple[str | None, str]:
    """(value, where it was set) with NCCL's precedence: environment, ~/.nccl.conf, /etc/nccl.conf."""
    if name in stage_env:
        return stage_env[name], "the stage's command"
    if name in node.env:
        return node.env[name], "the host's environment"
    for path, text in (node.raw.get("nccl_conf") or {}).items():
        for line in str(text).splitlines():
            key, eq, value = line.strip().partition("=")
            if eq and key.strip() == name and not key.strip().startswith("#"):
                return value.strip(), path
    return None, ""


def shm_findings(node: NodeFacts, ranks: int) -> list[Finding]:
    shm = node.raw.get("shm") or {}
    if not shm.get("exists"):
        return [Finding("fail" if ranks > 1 else "warn", "shm", "/dev/shm does not exist: NCCL's shared-memory "
                        "transport and PyTorch's worker processes need it", SHM_FIX)]
    size = shm_mount_size((shm.get("mount") or {}).get("options")) or shm.get("total")
    free = shm.get("free")
    if size is None:
        return []
    free = min(free, size) if isinstance(free, int) else None
    level = "fail" if ranks > 1 else "warn"
    why = (f"{ranks} GPU ranks exchange data through it" if ranks > 1 else
           "DataLoader workers and multiprocess engines share tensors through it")
    if size < SHM_NEEDED:
        return [Finding(level, "shm", f"/dev/shm is {_size(size)} (64 MiB is Docker's default without --ipc=host "
                        f"or --shm-size): too small, {why} (\"Bus error\", \"NCCL WARN Error while creating "
                        "shared memory segment\")", SHM_FIX)]
    if free is not None and free < SHM_FREE_NEEDED:
        return [Finding(level, "shm", f"/dev/shm has only {_size(free)} free of {_size(size)}; {why}",
                        "remove what earlier jobs left there (ls -la /dev/shm; files of processes that are gone)")]
    return []


def shm_mount_size(options: str | None) -> int | None:
    match = re.search(r"(?:^|,)size=(\d+)([kmg]?)", options or "")
    if not match:
        return None
    return int(match.group(1)) * {"": 1, "k": 1024, "m": MIB, "g": GIB}[match.group(2)]


def _size(n: int) -> str:
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    return f"{n / MIB:.0f} MiB" if n >= MIB else f"{n // 1024} KiB"


def active_hcas(node: NodeFacts) -> list[str]:
    ib = node.raw.get("infiniband") or {}
    return sorted(h for h, info in ib.items()
                  if any("ACTIVE" in str(p.get("state") or "") for p in (info.get("ports") or {}).values()))


def limit_findings(node: NodeFacts, stage_env: Mapping[str, str]) -> list[Finding]:
    limits = parse_limits(node.raw.get("limits"))
    out = []
    memlock = limits.get("Max locked memory")
    ib_off = (nccl_setting("NCCL_IB_DISABLE", stage_env, node)[0] or "0").strip() == "1"
    hcas = active_hcas(node)
    if memlock and memlock[0] is not None and hcas and not ib_off and memlock[0] < MEMLOCK_NEEDED:
        out.append(Finding("fail", "limits", f"the locked-memory limit is {_size(memlock[0])} while RDMA devices are "
                           f"active ({', '.join(hcas[:4])}): NCCL cannot register its buffers (\"ibv_reg_mr failed\")",
                           "raise the locked-memory limit to unlimited (ulimit -l unlimited; "
                           "/etc/security/limits.conf `* - memlock unlimited`; containers: --ulimit memlock=-1)"))
    nofile = limits.get("Max open files")
    if nofile and nofile[1] is not None and nofile[1] < NOFILE_WANTED:
        out.append(Finding("warn", "limits", f"the open-files limit is {nofile[1]} (hard): engines with many workers "
                           "fail with \"Too many open files\"",
                           f"raise the open-files limit to {NOFILE_WANTED} or more (ulimit -n; "
                           "/etc/security/limits.conf `* - nofile 1048576`)"))
    return out


def _matches(value: str, names: Sequence[str], *, exact_default: bool = False) -> tuple[list[str], bool]:
    """(names NCCL would pick for a *_IFNAME/IB_HCA value, whether it excludes). ``^`` excludes,
    ``=`` asks for exact names, ``:port`` suffixes are dropped."""
    text = value.strip()
    exclude = text.startswith("^")
    text = text.lstrip("^")
    exact = exact_default or text.startswith("=")
    wanted = [w.split(":")[0].strip() for w in text.lstrip("=").split(",") if w.strip()]
    hit = [n for n in names if any(n == w if exact else n.startswith(w) for w in wanted)]
    return ([n for n in names if n not in hit] if exclude else hit), exclude


def variable_findings(node: NodeFacts, stage_env: Mapping[str, str]) -> list[Finding]:
    out = []
    interfaces = node.raw.get("net")
    if isinstance(interfaces, Mapping):
        names = sorted(interfaces)
        for variable, exact in (("NCCL_SOCKET_IFNAME", False), ("GLOO_SOCKET_IFNAME", True)):
            value, where = nccl_setting(variable, stage_env, node)
            if value is None:
                continue
            picked, exclude = _matches(value, [n for n in names if n != "lo"] if "^" in value else names,
                                       exact_default=exact)
            if not picked:
                verb = "leaves" if exclude else "matches"
                out.append(Finding("fail", "nccl", f"{variable}={value!r} (from {where}) {verb}"
                                   f" no network interface of this host ({', '.join(names)}): the job fails at start "
                                   "(\"Bootstrap : no socket interface found\")",
                                   f"set {variable} to an interface that exists here, or unset it"))
            elif all((interfaces[n] or {}).get("operstate") == "down" for n in picked):
                out.append(Finding("warn", "nccl", f"{variable}={value!r} picks {', '.join(picked)}, which is down"))
    value, where = nccl_setting("NCCL_IB_HCA", stage_env, node)
    ib_off = (nccl_setting("NCCL_IB_DISABLE", stage_env, node)[0] or "0").strip() == "1"
    if value is not None and not ib_off:
        hcas = sorted(node.raw.get("infiniband") or {})
        picked, exclude = _matches(value, hcas)
        if not picked:
            verb = "leaves" if exclude else "names"
            out.append(Finding("fail", "nccl", f"NCCL_IB_HCA={value!r} (from {where}) {verb} "
                               f"no RDMA device of this host ({', '.join(hcas) or 'none in /sys/class/infiniband'}): "
                               "NCCL fails or falls back to slow sockets",
                               "set NCCL_IB_HCA to devices that exist (ibv_devices lists them), or unset it"))
    return out


def nccl_version_findings(env: Environment | None, node: NodeFacts, python: str) -> list[Finding]:
    """The NCCL wheel against the version torch was built with (torch pins it exactly)."""
    if env is None or "torch" not in env.installed:
        return []
    torch = env.installed["torch"]
    out = []
    for text in torch.requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if not re.fullmatch(r"nvidia-nccl-cu\d+", req.name.lower()):
            continue
        if req.marker is not None and not req.marker.evaluate({**env.markers, "extra": ""}):
            continue
        pins = [s.version for s in req.specifier if s.operator == "=="]
        have = env.installed.get(req.name.lower())
        fix = f"{python} -m pip install '{req.name}{req.specifier}'"
        if have is None:
            out.append(Finding("fail", "nccl", f"torch {torch.version} needs {req.name}{req.specifier}, which is not "
                               "installed: NCCL cannot load", fix))
        elif pins and not req.specifier.contains(have.version, prereleases=True):
            try:
                older = Version(have.version) < Version(pins[0])
            except InvalidVersion:
                older = True
            out.append(Finding("fail" if older else "warn", "nccl", f"{req.name} {have.version} is installed; torch "
                               f"{torch.version} was built with NCCL {pins[0]} ({req.name}{req.specifier})", fix))
        for lib in node.raw.get("libnccl") or []:
            if pins and _tuple(lib.get("version")) < _tuple(pins[0]):
                out.append(Finding("warn", "nccl", f"LD_LIBRARY_PATH holds {lib.get('path')} "
                                   f"(NCCL {lib.get('version')}), "
                                   f"older than the {pins[0]} torch was built with: the loader may pick it first",
                                   "take that folder off LD_LIBRARY_PATH for the job"))
    return out


def _tuple(version: Any) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", str(version or ""))[:3])


def topology_findings(node: NodeFacts, used: Sequence[int]) -> list[Finding]:
    topo = node.topology
    pairs = [(a, b) for a in topo.gpus for b in topo.gpus if a < b]
    if len(topo.gpus) < 4 or not pairs:
        return []
    nvlinked = [p for p in pairs if link_kind(topo.link(*p)) == "nvlink"]
    if len(nvlinked) * 2 <= len(pairs) or len(nvlinked) == len(pairs):
        return []
    lonely = [g for g in topo.gpus if g in used
              and all(link_kind(topo.link(*sorted((g, o)))) != "nvlink" for o in topo.gpus if o != g)]
    if not lonely:
        return []
    cells = ", ".join(f"GPU{g}-GPU{o}: {topo.link(*sorted((g, o)))}"
                      for g in lonely[:2] for o in topo.gpus[:3] if o != g)
    verb = "reaches" if len(lonely) == 1 else "reach"
    return [Finding("fail", "topology", f"GPU {', '.join(map(str, lonely))} {verb} the other GPUs without NVLink "
                    f"({cells}) while the rest are NVLinked all to all: its NVLinks are down",
                    "check `nvidia-smi nvlink --status` and the fabric manager; reset the GPU or have the node serviced")]
