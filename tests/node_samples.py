"""nvidia-smi output in its real formats, for H100, H200, B200 and RTX PRO 6000 nodes, healthy
and in the error forms issue threads show. None of it was captured on hardware: each
sample is written here from the format's public description and public samples, named
next to it, with values such GPUs report (memory totals as issue threads quote them).

- ``-q -x``: the layout of NVIDIA's nvsmi_device_v12/v13 DTD as nvidia-smi 535-590 print
  it (public samples: influxdata/telegraf plugins/inputs/nvidia_smi/testdata, e.g.
  a100-sxm4-v12.xml with MIG on and remapped_rows N/A, pro-6000-maxq-blackwell-v13.xml with
  gpu_recovery_action, fabric/health and the sram_uncorrectable_parity/secded split).
  A field whose query failed prints NVML's error string ("Unknown Error"); the summary
  table shows such a field as "ERR!" (vllm-project/vllm#27430, Azure/azhpc-diagnostics#77),
  and both are used below. ``fabric`` state/status/health values are those of NVML's
  nvmlGpuFabricInfo (kubernetes-sigs/dra-driver-nvidia-gpu#626, Azure/azhpc-images#506).
- A lost GPU: "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.
  Reboot the system to recover this GPU" (JosephKJ/OWOD#81, marian-nmt/marian#251), the
  other GPUs still listed, a non-zero exit status.
- ``--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits``:
  nvidia-smi's CSV (``nvidia-smi --help-query-compute-apps``); ``[N/A]`` where a container
  may not read a process's memory.
- ``topo -m``: the matrix, legend and NIC legend as printed by drivers 535-580 (public
  samples: sgl-project/sglang#13973 and #26541 for 8-GPU NV18 HGX nodes with mlx5 NICs,
  vllm-project/vllm#16336 for a B200 node where one GPU has no NVLink, NVIDIA/go-gpuallocator#17
  for an all-PCIe 8-GPU node).
- Kernel log: "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus." (NVIDIA's
  Xid catalog and the many threads quoting it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

#: Each model: (product_name, product_architecture, fb total MiB, fb reserved MiB, NVSwitch fabric).
MODELS = {
    "H100": ("NVIDIA H100 80GB HBM3", "Hopper", 81559, 579, True),
    "H200": ("NVIDIA H200", "Hopper", 143771, 584, True),
    "B200": ("NVIDIA B200", "Blackwell", 183359, 1052, True),
    "RTX PRO 6000": ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "Blackwell", 97887, 637, False),
}
DRIVER = "570.133.20"
CUDA = "12.8"


@dataclass(frozen=True)
class Proc:
    pid: int
    name: str
    used_mib: int | None
    kind: str = "C"


@dataclass(frozen=True)
class Gpu:
    """One GPU's state; the defaults are a healthy idle GPU of its model."""

    model: str
    index: int
    used_mib: int = 0
    persistence: str = "Enabled"
    mig: str = "Disabled"
    mig_pending: str | None = None
    volatile_dram_uncorrectable: int = 0
    remap_pending: str = "No"
    remap_failure: str = "No"
    fabric_state: str | None = None
    fabric_status: str | None = None
    error_fields: tuple[str, ...] = ()
    procs: tuple[Proc, ...] = ()
    recovery_action: str = "None"
    #: What a failed query prints in the fields of `error_fields`.
    error_value: str = "Unknown Error"

    @property
    def name(self) -> str:
        return MODELS[self.model][0]

    @property
    def total(self) -> int:
        return MODELS[self.model][2]

    @property
    def bus(self) -> str:
        return f"00000000:{BUSES[self.index]}:00.0"

    @property
    def uuid(self) -> str:
        return f"GPU-{0x5e1f0000 + self.index * 0x1111:08x}-7d19-9063-b049-1e69664bb2{self.index:02d}"


#: PCI bus numbers of an 8-GPU HGX board (the order nvidia-smi lists them in).
BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


def _value(gpu: Gpu, tag: str, value: str) -> str:
    return gpu.error_value if tag in gpu.error_fields else value


