"""gpu.free, gpu.health, host.collectives and python.jit-toolchain as pure functions of a node
section. The section is assembled in memory from the real-format samples of
tests/node_samples.py (the probe itself runs against fake roots in tests/e2e/test_node_readiness.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from envdoctor.checks import node as node_checks
from envdoctor.engine.facts import HostFacts
from envdoctor.engine.graph import CheckContext
from envdoctor.engine.results import Status
from envdoctor.inventory import HostSpec
from envdoctor.probe.program import ProbeOutput
from envdoctor.probe.schema import section_problems
from tests.node_layouts import LIMITS, NVCC_VERSION
from tests.node_samples import Gpu, Proc, compute_apps, node_gpus, smi_xml, topology, xid_line
from tests.unit.fakes import dist, env

GIB = 1024**3


def command(out: str, status: int = 0, err: str = "") -> dict[str, Any]:
    return {"status": status, "out": out, "err": err, "truncated": False, "seconds": 0.01}


def section(gpus: list[Gpu] | None = None, *, devices: tuple[str, ...] = ("nvidiactl", "nvidia-uvm"),
            topo: str | None = None, env_vars: dict[str, str] | None = None, shm: int = 16 * GIB,
            memlock: str = "unlimited", nofile: str = "1048576", hcas: dict[str, str] | None = None,
            processes: dict[str, Any] | None = None, xids: tuple[str, ...] = (),
            toolchain: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A node section as the probe sends it, built from the samples (gpus None: no nvidia-smi)."""
    smi = {} if gpus is None else {"xml": command(smi_xml(gpus)), "apps": command(compute_apps(gpus)),
                                   "topo": command(topo if topo is not None else topology(len(gpus)))}
    names = list(devices) + [f"nvidia{g.index}" for g in gpus or []]
    data = {
        "root": None, "nvidia_smi": "/usr/bin/nvidia-smi" if gpus is not None else None, "smi": smi,
        "processes": processes or {}, "devices": {f"/dev/{n}": {"kind": "char", "access": True} for n in names},
        "driver": {"nvidia_loaded": bool(names), "uvm_loaded": True, "nvswitches": 0}, "fabric_manager": None,
        "xid": {"lines": list(xids), "error": None}, "env": env_vars or {},
        "toolchain": toolchain or tools(), "limits": LIMITS.format(nofile=nofile, memlock=memlock),
        "nccl_conf": {}, "container": [], "libnccl": [], "seconds": 0.02,
        "shm": {"exists": True, "total": shm, "free": shm, "mount": {"source": "shm", "fstype": "tmpfs",
                                                                     "options": f"rw,size={shm // 1024}k"}},
        "net": {"lo": {"operstate": "unknown"}, "eth0": {"operstate": "up"}, "ib0": {"operstate": "up"}},
        "infiniband": {h: {"ports": {"1": {"state": s, "link_layer": "InfiniBand"}}} for h, s in (hcas or {}).items()},
    }
    data.update(extra)
    assert section_problems({"node": data}, {}, {}) == []  # the shape the probe's schema accepts
    return data


def tools(**changes: Any) -> dict[str, Any]:
    found = {"compilers": {"cc": {"gcc": "/usr/bin/gcc"}, "c++": {"g++": "/usr/bin/g++"}}, "cc_env": None,
             "cxx_env": None, "cuda_home": "/usr/local/cuda", "cuda_home_source": "/usr/local/cuda",
             "nvcc": "/usr/local/cuda/bin/nvcc", "nvcc_on_path": None, "nvcc_version": None,
             "nvcc_version_source": None, "nvcc_version_output": NVCC_VERSION.format(release="12.8"),
             "headers": {h: f"/usr/local/cuda/include/{h}" for h in
                         ("cuda_runtime.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cuda.h")},
             "ninja": "/usr/bin/ninja", "venv_ninja": None, "deep_gemm": None, "pip_nvcc": None,
             "python_h": {"version": "3.11", "path": "/usr/include/python3.11/Python.h", "looked_in": []},
             "torch": {"version": "2.9.1", "cuda": "12.8"}}
    found.update(changes)
    return found


