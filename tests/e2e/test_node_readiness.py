"""Will the job start on this node? The node section run by the real probe against fake nodes
(tests/node_layouts.py: a stand-in root, an nvidia-smi and a dmesg printing real-format
samples), and the four checks through the CLI as a user runs them: each held-out-style
fault fails its own check, with a remedy, and no other; a healthy node passes; this
machine, which has no GPU, skips them; a remote host never sees the stand-in root."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from envdoctor.probe.host.node import section as node_probe
from tests.conftest import make_venv
from tests.node_layouts import fake_node, write
from tests.node_samples import Host, Proc, node_gpus, outputs_of

pytestmark = pytest.mark.e2e

NODE_CHECKS = ("gpu.free", "gpu.health", "host.collectives", "python.jit-toolchain")
FLASHINFER = "flashinfer-python==0.5.0"  # 6.9 MB, pure Python: its kernels are compiled at run time
VLLM = "python3 -m vllm.entrypoints.openai.api_server --model /models/Kimi-K2.6 --tensor-parallel-size 8"


@pytest.fixture(scope="module")
def flashinfer_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real venv holding flashinfer-python from PyPI (installed without its dependencies)."""
    wheels = tmp_path_factory.mktemp("flashinfer-wheel")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d",
                    str(wheels), FLASHINFER], check=True)
    return make_venv(tmp_path_factory.mktemp("fi") / "venv", [str(next(wheels.glob("*.whl")))],
                     pip_args=["--no-deps", "--no-index"])


def run_section(node, monkeypatch: pytest.MonkeyPatch, **args: object) -> dict:
    for name, value in node.env({}).items():
        monkeypatch.setenv(name, value)
    return node_probe.node_section({"test_root": str(node.root), **args}, None)


def check(run_cli, node, *extra: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, dict]]:
    args = ["check", "local", "--format", "json", *extra] + [a for c in NODE_CHECKS for a in ("--only", c)]
    res = run_cli(*args, env={**(node.env() if node else {}), **(env or {})})
    assert "Traceback" not in res.stderr, res.stderr
    results = {r["id"]: r for r in json.loads(res.stdout)["hosts"][0]["results"]}
    return res.exit_status, results


def busy_node(tmp: Path):
    gpus = node_gpus("H100")
    gpus[0] = replace(gpus[0], procs=(Proc(4242, "/usr/bin/python3", 76000),))
    host = Host(processes={4242: (1000, VLLM)})
    return fake_node(tmp, gpus, host, outputs_of(gpus, nics=4))