def gpu_xml(gpu: Gpu) -> str:
    name, arch, total, reserved, nvswitch = MODELS[gpu.model]
    used = sum(p.used_mib or 0 for p in gpu.procs) or gpu.used_mib
    free = total - reserved - used
    state = gpu.fabric_state or ("Completed" if nvswitch else "N/A")
    status = gpu.fabric_status or ("Success" if nvswitch else "N/A")
    mig_devices = "".join(f"""
\t\t\t<mig_device>
\t\t\t\t<index>{i}</index>
\t\t\t\t<gpu_instance_id>{i + 3}</gpu_instance_id>
\t\t\t\t<compute_instance_id>0</compute_instance_id>
\t\t\t</mig_device>""" for i in range(2)) if gpu.mig == "Enabled" else "\n\t\t\tNone"
    remap = "N/A" if gpu.mig == "Enabled" else f"""
\t\t\t<remapped_row_corr>0</remapped_row_corr>
\t\t\t<remapped_row_unc>{1 if gpu.remap_pending == "Yes" else 0}</remapped_row_unc>
\t\t\t<remapped_row_pending>{gpu.remap_pending}</remapped_row_pending>
\t\t\t<remapped_row_failure>{gpu.remap_failure}</remapped_row_failure>
\t\t\t<row_remapper_histogram>
\t\t\t\t<row_remapper_histogram_max>639 bank(s)</row_remapper_histogram_max>
\t\t\t\t<row_remapper_histogram_high>1 bank(s)</row_remapper_histogram_high>
\t\t\t\t<row_remapper_histogram_partial>0 bank(s)</row_remapper_histogram_partial>
\t\t\t\t<row_remapper_histogram_low>0 bank(s)</row_remapper_histogram_low>
\t\t\t\t<row_remapper_histogram_none>0 bank(s)</row_remapper_histogram_none>
\t\t\t</row_remapper_histogram>
\t\t"""
    procs = "".join(f"""
\t\t\t<process_info>
\t\t\t\t<gpu_instance_id>N/A</gpu_instance_id>
\t\t\t\t<compute_instance_id>N/A</compute_instance_id>
\t\t\t\t<pid>{p.pid}</pid>
\t\t\t\t<type>{p.kind}</type>
\t\t\t\t<process_name>{p.name}</process_name>
\t\t\t\t<used_memory>{"N/A" if p.used_mib is None else f"{p.used_mib} MiB"}</used_memory>
\t\t\t</process_info>""" for p in gpu.procs)
    clocks = "".join(f"\n\t\t\t\t<supported_graphics_clock>{1980 - 15 * i} MHz</supported_graphics_clock>"
                     for i in range(80))
    return f"""	<gpu id="{gpu.bus}">
		<product_name>{_value(gpu, "product_name", name)}</product_name>
		<product_brand>NVIDIA</product_brand>
		<product_architecture>{arch}</product_architecture>
		<display_mode>Disabled</display_mode>
		<display_active>Disabled</display_active>
		<persistence_mode>{gpu.persistence}</persistence_mode>
		<addressing_mode>None</addressing_mode>
		<mig_mode>
			<current_mig>{gpu.mig}</current_mig>
			<pending_mig>{gpu.mig_pending or gpu.mig}</pending_mig>
		</mig_mode>
		<mig_devices>{mig_devices}
		</mig_devices>
		<accounting_mode>Disabled</accounting_mode>
		<serial>165{gpu.index:010d}</serial>
		<uuid>{gpu.uuid}</uuid>
		<minor_number>{gpu.index}</minor_number>
		<vbios_version>96.00.99.00.01</vbios_version>
		<multigpu_board>No</multigpu_board>
		<gpu_reset_status>
			<reset_required>No</reset_required>
			<drain_and_reset_recommended>No</drain_and_reset_recommended>
		</gpu_reset_status>
		<gpu_recovery_action>{gpu.recovery_action}</gpu_recovery_action>
		<gsp_firmware_version>{DRIVER}</gsp_firmware_version>
		<pci>
			<pci_bus>{BUSES[gpu.index]}</pci_bus>
			<pci_device>00</pci_device>
			<pci_domain>0000</pci_domain>
			<pci_bus_id>{gpu.bus}</pci_bus_id>
			<replay_counter>0</replay_counter>
		</pci>
		<fan_speed>{_value(gpu, "fan_speed", "N/A")}</fan_speed>
		<performance_state>P0</performance_state>
		<fb_memory_usage>
			<total>{total} MiB</total>
			<reserved>{reserved} MiB</reserved>
			<used>{_value(gpu, "used", f"{used} MiB")}</used>
			<free>{free} MiB</free>
		</fb_memory_usage>
		<compute_mode>Default</compute_mode>
		<utilization>
			<gpu_util>{_value(gpu, "gpu_util", "0 %")}</gpu_util>
			<memory_util>0 %</memory_util>
		</utilization>
		<ecc_mode>
			<current_ecc>Enabled</current_ecc>
			<pending_ecc>Enabled</pending_ecc>
		</ecc_mode>
		<ecc_errors>
			<volatile>
				<sram_correctable>0</sram_correctable>
				<sram_uncorrectable_parity>0</sram_uncorrectable_parity>
				<sram_uncorrectable_secded>0</sram_uncorrectable_secded>
				<dram_correctable>0</dram_correctable>
				<dram_uncorrectable>{gpu.volatile_dram_uncorrectable}</dram_uncorrectable>
			</volatile>
			<aggregate>
				<sram_correctable>0</sram_correctable>
				<sram_uncorrectable_parity>0</sram_uncorrectable_parity>
				<sram_uncorrectable_secded>0</sram_uncorrectable_secded>
				<dram_correctable>0</dram_correctable>
				<dram_uncorrectable>{gpu.volatile_dram_uncorrectable}</dram_uncorrectable>
				<sram_threshold_exceeded>No</sram_threshold_exceeded>
			</aggregate>
		</ecc_errors>
		<retired_pages>
			<multiple_single_bit_retirement>
				<retired_count>N/A</retired_count>
				<retired_pagelist>N/A</retired_pagelist>
			</multiple_single_bit_retirement>
			<double_bit_retirement>
				<retired_count>N/A</retired_count>
				<retired_pagelist>N/A</retired_pagelist>
			</double_bit_retirement>
			<pending_blacklist>N/A</pending_blacklist>
			<pending_retirement>N/A</pending_retirement>
		</retired_pages>
		<remapped_rows>{remap}</remapped_rows>
		<temperature>
			<gpu_temp>{_value(gpu, "gpu_temp", "31 C")}</gpu_temp>
			<memory_temp>38 C</memory_temp>
		</temperature>
		<gpu_power_readings>
			<power_state>P0</power_state>
			<instant_power_draw>{_value(gpu, "instant_power_draw", "69.85 W")}</instant_power_draw>
			<current_power_limit>700.00 W</current_power_limit>
		</gpu_power_readings>
		<fabric>
			<state>{state}</state>
			<status>{status}</status>
			<cliqueId>{0 if not nvswitch else 32766}</cliqueId>
			<clusterUuid>{"N/A" if not nvswitch else "00000000-0000-0000-0000-000000000000"}</clusterUuid>
			<health>
				<summary>{"N/A" if not nvswitch else "Healthy"}</summary>
				<bandwidth>{"N/A" if not nvswitch else "Full"}</bandwidth>
			</health>
		</fabric>
		<supported_clocks>
			<supported_mem_clock>
				<value>2619 MHz</value>{clocks}
			</supported_mem_clock>
		</supported_clocks>
		<processes>{procs}
		</processes>
		<accounted_processes>
		</accounted_processes>
	</gpu>
"""