def run(check: Any, data: dict[str, Any], *, gpus: int | None = None, stages: tuple[str, ...] = (),
        dists: tuple[Any, ...] = ()) -> Any:
    probe = ProbeOutput(sections={"node": data})
    venv = env("/v", *dists)
    facts = HostFacts(probe=probe, envs=(venv,), configured_envs=("/v",))
    spec = HostSpec("h", None, venv="/v", gpus=gpus, stage_commands=stages)
    return check(CheckContext(spec, facts))


def parts(result: Any) -> set[tuple[str, str]]:
    return {(f["level"], f["part"]) for f in result.details.get("findings", [])}


BUSY = replace(Gpu("H100", 0), procs=(Proc(4242, "/usr/bin/python3", 76000),))
OWNER = {"4242": {"exists": True, "uid": 1000, "user": "alice",
                  "cmdline": "python3 -m vllm.entrypoints.openai.api_server --model /m"}}


def test_busy_gpu_fails_gpu_free_naming_the_process() -> None:
    """A GPU another vLLM holds fails gpu.free with pid, user and command, and a by-hand remedy."""
    gpus = [BUSY, *node_gpus("H100")[1:]]
    result = run(node_checks.gpu_free, section(gpus, processes=OWNER))
    assert result.status is Status.FAIL
    assert "GPU 0" in result.message and "pid 4242 (user alice: python3 -m vllm.entrypoints" in result.message
    assert "kill 4242 as alice" in result.remedy.summary and not result.remedy.automatic
    assert result.details["gpu"]["processes"][0]["user"] == "alice"


def test_stage_share_and_visible_gpus_decide_gpu_free() -> None:
    """A stage on free GPUs passes; asking 0.95 of a GPU with 90% free fails; hiding GPUs under its TP fails."""
    gpus = [BUSY, *node_gpus("H100")[1:]]
    data = section(gpus, processes=OWNER)
    ok = run(node_checks.gpu_free, data, stages=("CUDA_VISIBLE_DEVICES=4,5 vllm serve /m -tp 2",))
    assert ok.status is Status.PASS and ok.details["jobs"][0]["uses"] == [4, 5]
    half = replace(Gpu("H200", 0), procs=(Proc(9, "python3", 14000),))
    tight = run(node_checks.gpu_free, section([half]), stages=("vllm serve /m --gpu-memory-utilization 0.95",))
    assert tight.status is Status.FAIL and "0.95 (--gpu-memory-utilization 0.95)" in tight.message
    hidden = run(node_checks.gpu_free, section(node_gpus("H100"), env_vars={"CUDA_VISIBLE_DEVICES": "0,1"}),
                 stages=("vllm serve /m --tensor-parallel-size 8",))
    assert hidden.status is Status.FAIL and ("fail", "visible") in parts(hidden)
    assert "sees 2" in hidden.message and "CUDA_VISIBLE_DEVICES='0,1' (set in the host's environment)" in hidden.message


