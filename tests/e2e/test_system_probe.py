"""The probe's system section on this machine: the job's environment variables with secrets
masked on the host (logsafe's own patterns, sent in the request), and the OS, C library and
limits agreeing with what the system itself says."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
from pathlib import Path

import pytest

from envdoctor.compare.request import system_request
from envdoctor.inventory import HostSpec
from envdoctor.probe.host.env import system as system

TOKEN = "hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7"


def section(**args) -> dict:
    return system.system_section({**system_request(HostSpec("h", None)), **args}, None)


def test_secrets_are_masked_on_the_host_with_a_fingerprint(monkeypatch):
    """HF_TOKEN (a secret name) and a URL's password (a secret value) never leave the host; a
    fingerprint tells two secrets apart; other job variables come as they are."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_ENDPOINT", "https://user:s3cret@hub.internal/")
    monkeypatch.setenv("NCCL_IB_HCA", "mlx5_0,mlx5_1")
    found = section()["environment"]
    shown = found["vars"]
    assert TOKEN not in str(found) and "s3cret" not in str(found)
    assert shown["HF_TOKEN"].startswith("*** (fingerprint ") and shown["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
    assert shown["HF_ENDPOINT"].startswith("https://***@hub.internal/ (fingerprint ")
    assert sorted(found["masked"]) == ["HF_ENDPOINT", "HF_TOKEN"]
    monkeypatch.setenv("HF_TOKEN", TOKEN[:-1] + "x")
    assert section()["environment"]["vars"]["HF_TOKEN"] != shown["HF_TOKEN"]


def test_only_job_variables_are_read_and_never_the_probes_own(monkeypatch):
    """Variables outside the job's prefixes (HOME, a password elsewhere) and the wrapper's
    ENVDOCTOR_* are not part of the answer."""
    monkeypatch.setenv("DB_PASSWORD", "x")
    monkeypatch.setenv("ENVDOCTOR_PATH", "/usr/bin")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    shown = section()["environment"]["vars"]
    assert "DB_PASSWORD" not in shown and "ENVDOCTOR_PATH" not in shown and "HOME" not in shown
    assert shown["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_os_libc_and_limits_agree_with_the_system():
    """PRETTY_NAME as /etc/os-release has it, glibc as ldd reports it, the kernel as uname, the
    open-files limit as this process has it."""
    found = section()
    release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    assert found["os"]["pretty_name"] == release["PRETTY_NAME"].strip('"')
    ldd = subprocess.run(["ldd", "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    assert found["libc"]["name"] == "glibc" and ldd.split()[-1] == found["libc"]["version"]
    assert found["kernel"] == platform.release() == subprocess.run(["uname", "-r"], capture_output=True,
                                                                     text=True, check=True).stdout.strip()
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert found["limits"]["nofile"][0] == (None if soft == resource.RLIM_INFINITY else soft)
    assert found["cpu"]["logical"] == os.cpu_count() and found["memory"]["total"] > 0
    assert "topology" not in found


def test_topology_is_nvidia_smis_text_when_asked(tmp_path, monkeypatch):
    """With topology asked for, `nvidia-smi topo -m` runs and its text is kept; without
    nvidia-smi the section says so."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert section(topology=True)["topology"] == {"text": None, "error": "nvidia-smi is not on PATH"}
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$1 $2" = "topo -m" ] || exit 3\nprintf "\\tGPU0\\tGPU1\\nGPU0\\t X \\tNV18\\n"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert section(topology=True)["topology"] == {"text": "\tGPU0\tGPU1\nGPU0\t X \tNV18", "error": None}


@pytest.mark.parametrize("text, version", [('{"cuda": {"name": "CUDA SDK", "version": "12.8.1"}}', "12.8.1")])
def test_the_cuda_toolkit_version_is_read_from_its_file(tmp_path, monkeypatch, text, version):
    """CUDA_HOME's version.json names the toolkit (as nvcc --version would)."""
    (tmp_path / "version.json").write_text(text)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert section()["cuda_toolkit"]["version"] == version
