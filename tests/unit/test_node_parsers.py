"""The parsers of the node section's outputs, on nvidia-smi's real formats (tests/node_samples.py
says where each sample's shape comes from), error forms included."""

from __future__ import annotations

import pytest

from envdoctor.gpu.job import job_ask
from envdoctor.gpu.smi_text import link_kind, nvcc_release, parse_compute_apps, parse_limits, parse_topology, parse_xids
from envdoctor.gpu.smi_xml import SmiXmlError, lost_gpus, parse_smi_xml
from envdoctor.gpu.visible import visible_gpus
from tests.node_layouts import LIMITS, NVCC_VERSION
from tests.node_samples import LOST_LINE, MODELS, Gpu, Proc, compute_apps, node_gpus, smi_xml, topology, xid_line


@pytest.mark.parametrize("model", sorted(MODELS))
def test_healthy_log_of_each_model_reads_back(model: str) -> None:
    """Name, architecture, memory, persistence, MIG, ECC, remap and fabric of every GPU come out as printed."""
    log = parse_smi_xml(smi_xml(node_gpus(model)))
    name, arch, total, reserved, nvswitch = MODELS[model]
    assert log.driver_version == "570.133.20" and log.cuda_version == "12.8" and len(log.gpus) == 8
    gpu = log.gpus[3]
    assert (gpu.index, gpu.name, gpu.architecture, gpu.minor) == (3, name, arch, 3)
    assert (gpu.total_mib, gpu.reserved_mib, gpu.used_mib, gpu.free_mib) == (total, reserved, 0, total - reserved)
    assert gpu.bus_id == "00000000:5D:00.0" and gpu.uuid and gpu.uuid.startswith("GPU-")
    assert gpu.persistence == "Enabled" and not gpu.mig_enabled and gpu.volatile_uncorrectable == 0
    assert gpu.remap_pending is False and gpu.remap_failure is False and gpu.retirement_pending is None
    assert gpu.recovery_action is None and gpu.errors == ()
    assert (gpu.fabric_state, gpu.fabric_status) == (("Completed", "Success") if nvswitch else (None, None))


def test_error_forms_are_kept_as_findings_not_values() -> None:
    """"Unknown Error" and "ERR!" fields are listed; memory fields in error are critical, a fan is not."""
    gpus = [Gpu("H100", 0, error_fields=("used",)), Gpu("H100", 1, error_fields=("fan_speed",), error_value="ERR!")]
    log = parse_smi_xml(smi_xml(gpus))
    assert log.gpus[0].used_mib is None
    assert log.gpus[0].critical_errors == (("fb_memory_usage/used", "Unknown Error"),)
    assert log.gpus[1].errors == (("fan_speed", "ERR!"),) and log.gpus[1].critical_errors == ()


def test_uncorrectable_ecc_row_remap_and_mig_read() -> None:
    """Volatile uncorrectable DRAM errors are counted; a pending remap is True; MIG on lists its devices."""
    gpus = [Gpu("H200", 0, volatile_dram_uncorrectable=3), Gpu("H200", 1, remap_pending="Yes"),
            Gpu("H100", 2, mig="Enabled"), Gpu("B200", 3, remap_failure="Yes", recovery_action="Reset")]
    log = parse_smi_xml(smi_xml(gpus))
    assert log.gpus[0].volatile_uncorrectable == 3 and log.gpus[0].aggregate_uncorrectable == 3
    assert log.gpus[1].remap_pending is True
    assert log.gpus[2].mig_enabled and log.gpus[2].mig_devices == 2 and log.gpus[2].remap_pending is None
    assert log.gpus[3].remap_failure is True and log.gpus[3].recovery_action == "Reset"


def test_processes_of_the_xml_with_na_memory() -> None:
    """process_info entries give pid, type, name and MiB; N/A memory is None."""
    gpu = Gpu("RTX PRO 6000", 0, procs=(Proc(2211, "/usr/lib/xorg/Xorg", None, "G"), Proc(4242, "python3", 70000)))
    procs = parse_smi_xml(smi_xml([gpu])).gpus[0].processes
    assert [(p.pid, p.kind, p.name, p.used_mib) for p in procs] == [(2211, "G", "/usr/lib/xorg/Xorg", None),
                                                                    (4242, "C", "python3", 70000)]


def test_lost_gpu_lines_are_found_beside_the_log() -> None:
    """A lost GPU's line is read from the output; the remaining GPUs' log still parses."""
    text = LOST_LINE + smi_xml(node_gpus("H100", 7))
    assert lost_gpus(text) == [("0000:3B:00.0", "GPU is lost.  Reboot the system to recover this GPU")]
    assert len(parse_smi_xml(text).gpus) == 7
    assert lost_gpus("Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error\n") == [
        ("0000:0B:00.0", "Unknown Error")]


@pytest.mark.parametrize("text, message", [
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "no <nvidia_smi_log>"),
    ('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><nvidia_smi_log>&a;</nvidia_smi_log>', "entities"),
    ("<nvidia_smi_log><gpu></nvidia_smi_log>", "not well-formed"),
])
def test_unreadable_logs_are_refused_with_a_reason(text: str, message: str) -> None:
    """No log, declared entities and broken XML each raise SmiXmlError saying which."""
    with pytest.raises(SmiXmlError, match=message):
        parse_smi_xml(text)