def test_expected_gpu_count_against_visible_without_a_stage() -> None:
    """gpus = 8 with CUDA_VISIBLE_DEVICES naming two fails; without an expectation two visible GPUs pass."""
    data = section(node_gpus("B200"), env_vars={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert run(node_checks.gpu_free, data, gpus=8).status is Status.FAIL
    assert run(node_checks.gpu_free, data).status is Status.PASS
    empty = section(node_gpus("B200"), env_vars={"CUDA_VISIBLE_DEVICES": ""})
    assert "sees no GPU" in run(node_checks.gpu_free, empty).message


@pytest.mark.parametrize("gpu, part", [
    (Gpu("H100", 2, volatile_dram_uncorrectable=2), "ecc"),
    (Gpu("H200", 2, remap_pending="Yes"), "ecc"),
    (Gpu("B200", 2, fabric_state="In Progress", fabric_status="N/A"), "fabric"),
    (Gpu("H100", 2, mig="Enabled"), "mig"),
    (Gpu("RTX PRO 6000", 2, error_fields=("used", "gpu_util"), error_value="ERR!"), "error"),
    (Gpu("B200", 2, recovery_action="Reboot"), "reset"),
])
def test_unhealthy_visible_gpu_fails_gpu_health(gpu: Gpu, part: str) -> None:
    """ECC, pending remap, fabric not registered, MIG on, ERR! fields and a recovery action each fail."""
    gpus = [replace(g, model=gpu.model) for g in node_gpus("H100", 4)]
    gpus[2] = gpu
    result = run(node_checks.gpu_health, section(gpus))
    assert result.status is Status.FAIL and ("fail", part) in parts(result), result.message
    assert "GPU 2" in result.message and result.remedy is not None


def test_hidden_gpu_problem_only_warns() -> None:
    """Uncorrectable ECC errors on a GPU the job does not see warn, naming it as not visible."""
    gpus = node_gpus("H100", 4)
    gpus[3] = Gpu("H100", 3, volatile_dram_uncorrectable=5)
    result = run(node_checks.gpu_health, section(gpus, env_vars={"CUDA_VISIBLE_DEVICES": "0,1"}))
    assert result.status is Status.WARN and "not visible to the job" in result.message


def test_missing_uvm_node_fails_with_the_modprobe_remedy() -> None:
    """Without /dev/nvidia-uvm gpu.health fails although nvidia-smi answers."""
    result = run(node_checks.gpu_health, section(node_gpus("H100"), devices=("nvidiactl",)))
    assert result.status is Status.FAIL and "/dev/nvidia-uvm is missing" in result.message
    assert "nvidia-modprobe -u -c=0" in result.remedy.summary


def test_lost_gpu_persistence_and_xid() -> None:
    """A lost GPU fails; persistence off and a hardware Xid in the kernel log warn."""
    data = section(node_gpus("H100", 7), xids=[xid_line("3B", 79, "GPU has fallen off the bus.")])
    data["smi"]["xml"] = command(data["smi"]["xml"]["out"], 15, "Unable to determine the device handle for "
                                 "GPU0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU\n")
    result = run(node_checks.gpu_health, data)
    assert result.status is Status.FAIL and ("fail", "lost") in parts(result) and ("warn", "xid") in parts(result)
    off = run(node_checks.gpu_health, section(node_gpus("H100", 2, persistence="Disabled")))
    assert off.status is Status.WARN and "persistence mode is off on GPU 0, 1" in off.message


def test_cpu_only_host_skips_every_node_check() -> None:
    """No nvidia-smi, no device node, no driver, none expected: all four are skipped."""
    data = section(None, devices=())
    for check in (node_checks.gpu_free, node_checks.gpu_health, node_checks.collectives, node_checks.jit_toolchain):
        assert run(check, data).status is Status.SKIPPED


def test_small_shm_fails_for_several_ranks_and_warns_for_one() -> None:
    """A 64 MiB /dev/shm fails host.collectives for an 8-GPU job and only warns for one GPU."""
    result = run(node_checks.collectives, section(node_gpus("H100"), shm=64 * 1024**2))
    assert result.status is Status.FAIL and "/dev/shm is 64 MiB" in result.message
    assert "--ipc=host" in result.remedy.summary
    one = run(node_checks.collectives, section(node_gpus("H100", 1), shm=64 * 1024**2))
    assert one.status is Status.WARN


@pytest.mark.parametrize("variables, ok", [
    ({"NCCL_SOCKET_IFNAME": "eth9"}, False), ({"NCCL_SOCKET_IFNAME": "eth"}, True),
    ({"NCCL_SOCKET_IFNAME": "=eth"}, False), ({"NCCL_SOCKET_IFNAME": "^docker,lo"}, True),
    ({"NCCL_SOCKET_IFNAME": "^eth,ib"}, False), ({"GLOO_SOCKET_IFNAME": "eth0"}, True),
    ({"NCCL_IB_HCA": "mlx5_9"}, False), ({"NCCL_IB_HCA": "=mlx5_0:1"}, True),
    ({"NCCL_IB_HCA": "mlx5_9", "NCCL_IB_DISABLE": "1"}, True),
])
def test_nccl_variables_against_interfaces_and_hcas(variables: dict[str, str], ok: bool) -> None:
    """NCCL's syntax (prefix, =exact, ^exclude, :port) against /sys/class/net and /sys/class/infiniband."""
    data = section(node_gpus("H100"), env_vars=variables, hcas={"mlx5_0": "4: ACTIVE", "mlx5_1": "4: ACTIVE"})
    result = run(node_checks.collectives, data)
    assert (result.status is Status.PASS) is ok, result.message
    if not ok:
        assert ("fail", "nccl") in parts(result) and "(from the host's environment)" in result.message


def test_nccl_conf_and_stage_command_settings_count() -> None:
    """/etc/nccl.conf's value is judged; the stage's own assignment wins over it."""
    data = section(node_gpus("H100"), nccl_conf={"/etc/nccl.conf": "NCCL_SOCKET_IFNAME=bond0\n"})
    assert "from /etc/nccl.conf" in run(node_checks.collectives, data).message
    fixed = run(node_checks.collectives, data, stages=("NCCL_SOCKET_IFNAME=eth0 vllm serve /m -tp 8",))
    assert fixed.status is Status.PASS


def test_memlock_with_active_rdma_and_open_files() -> None:
    """A 64 KiB locked-memory limit fails beside active HCAs; a low open-files limit warns."""
    data = section(node_gpus("H100"), memlock="65536", hcas={"mlx5_0": "4: ACTIVE"})
    assert ("fail", "limits") in parts(run(node_checks.collectives, data))
    assert run(node_checks.collectives, section(node_gpus("H100"), memlock="65536")).status is Status.PASS
    assert ("warn", "limits") in parts(run(node_checks.collectives, section(node_gpus("H100"), nofile="1024")))


def test_nccl_wheel_older_than_torch_pins_fails() -> None:
    """nvidia-nccl-cu12 2.21.5 beside a torch built with 2.27.5 fails with the exact install by hand."""
    torch = dist("torch", "2.9.1", 'nvidia-nccl-cu12==2.27.5; platform_system == "Linux"')
    result = run(node_checks.collectives, section(node_gpus("H100")),
                 dists=(torch, dist("nvidia-nccl-cu12", "2.21.5")))
    assert result.status is Status.FAIL and "torch 2.9.1 was built with NCCL 2.27.5" in result.message
    assert "/v/bin/python -m pip install 'nvidia-nccl-cu12==2.27.5'" in result.remedy.summary
    same = run(node_checks.collectives, section(node_gpus("H100")), dists=(torch, dist("nvidia-nccl-cu12", "2.27.5")))
    assert same.status is Status.PASS


def test_gpu_without_nvlink_on_an_nvlinked_node_fails() -> None:
    """On an all-to-all NV18 node, a GPU reached only over PCIe has lost its NVLinks."""
    result = run(node_checks.collectives, section(node_gpus("B200"), topo=topology(8, no_nvlink=(2,))))
    assert result.status is Status.FAIL and "GPU 2 reaches the other GPUs without NVLink" in result.message
    assert result.details["gpu"]["topology"]["kinds"]["0-1"] == "nvlink"
    pcie = run(node_checks.collectives, section(node_gpus("RTX PRO 6000"), topo=topology(8, nvlink=None)))
    assert pcie.status is Status.PASS


FLASHINFER = dist("flashinfer-python", "0.5.0")


@pytest.mark.parametrize("changes, part, level", [
    ({"nvcc": None, "cuda_home": None, "cuda_home_source": None}, "nvcc", "fail"),
    ({"headers": {"cuda_fp8.h": None}}, "headers", "fail"),
    ({"ninja": None}, "ninja", "fail"),
    ({"ninja": None, "venv_ninja": "/v/bin/ninja"}, "ninja", "warn"),
    ({"compilers": {"cc": {}, "c++": {}}}, "cxx", "fail"),
    ({"nvcc_version_output": NVCC_VERSION.format(release="13.0")}, "nvcc", "fail"),
    ({"nvcc_version_output": NVCC_VERSION.format(release="12.6")}, "nvcc", "warn"),
])
def test_flashinfer_without_its_toolchain(changes: dict[str, Any], part: str, level: str) -> None:
    """flashinfer without nvcc, headers, ninja or a compiler fails; nvcc of another CUDA major fails."""
    result = run(node_checks.jit_toolchain, section(node_gpus("H100"), toolchain=tools(**changes)),
                 dists=(FLASHINFER,))
    assert (level, part) in parts(result), result.message
    assert "flashinfer-python 0.5.0 (no flashinfer-jit-cache) compiles at run time" in result.message


def test_toolchain_rules_by_package() -> None:
    """The jit cache turns flashinfer's misses into warnings; triton needs cc and Python.h; B200 needs CUDA 12.8."""
    no_nvcc = tools(nvcc=None, cuda_home=None, cuda_home_source=None)
    cached = run(node_checks.jit_toolchain, section(node_gpus("H100"), toolchain=no_nvcc),
                 dists=(FLASHINFER, dist("flashinfer-jit-cache", "0.5.0")))
    assert cached.status is Status.WARN
    triton = run(node_checks.jit_toolchain, section(node_gpus("H100"), toolchain=tools(
        python_h={"version": "3.11", "path": None, "looked_in": ["/usr/include/python3.11"]})),
        dists=(dist("triton", "3.5.0"),))
    assert triton.status is Status.FAIL and "python3.11-dev" in triton.remedy.summary
    old = tools(nvcc_version_output=NVCC_VERSION.format(release="12.4"), torch={"version": "2.6.0", "cuda": "12.4"})
    blackwell = run(node_checks.jit_toolchain, section(node_gpus("B200"), toolchain=old), dists=(FLASHINFER,))
    assert blackwell.status is Status.FAIL and "cannot compile for Blackwell GPUs" in blackwell.message
    assert run(node_checks.jit_toolchain, section(node_gpus("H100"))).status is Status.SKIPPED


def test_healthy_node_passes_all_four() -> None:
    """An 8x H100 node, idle, healthy, big /dev/shm, flashinfer with its toolchain: four passes."""
    data = section(node_gpus("H100"), topo=topology(8, nics=4), hcas={"mlx5_0": "4: ACTIVE"})
    torch = dist("torch", "2.9.1", 'nvidia-nccl-cu12==2.27.5; platform_system == "Linux"')
    dists = (FLASHINFER, torch, dist("nvidia-nccl-cu12", "2.27.5"))
    for check in (node_checks.gpu_free, node_checks.gpu_health, node_checks.collectives, node_checks.jit_toolchain):
        result = run(check, data, stages=("vllm serve /m --tensor-parallel-size 8",), dists=dists)
        assert result.status is Status.PASS, (check.__name__, result.message)


def test_facts_document_carries_gpu_and_node_objects() -> None:
    """facts: gpu.health, gpu.processes, gpu.visible, gpu.topology; node.shm, node.limits, node.jit_toolchain."""
    from envdoctor.stages.handoff import facts_document

    data = section([BUSY, *node_gpus("H100")[1:]], processes=OWNER, env_vars={"CUDA_VISIBLE_DEVICES": "1,0"})
    doc = facts_document(HostSpec("h", None), HostFacts(probe=ProbeOutput(sections={"node": data})), None, 5)
    assert doc["gpu"]["health"][0]["memory_mib"]["total"] == 81559 and doc["gpu"]["visible"]["indices"] == [1, 0]
    assert doc["gpu"]["processes"][0]["pid"] == 4242 and doc["gpu"]["topology"]["nvlink_all_to_all"] is True
    assert doc["node"]["shm"]["size"] == 16 * GIB and doc["node"]["limits"]["memlock"] == [None, None]
    assert doc["node"]["jit_toolchain"]["nvcc_release"] == "12.8"


def test_malformed_node_section_is_this_hosts_error() -> None:
    """A section the schema refuses names the place; a check given broken facts errors, never crashes."""
    problems = section_problems({"node": {"devices": {"/dev/nvidia0": {"access": "yes"}}}}, {}, {})
    assert problems and "node.devices['/dev/nvidia0'].access" in problems[0]
    assert run(node_checks.gpu_free, "not a section").status is Status.ERROR  # type: ignore[arg-type]
