"""``nvidia-smi -q -x`` read into values. Pure: text in, GpuState values out.

The layout is NVIDIA's (``nvsmi_device_v12.dtd`` and ``_v13``): ``<nvidia_smi_log>`` holds
``driver_version``, ``cuda_version`` and one ``<gpu id="BUS">`` per GPU in nvidia-smi's index
order, with ``fb_memory_usage`` (MiB), ``persistence_mode``, ``mig_mode``, ``ecc_mode``,
``ecc_errors`` (``volatile``/``aggregate``: ``sram_uncorrectable``, ``dram_uncorrectable``
on current drivers, ``double_bit/total`` on old ones), ``retired_pages``
(``pending_blacklist``, ``pending_retirement``), ``remapped_rows`` (``remapped_row_pending``,
``remapped_row_failure``, or ``N/A``), ``gpu_reset_status``, ``gpu_recovery_action``,
``fabric`` (``state``, ``status``, ``health/summary``) and ``processes/process_info``.
A value nvidia-smi cannot read is ``N/A``, ``[N/A]`` or ``Not Supported`` (unknown here); one
that errored is ``ERR!`` or ``Unknown Error`` (kept, since it is a finding). A lost GPU has
no ``<gpu>``: nvidia-smi prints "Unable to determine the device handle for GPU <bus>: GPU is
lost" instead (see :func:`lost_gpus`).

The answer comes from a host, so it is untrusted: its size is bounded, and a document that
declares entities is refused before expat sees it (nvidia-smi's only names a DTD file).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

MAX_XML = 8 << 20
UNKNOWN = frozenset({"", "n/a", "[n/a]", "not supported", "[not supported]", "unknown", "none",
                     "requested functionality has been deprecated", "insufficient permissions",
                     "[insufficient permissions]"})
ERROR_VALUES = ("err!", "unknown error", "[unknown error]", "gpu is lost", "[gpu is lost]", "gpu requires reset",
                "[gpu requires reset]")
#: Fields (or parents of fields) whose error values mean the GPU is not usable; fans, power
#: and temperature readings that show ERR! are often transient and only warned of.
CRITICAL_FIELDS = ("fb_memory_usage", "ecc_errors", "remapped_rows", "retired_pages", "utilization", "pci",
                   "mig_mode", "processes", "product_name", "uuid", "minor_number", "persistence_mode",
                   "performance_state", "compute_mode", "ecc_mode", "gpu_reset_status")
_LOST = re.compile(r"Unable to determine the device handle for GPU\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
                   r"[0-9A-Fa-f]{2}\.[0-9A-Fa-f]):\s*([^\n]+)")


class SmiXmlError(ValueError):
    """The text is not an nvidia-smi XML log that can be read."""


@dataclass(frozen=True)
class SmiProcess:
    pid: int
    kind: str
    name: str
    used_mib: int | None


@dataclass(frozen=True)
class GpuState:
    index: int
    bus_id: str
    name: str
    uuid: str | None = None
    architecture: str | None = None
    minor: int | None = None
    total_mib: int | None = None
    reserved_mib: int | None = None
    used_mib: int | None = None
    free_mib: int | None = None
    persistence: str | None = None
    mig_current: str | None = None
    mig_pending: str | None = None
    mig_devices: int = 0
    ecc_current: str | None = None
    ecc_pending: str | None = None
    volatile_uncorrectable: int | None = None
    aggregate_uncorrectable: int | None = None
    retirement_pending: bool | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    reset_required: bool | None = None
    drain_recommended: bool | None = None
    recovery_action: str | None = None
    fabric_state: str | None = None
    fabric_status: str | None = None
    fabric_health: str | None = None
    #: (field path, value) of every field that shows an error value.
    errors: tuple[tuple[str, str], ...] = ()
    processes: tuple[SmiProcess, ...] = ()

    @property
    def critical_errors(self) -> tuple[tuple[str, str], ...]:
        return tuple(e for e in self.errors if e[0].split("/")[0] in CRITICAL_FIELDS)

    @property
    def mig_enabled(self) -> bool:
        return (self.mig_current or "").lower() == "enabled"


@dataclass(frozen=True)
class SmiLog:
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[GpuState, ...] = field(default_factory=tuple)


def known(text: str | None) -> str | None:
    """The value, or None for nvidia-smi's ways of saying it could not read it."""
    if text is None:
        return None
    value = " ".join(text.split())
    return None if value.lower() in UNKNOWN else value


def is_error(text: str | None) -> bool:
    return bool(text) and " ".join(text.split()).lower() in ERROR_VALUES


def mib(text: str | None) -> int | None:
    value = known(text)
    match = re.fullmatch(r"(\d+)\s*MiB", value or "")
    return int(match.group(1)) if match else None


def count(text: str | None) -> int | None:
    value = known(text)
    return int(value) if value is not None and value.isdigit() else None


def yes(text: str | None) -> bool | None:
    value = (known(text) or "").lower()
    return True if value == "yes" else False if value == "no" else None


def lost_gpus(text: str) -> list[tuple[str, str]]:
    """(bus id, reason) of each GPU nvidia-smi could not open, from its output."""
    return [(bus, reason.strip()) for bus, reason in _LOST.findall(text)]