def test_section_reads_the_fake_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Devices, process owners (from the root's passwd), trimmed XML, shm, limits, interfaces,
    HCAs, the fabric manager's process and nvcc's answer come from the stand-in root and fakes.
    The GPUs report no fabric state (drivers before R550), so the fabric manager is looked for in /proc."""
    gpus = node_gpus("H100", fabric_state="N/A", fabric_status="N/A")
    gpus[0] = replace(gpus[0], procs=(Proc(4242, "/usr/bin/python3", 76000),))
    node = fake_node(tmp_path, gpus, Host(processes={4242: (1000, VLLM)}, hcas=("mlx5_0",), nvswitches=4,
                                          fabric_manager_pid=3131, cuda="12.8", shm_size="size=65536k"))
    data = run_section(node, monkeypatch)
    assert data["root"] == str(node.root)
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia7"} <= set(data["devices"])
    assert data["processes"]["4242"] == {"exists": True, "uid": 1000, "user": "alice", "cmdline": VLLM}
    assert "<supported_clocks>" not in data["smi"]["xml"]["out"] and data["smi"]["xml"]["out"].count("<gpu ") == 8
    assert data["smi"]["apps"]["out"].startswith(gpus[0].uuid + ", 4242, ")
    assert data["shm"]["mount"]["options"].endswith("size=65536k") and "Max locked memory" in data["limits"]
    assert data["infiniband"]["mlx5_0"]["ports"]["1"]["state"] == "4: ACTIVE" and data["net"]["eth0"]["operstate"] == "up"
    assert data["driver"] == {"nvidia_loaded": True, "uvm_loaded": True, "nvswitches": 4}
    assert data["fabric_manager"] is True
    assert data["toolchain"]["cuda_home"] == str(node.root / "usr/local/cuda")
    assert "release 12.8" in data["toolchain"]["nvcc_version_output"]


def test_root_is_ignored_unless_the_probe_environment_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test_root argument without the same ENVDOCTOR_TEST_ROOT in the probe's environment reads the real /."""
    node = fake_node(tmp_path, node_gpus("H100", 2))
    for name, value in node.env({}).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ENVDOCTOR_TEST_ROOT", str(tmp_path / "elsewhere"))
    data = node_probe.node_section({"test_root": str(node.root)}, None)
    assert data["root"] is None and "/dev/nvidia0" not in data["devices"]
    monkeypatch.delenv("ENVDOCTOR_TEST_ROOT")
    assert node_probe.node_section({"test_root": str(node.root)}, None)["root"] is None


def test_absent_tools_are_unknown_and_a_hung_nvidia_smi_is_killed(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """No nvidia-smi and no dmesg: nulls, no error. An nvidia-smi that hangs is killed at the deadline."""
    node = fake_node(tmp_path / "bare", [], Host(devices=()), smi=False)
    (node.bin / "dmesg").unlink()
    for name, value in node.env({}).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", str(node.bin))  # nothing but the (now empty) fakes folder
    data = node_probe.node_section({"test_root": str(node.root)}, None)
    assert data["nvidia_smi"] is None and data["smi"] == {} and data["xid"]["error"] == "no dmesg on PATH"
    hung = fake_node(tmp_path / "hung", node_gpus("H100", 1))
    write(hung.bin / "nvidia-smi", "#!/bin/sh\nsleep 30\n", 0o755)
    started = time.monotonic()
    data = run_section(hung, monkeypatch, timeout=1)
    assert time.monotonic() - started < 10
    assert data["smi"]["xml"]["status"] == 124 and "timed out" in data["smi"]["xml"]["err"]


def test_output_beyond_the_cap_is_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An nvidia-smi printing more than the cap: the first 4 MiB are kept and the cut is reported."""
    node = fake_node(tmp_path, node_gpus("H100", 1))
    write(node.bin / "nvidia-smi", "#!/bin/sh\nhead -c 6000000 /dev/zero | tr '\\0' x\n", 0o755)
    data = run_section(node, monkeypatch)
    xml = data["smi"]["xml"]
    assert xml["truncated"] is True and len(xml["out"]) == node_probe.OUTPUT_LIMIT and xml["status"] == 0


@pytest.mark.parametrize("fault", ["busy", "ecc", "uvm", "shm", "ifname", "hidden"])
def test_each_fault_fails_its_own_check_only(run_cli, tmp_path: Path, fault: str) -> None:
    """Busy GPU, ECC error, no /dev/nvidia-uvm, 64 MB /dev/shm, a wrong NCCL_SOCKET_IFNAME and
    CUDA_VISIBLE_DEVICES hiding GPUs each fail exactly the check that owns them, with a remedy."""
    gpus, host, env, extra = node_gpus("H200"), Host(), {}, ()
    if fault == "busy":
        node, owner, needle = busy_node(tmp_path), "gpu.free", "pid 4242 (user alice: " + VLLM[:40]
    else:
        owner, needle = {"ecc": ("gpu.health", "uncorrectable ECC"), "uvm": ("gpu.health", "/dev/nvidia-uvm is missing"),
                         "shm": ("host.collectives", "/dev/shm is 64 MiB"),
                         "ifname": ("host.collectives", "NCCL_SOCKET_IFNAME='eth9'"),
                         "hidden": ("gpu.free", "sees 2")}[fault]
        if fault == "ecc":
            gpus[5] = replace(gpus[5], volatile_dram_uncorrectable=2)
        if fault == "uvm":
            host = Host(devices=("nvidiactl", "nvidia-modeset"), uvm_loaded=False)
        if fault == "shm":
            host = Host(shm_size="size=65536k")
        if fault == "ifname":
            env = {"NCCL_SOCKET_IFNAME": "eth9"}
        if fault == "hidden":
            env, extra = {"CUDA_VISIBLE_DEVICES": "0,1"}, ("--gpus", "8")
        node = fake_node(tmp_path, gpus, host)
    status, results = check(run_cli, node, *extra, env=env)
    assert status == 1
    assert results[owner]["status"] == "fail" and needle in results[owner]["message"], results[owner]
    assert results[owner]["remedy"]["automatic"] is False and results[owner]["fix"]
    assert results[owner]["why"]
    others = {c: results[c]["status"] for c in NODE_CHECKS if c != owner}
    assert "fail" not in others.values(), others


def test_no_nvcc_with_flashinfer_fails_the_toolchain(run_cli, tmp_path: Path, flashinfer_venv: Path) -> None:
    """flashinfer-python (real, from PyPI) in the venv and no nvcc anywhere: python.jit-toolchain fails alone."""
    node = fake_node(tmp_path, node_gpus("B200"))
    status, results = check(run_cli, node, "--venv", str(flashinfer_venv))
    toolchain = results["python.jit-toolchain"]
    assert status == 1 and toolchain["status"] == "fail"
    assert "flashinfer-python 0.5.0 (no flashinfer-jit-cache) compiles at run time: no nvcc" in toolchain["message"]
    assert "CUDA_HOME" in toolchain["fix"]
    assert {results[c]["status"] for c in NODE_CHECKS if c != "python.jit-toolchain"} == {"pass"}


def test_healthy_node_passes_and_the_stage_is_judged(run_cli, tmp_path: Path, flashinfer_venv: Path) -> None:
    """8x B200, idle, fabric registered, a CUDA 12.8 toolkit and big /dev/shm: the four pass, exit 0;
    the waiver of a failing one reports `waived` and keeps the exit status 0."""
    node = fake_node(tmp_path, node_gpus("B200"), Host(cuda="12.8", hcas=("mlx5_0", "mlx5_1"), nvswitches=4,
                                                       fabric_manager_pid=3131), outputs_of(node_gpus("B200"), nics=2))
    status, results = check(run_cli, node, "--venv", str(flashinfer_venv), "--gpus", "8")
    assert status == 0 and {results[c]["status"] for c in NODE_CHECKS} == {"pass"}, results
    assert results["gpu.free"]["details"]["gpu"]["topology"]["nvlink_all_to_all"] is True
    busy = busy_node(tmp_path / "busy")
    status, results = check(run_cli, busy, "--skip", "gpu.free=known: the old server drains tonight")
    assert status == 0 and results["gpu.free"]["status"] == "waived"


def test_this_cpu_only_machine_skips_the_node_checks(run_cli) -> None:
    """On this machine (no GPU, none expected) the four checks are skipped, never failed."""
    status, results = check(run_cli, None)
    assert status == 0 and {results[c]["status"] for c in NODE_CHECKS} == {"skipped"}


def test_remote_host_never_gets_the_stand_in_root(run_cli, sshd, tmp_path: Path) -> None:
    """Over the real sshd the controller's ENVDOCTOR_TEST_ROOT is not sent: the remote probe reads
    its real / (no GPU: skipped), while the same environment makes the local probe read the fake."""
    node = fake_node(tmp_path, node_gpus("H100"), Host(devices=("nvidiactl",)))
    args = ("--only", "gpu.health", "--format", "json")
    remote = run_cli("check", "ct200", "--ssh-config", str(sshd.ssh_config), *args, env=node.env())
    result = next(r for r in json.loads(remote.stdout)["hosts"][0]["results"] if r["id"] == "gpu.health")
    assert remote.exit_status == 0 and result["status"] == "skipped", result
    local = run_cli("check", "local", *args, env=node.env())
    result = next(r for r in json.loads(local.stdout)["hosts"][0]["results"] if r["id"] == "gpu.health")
    assert local.exit_status == 1 and "/dev/nvidia-uvm is missing" in result["message"]
    assert result["details"]["gpu"]["node_root"] == str(node.root)
