"""Which of the node's GPUs a job sees: ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``
applied as the CUDA runtime applies them (CUDA C Programming Guide, "CUDA Environment
Variables"). Pure.

- Unset: every GPU. Set to the empty string: none.
- A comma-separated list of indices, ``GPU-<uuid>`` (a unique prefix is enough) or
  ``MIG-<uuid>``; devices appear in the list's order. At the first entry that names no
  device (or one already named) the list stops: only the entries before it are visible.
- Indices count in CUDA's order: ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` is nvidia-smi's order;
  the default, ``FASTEST_FIRST``, puts the fastest first and leaves the order of equal GPUs
  unspecified, so on a node of mixed GPUs an index may not be nvidia-smi's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from envdoctor.gpu.smi_xml import GpuState


@dataclass(frozen=True)
class Visible:
    #: nvidia-smi indices of the GPUs the job sees, in CUDA's order.
    indices: tuple[int, ...]
    #: "the stage's command", "the host's environment" or "" when nothing restricts them.
    source: str = ""
    value: str | None = None
    order: str | None = None
    #: Entries that stopped the list (naming no GPU), and MIG devices named.
    invalid: tuple[str, ...] = ()
    mig: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def restricted(self) -> bool:
        return self.value is not None


def visible_gpus(gpus: Sequence[GpuState], stage_env: Mapping[str, str], host_env: Mapping[str, str]) -> Visible:
    """The GPUs a job started with `stage_env` (its command's own assignments) on a host
    whose environment is `host_env` sees."""
    source, value = "", None
    if "CUDA_VISIBLE_DEVICES" in stage_env:
        source, value = "the stage's command", stage_env["CUDA_VISIBLE_DEVICES"]
    elif "CUDA_VISIBLE_DEVICES" in host_env:
        source, value = "the host's environment", host_env["CUDA_VISIBLE_DEVICES"]
    order = stage_env.get("CUDA_DEVICE_ORDER", host_env.get("CUDA_DEVICE_ORDER"))
    all_indices = tuple(g.index for g in gpus)
    if value is None:
        return Visible(all_indices, source, None, order)
    picked: list[int] = []
    invalid: list[str] = []
    mig: list[str] = []
    notes: list[str] = []
    mixed = len({g.name for g in gpus}) > 1
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            if value.strip():
                invalid.append(raw)
            break
        if entry.startswith("MIG-"):
            mig.append(entry)
            owner = _mig_owner(gpus, entry)
            if owner is not None and owner not in picked:
                picked.append(owner)
            continue
        found = _by_uuid(gpus, entry) if entry.upper().startswith("GPU-") else _by_index(gpus, entry)
        if found is None or found in picked:
            invalid.append(entry)
            break
        if not entry.upper().startswith("GPU-") and mixed and (order or "FASTEST_FIRST") != "PCI_BUS_ID":
            notes.append(f"index {entry} counts in CUDA's FASTEST_FIRST order on a node of mixed GPUs: it may not be "
                         f"nvidia-smi's GPU {entry} (set CUDA_DEVICE_ORDER=PCI_BUS_ID)")
        picked.append(found)
    return Visible(tuple(picked), source, value, order, tuple(invalid), tuple(mig), tuple(dict.fromkeys(notes)))


def _by_index(gpus: Sequence[GpuState], entry: str) -> int | None:
    if not entry.isdigit():
        return None
    position = int(entry)
    return gpus[position].index if position < len(gpus) else None


def _by_uuid(gpus: Sequence[GpuState], entry: str) -> int | None:
    matches = [g.index for g in gpus if g.uuid and g.uuid.lower().startswith(entry.lower())]
    return matches[0] if len(matches) == 1 else None


def _mig_owner(gpus: Sequence[GpuState], entry: str) -> int | None:
    """The GPU of a ``MIG-GPU-<uuid>/gi/ci`` name (the newer ``MIG-<uuid>`` names cannot be
    told apart without NVML: then unknown)."""
    if entry.startswith("MIG-GPU-"):
        return _by_uuid(gpus, entry[4:].split("/")[0])
    return None