def xml_part(text: str) -> str | None:
    start = text.find("<?xml")
    if start < 0:
        start = text.find("<nvidia_smi_log")
    end = text.rfind("</nvidia_smi_log>")
    if start < 0 or end < start:
        return None
    return text[start:end + len("</nvidia_smi_log>")]


def parse_smi_xml(text: str) -> SmiLog:
    """The log nvidia-smi -q -x printed (other lines around it, such as a lost GPU's, are
    ignored here). SmiXmlError when there is none or it cannot be read."""
    if len(text) > MAX_XML:
        raise SmiXmlError(f"nvidia-smi -q -x printed {len(text)} characters; more than {MAX_XML} are not read")
    part = xml_part(text)
    if part is None:
        raise SmiXmlError("no <nvidia_smi_log> in nvidia-smi -q -x's output")
    if "<!ENTITY" in part:
        raise SmiXmlError("nvidia-smi -q -x's output declares XML entities; refusing to read it")
    try:
        root = ET.fromstring(part)
    except ET.ParseError as exc:
        raise SmiXmlError(f"nvidia-smi -q -x's output is not well-formed XML ({exc})") from None
    gpus = tuple(gpu_state(index, element) for index, element in enumerate(root.findall("gpu")))
    return SmiLog(known(root.findtext("driver_version")), known(root.findtext("cuda_version")), gpus)


def gpu_state(index: int, gpu: ET.Element) -> GpuState:
    pci = gpu.find("pci")
    bus = gpu.get("id") or (pci.findtext("pci_bus_id") if pci is not None else None) or f"#{index}"
    memory = gpu.find("fb_memory_usage")
    remap = gpu.find("remapped_rows")
    retired = gpu.find("retired_pages")
    return GpuState(
        index=index, bus_id=bus.strip(), name=known(gpu.findtext("product_name")) or "unknown GPU",
        uuid=known(gpu.findtext("uuid")), architecture=known(gpu.findtext("product_architecture")),
        minor=count(gpu.findtext("minor_number")),
        total_mib=mib(memory.findtext("total")) if memory is not None else None,
        reserved_mib=mib(memory.findtext("reserved")) if memory is not None else None,
        used_mib=mib(memory.findtext("used")) if memory is not None else None,
        free_mib=mib(memory.findtext("free")) if memory is not None else None,
        persistence=known(gpu.findtext("persistence_mode")),
        mig_current=known(gpu.findtext("mig_mode/current_mig")), mig_pending=known(gpu.findtext("mig_mode/pending_mig")),
        mig_devices=len(gpu.findall("mig_devices/mig_device")),
        ecc_current=known(gpu.findtext("ecc_mode/current_ecc")), ecc_pending=known(gpu.findtext("ecc_mode/pending_ecc")),
        volatile_uncorrectable=uncorrectable(gpu.find("ecc_errors/volatile")),
        aggregate_uncorrectable=uncorrectable(gpu.find("ecc_errors/aggregate")),
        retirement_pending=any_yes(retired, ("pending_blacklist", "pending_retirement")),
        remap_pending=yes(remap.findtext("remapped_row_pending")) if remap is not None else None,
        remap_failure=yes(remap.findtext("remapped_row_failure")) if remap is not None else None,
        reset_required=yes(gpu.findtext("gpu_reset_status/reset_required")),
        drain_recommended=yes(gpu.findtext("gpu_reset_status/drain_and_reset_recommended")),
        recovery_action=known(gpu.findtext("gpu_recovery_action")),
        fabric_state=known(gpu.findtext("fabric/state")), fabric_status=known(gpu.findtext("fabric/status")),
        fabric_health=known(gpu.findtext("fabric/health/summary")),
        errors=error_fields(gpu), processes=processes(gpu),
    )


def uncorrectable(block: ET.Element | None) -> int | None:
    """Uncorrectable ECC errors in an ecc_errors block: every ``*uncorrectable*`` counter
    (sram and dram, parity and SEC-DED) on current drivers, ``double_bit/total`` on older
    ones. None when none of them could be read."""
    if block is None:
        return None
    values = [count(e.text) for e in block.iter() if "uncorrectable" in e.tag and len(e) == 0]
    values.append(count(block.findtext("double_bit/total")))
    read = [v for v in values if v is not None]
    return sum(read) if read else None


def any_yes(block: ET.Element | None, tags: tuple[str, ...]) -> bool | None:
    if block is None:
        return None
    values = [yes(block.findtext(tag)) for tag in tags]
    if any(v for v in values):
        return True
    return False if any(v is False for v in values) else None


def error_fields(gpu: ET.Element, limit: int = 64) -> tuple[tuple[str, str], ...]:
    found: list[tuple[str, str]] = []

    def walk(element: ET.Element, path: str) -> None:
        for child in element:
            where = f"{path}/{child.tag}" if path else child.tag
            if len(child):
                walk(child, where)
            elif is_error(child.text) and len(found) < limit:
                found.append((where, " ".join((child.text or "").split())))
    walk(gpu, "")
    return tuple(found)


def processes(gpu: ET.Element) -> tuple[SmiProcess, ...]:
    found = []
    for info in gpu.findall("processes/process_info"):
        pid = count(info.findtext("pid"))
        if pid is not None:
            found.append(SmiProcess(pid, known(info.findtext("type")) or "?", known(info.findtext("process_name")) or "?",
                                    mib(info.findtext("used_memory"))))
    return tuple(found)