def test_compute_apps_csv_with_na_and_commas() -> None:
    """gpu_uuid, pid, name, MiB per line; [N/A] memory is None; a comma in the name is kept."""
    gpus = [Gpu("H100", 0, procs=(Proc(4242, "python3", 76000),)), Gpu("H100", 1, procs=(Proc(77, "a,b", None),))]
    apps = parse_compute_apps(compute_apps(gpus) + "No running processes found\n")
    assert [(a.gpu_uuid, a.pid, a.name, a.used_mib) for a in apps] == [(gpus[0].uuid, 4242, "python3", 76000),
                                                                       (gpus[1].uuid, 77, "a,b", None)]


def test_topology_matrix_affinity_and_nic_legend() -> None:
    """Every GPU pair's cell, CPU/NUMA affinity and the NIC legend are read; NV18 is NVLink."""
    topo = parse_topology(topology(8, nics=4))
    assert topo.gpus == list(range(8)) and topo.link(0, 7) == "NV18" and link_kind(topo.link(2, 5)) == "nvlink"
    assert topo.links[("GPU0", "NIC0")] == "PIX" and topo.nic_names == {f"NIC{i}": f"mlx5_{i}" for i in range(4)}
    assert topo.cpu_affinity["GPU5"] == "48-95,144-191" and topo.numa_affinity["GPU0"] == "0"
    pcie = parse_topology(topology(8, nvlink=None))
    assert pcie.link(0, 1) == "NODE" and pcie.link(0, 7) == "SYS" and link_kind("SYS") == "cross-socket"
    broken = parse_topology(topology(8, no_nvlink=(2,)))
    assert broken.link(2, 3) == "NODE" and broken.link(3, 4) == "NV18"
    assert parse_topology("Failed to run topology: GPU is lost").devices == ()


def test_xid_lines_limits_and_nvcc_release() -> None:
    """Xid code and bus from the kernel log; /proc/self/limits as (soft, hard); nvcc's release."""
    xids = parse_xids([xid_line("3B", 79, "GPU has fallen off the bus."), "[1.0] unrelated"])
    assert [(x.bus, x.code) for x in xids] == [("0000:3b:00", 79)] and "fallen off" in xids[0].detail
    limits = parse_limits(LIMITS.format(nofile="1024", memlock="65536"))
    assert limits["Max locked memory"] == (65536, 65536) and limits["Max open files"] == (1024, 1024)
    assert parse_limits(LIMITS.format(nofile="1", memlock="unlimited"))["Max locked memory"] == (None, None)
    assert nvcc_release(NVCC_VERSION.format(release="12.8")) == "12.8" and nvcc_release("sh: nvcc: not found") is None


@pytest.mark.parametrize("command, gpus, fraction, env", [
    ("{python} -m vllm.entrypoints.openai.api_server --model {model} --tensor-parallel-size 8 "
     "--gpu-memory-utilization 0.95", 8, 0.95, {}),
    ("CUDA_VISIBLE_DEVICES=0,1 {python} -m sglang.launch_server --tp 2 --mem-fraction-static=0.8", 2, 0.8,
     {"CUDA_VISIBLE_DEVICES": "0,1"}),
    ("export NCCL_SOCKET_IFNAME=eth9 && vllm serve m -tp 4 -pp 2", 8, 0.9, {"NCCL_SOCKET_IFNAME": "eth9"}),
    ("env CUDA_DEVICE_ORDER=PCI_BUS_ID torchrun --nproc-per-node 4 -m speculators.train", 4, 0.9,
     {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}),
    ("{python} -m sglang.launch_server --tp 8 --dp 8 --enable-dp-attention", 8, 0.9, {}),
    ("{python} -m speculators.train --epochs 3", None, 0.9, {}),
])
def test_stage_commands_give_their_knobs(command: str, gpus: int | None, fraction: float, env: dict) -> None:
    """GPU count, memory share and the command's own environment are read from its words."""
    ask = job_ask(command)
    assert (ask.gpus, ask.fraction, ask.env) == (gpus, fraction, env)


def test_cuda_visible_devices_as_cuda_applies_it() -> None:
    """Indices, UUID prefixes, a stop at the first invalid entry, the empty list, the stage over the host."""
    gpus = parse_smi_xml(smi_xml(node_gpus("H100"))).gpus
    assert visible_gpus(gpus, {}, {}).indices == tuple(range(8))
    assert visible_gpus(gpus, {}, {"CUDA_VISIBLE_DEVICES": "3,1"}).indices == (3, 1)
    stopped = visible_gpus(gpus, {}, {"CUDA_VISIBLE_DEVICES": "0,9,1"})
    assert stopped.indices == (0,) and stopped.invalid == ("9",)
    assert visible_gpus(gpus, {}, {"CUDA_VISIBLE_DEVICES": ""}).indices == ()
    assert visible_gpus(gpus, {"CUDA_VISIBLE_DEVICES": gpus[5].uuid[:12]}, {"CUDA_VISIBLE_DEVICES": "0"}).indices == (5,)
    mixed = parse_smi_xml(smi_xml([Gpu("H100", 0), Gpu("RTX PRO 6000", 1)])).gpus
    assert visible_gpus(mixed, {}, {"CUDA_VISIBLE_DEVICES": "1"}).notes
    assert not visible_gpus(mixed, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, {"CUDA_VISIBLE_DEVICES": "1"}).notes