def smi_xml(gpus: list[Gpu]) -> str:
    body = "".join(gpu_xml(g) for g in gpus)
    return f"""<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
	<timestamp>Tue Mar 10 09:12:44 2026</timestamp>
	<driver_version>{DRIVER}</driver_version>
	<cuda_version>{CUDA}</cuda_version>
	<attached_gpus>{len(gpus)}</attached_gpus>
{body}</nvidia_smi_log>
"""


def compute_apps(gpus: list[Gpu]) -> str:
    """--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits"""
    lines = [f"{g.uuid}, {p.pid}, {p.name}, {'[N/A]' if p.used_mib is None else p.used_mib}"
             for g in gpus for p in g.procs if p.kind == "C"]
    return "".join(line + "\n" for line in lines)


def gpu_list(gpus: list[Gpu]) -> str:
    """nvidia-smi -L (what host.gpu reads)."""
    return "".join(f"GPU {g.index}: {g.name} (UUID: {g.uuid})\n" for g in gpus)


LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def topology(n: int, *, nvlink: str | None = "NV18", nics: int = 0, no_nvlink: tuple[int, ...] = ()) -> str:
    """topo -m for n GPUs: all-to-all `nvlink` (or PCIe: NODE within a socket, SYS across),
    except GPUs in `no_nvlink`, which reach the others over PCIe only; `nics` mlx5 NICs."""
    labels = [f"GPU{i}" for i in range(n)] + [f"NIC{i}" for i in range(nics)]
    half = max(1, n // 2)

    def pcie(a: int, b: int) -> str:
        return "NODE" if (a < half) == (b < half) else "SYS"

    def cell(row: str, col: str) -> str:
        if row == col:
            return " X "
        kind_r, i = row[:3], int(row[3:])
        kind_c, j = col[:3], int(col[3:])
        if kind_r == "GPU" and kind_c == "GPU":
            if nvlink and i not in no_nvlink and j not in no_nvlink:
                return nvlink
            return pcie(i, j)
        gpu, nic = (i, j) if kind_r == "GPU" else (j, i) if kind_c == "GPU" else (None, None)
        if gpu is None:
            return "PIX" if i // 2 == j // 2 else "SYS"
        return "PIX" if nic == gpu else pcie(gpu, nic)

    rows = ["\t" + "\t".join(labels) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for label in labels:
        line = label + "\t" + "\t".join(cell(label, col) for col in labels)
        if label.startswith("GPU"):
            numa = 0 if int(label[3:]) < half else 1
            line += "\t" + ("0-47,96-143" if numa == 0 else "48-95,144-191") + f"\t{numa}\t\tN/A"
        rows.append(line)
    text = "\n".join(rows) + "\n" + LEGEND
    if nics:
        text += "\nNIC Legend:\n\n" + "".join(f"  NIC{i}: mlx5_{i}\n" for i in range(nics))
    return text


LOST_LINE = ("Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  "
             "Reboot the system to recover this GPU\n")


def xid_line(bus: str, code: int, detail: str, seconds: float = 8521.330117) -> str:
    return f"[{seconds:.6f}] NVRM: Xid (PCI:0000:{bus.lower()}:00): {code}, pid=<unknown>, name=<unknown>, {detail}\n"


@dataclass(frozen=True)
class Outputs:
    """What the fake nvidia-smi prints for each query: (stdout, stderr, exit status)."""

    xml: tuple[str, str, int]
    apps: tuple[str, str, int]
    topo: tuple[str, str, int]
    listing: tuple[str, str, int]
    dmesg: str = ""


def outputs_of(gpus: list[Gpu], *, nvlink: str | None = "NV18", nics: int = 0, lost: bool = False,
               no_nvlink: tuple[int, ...] = (), dmesg: str = "") -> Outputs:
    err, status = (LOST_LINE, 15) if lost else ("", 0)
    return Outputs((smi_xml(gpus), err, status), (compute_apps(gpus), err, status),
                   (topology(len(gpus), nvlink=nvlink, nics=nics, no_nvlink=no_nvlink), "", 0),
                   (gpu_list(gpus), err, status), dmesg)


def node_gpus(model: str, n: int = 8, **changes: object) -> list[Gpu]:
    return [Gpu(model, i) for i in range(n)] if not changes else [replace(Gpu(model, i), **changes) for i in range(n)]


@dataclass
class Host:
    """The rest of a fake node: device nodes, /dev/shm's mount, limits, interfaces, HCAs."""

    devices: tuple[str, ...] = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
    uvm_loaded: bool = True
    shm_size: str = "size=263849616k"
    memlock: str = "unlimited"
    nofile: str = "1048576"
    interfaces: dict[str, str] = field(default_factory=lambda: {"lo": "unknown", "eth0": "up", "ib0": "up"})
    hcas: tuple[str, ...] = ()
    nccl_conf: str | None = None
    processes: dict[int, tuple[int, str]] = field(default_factory=dict)
    users: dict[int, str] = field(default_factory=lambda: {0: "root", 1000: "alice"})
    nvswitches: int = 0
    #: The pid of an nv-fabricmanager process in the fake /proc (None: none runs).
    fabric_manager_pid: int | None = None
    #: A CUDA toolkit at /usr/local/cuda (its release), with nvcc and the headers the JITs include.
    cuda: str | None = None
