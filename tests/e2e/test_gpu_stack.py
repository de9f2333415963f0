"""gpu.stack end to end: a real wheel's CUDA extensions (torchao 0.18.0 from PyPI, 3.4 MB,
two extension modules with .nv_fatbin sections) read over the loopback sshd, in a real venv
beside a torch whose libraries are compiled here; binutils' nm and readelf are the oracles
for what the files hold."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import venv as venv_module
import zipfile
from pathlib import Path

import pytest

from tests.elf_mutations import fuzz
from tests.gpu_layouts import compile_so, fake_driver_root, fake_nvidia_smi, have_toolchain

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not (have_toolchain() and shutil.which("nm") and shutil.which("readelf")),
                                 reason="needs g++, objcopy, nm and readelf")]

WHEEL = "torchao==0.18.0"
MXFP8 = "torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so"
CUTLASS = "torchao/_C_cutlass_90a.abi3.so"
TORCH_LIBS = ("libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so", "libtorch_python.so")


@pytest.fixture(scope="session")
def torchao_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torchao 0.18.0's wheel, downloaded once per session."""
    folder = tmp_path_factory.mktemp("gpu-wheels")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--platform", "manylinux_2_28_x86_64", "-d", str(folder), WHEEL], check=True)
    return folder


def undefined(path: Path) -> set[str]:
    """The undefined dynamic symbols of a file, as binutils' nm lists them."""
    out = subprocess.run(["nm", "-D", "--undefined-only", "--format=posix", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return {line.split()[0].split("@")[0] for line in out.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def ao_venv(tmp_path_factory: pytest.TempPathFactory, torchao_wheel: Path) -> tuple[Path, str]:
    """A venv with torchao installed by pip, and a torch 2.9.1+cu128 layout whose libtorch_cpu
    exports every aoti_torch_* function torchao uses but one: (venv, the one left out)."""
    venv = tmp_path_factory.mktemp("gpu") / "ao venv"
    venv_module.EnvBuilder(with_pip=False, clear=True).create(venv)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", "--find-links", str(torchao_wheel), WHEEL], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    needed = sorted(s for f in (MXFP8, CUTLASS) for s in undefined(site / f) if s.startswith("aoti_torch_"))
    assert len(needed) > 20, needed  # torchao 0.18 links torch's stable C ABI
    dropped = needed[0]
    lib = site / "torch" / "lib"
    lib.mkdir(parents=True)
    (site / "torch" / "version.py").write_text("from typing import Optional\n__version__ = '2.9.1+cu128'\n"
                                                 "cuda: Optional[str] = '12.8'\n")
    c10 = compile_so(lib / "libc10.so", "int c10_marker(void) { return 0; }", lang="c")
    body = "".join(f"void {name}(void) {{}}\n" for name in sorted(set(needed)) if name != dropped)
    cpu = compile_so(lib / "libtorch_cpu.so", body, libs=[c10], lang="c")
    for name in ("libc10_cuda.so", "libtorch_cuda.so", "libtorch_python.so"):
        compile_so(lib / name, f"int marker_{name.split('.')[0]}(void) {{ return 0; }}", libs=[c10], lang="c")
    compile_so(lib / "libtorch.so", "int torch_marker(void) { return 0; }", libs=[cpu, c10], lang="c")
    return venv, dropped


def gpu_result(data: dict) -> dict:
    return next(r for r in data["hosts"][0]["results"] if r["id"] == "gpu.stack")


def check(run_cli, sshd, venv: Path, *extra: str, env: dict[str, str] | None = None, host: str = "ct200"):
    args = ["check", host, "--venv", str(venv), "--only", "gpu.stack", "--format", "json", *extra]
    if host != "local":
        args[2:2] = ["--ssh-config", str(sshd.ssh_config)]
    res = run_cli(*args, env=env)
    assert "Traceback" not in res.stderr, res.stderr
    return res, gpu_result(json.loads(res.stdout))


def test_real_wheel_over_sshd_abi_and_fatbin_layout(run_cli, sshd, ao_venv) -> None:
    """Over the real sshd, without a GPU: the kernel part is skipped with its reason, the ABI
    part fails naming the one aoti_torch_* function the installed torch lacks, and the
    archs read from the real .nv_fatbin agree with the file's own strings and section."""
    venv, dropped = ao_venv
    res, result = check(run_cli, sshd, venv)
    assert res.exit_status == 1 and result["status"] == "fail"
    assert dropped in result["message"] and "torchao 0.18.0" in result["message"]
    assert "driver and kernel checks skipped" in result["details"]["skipped"]
    site = next((venv / "lib").glob("python3*/site-packages"))
    binaries = {b["relpath"]: b for b in result["details"]["gpu"]["binaries"]}
    for relpath in (MXFP8, CUTLASS):
        expected = [dropped] if dropped in undefined(site / relpath) else []
        assert binaries[relpath]["missing_symbols"] == expected
        sections = subprocess.run(["readelf", "-S", "-W", str(site / relpath)], capture_output=True, text=True,
                                  check=True).stdout
        assert ".nv_fatbin" in sections
    # The fatbin layout facts on the real file: kind, arch at offset 28, 0x100000 for "a".
    assert binaries[CUTLASS]["sass"] == ["sm_90a"] and binaries[CUTLASS]["ptx"] == []
    assert binaries[MXFP8]["sass"] == ["sm_100"] and binaries[MXFP8]["ptx"] == ["compute_120"]
    strings = subprocess.run(["strings", "-n", "8", str(site / MXFP8)], capture_output=True, text=True).stdout
    assert "-arch sm_100 " in strings and re.search(r"\.compute_120\.", strings)
    from envdoctor.probe.host.gpu import stack as gpu_stack

    cache = Path(gpu_stack.gpu_cache_folder(str(venv))) / gpu_stack.GPU_CACHE_NAME  # the user's cache, not the venv
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600


def test_expected_gpus_without_a_gpu_fail_the_driver_part(run_cli, sshd, ao_venv) -> None:
    """With --gpus 1 on a host without a GPU, gpu.stack fails on the driver part too."""
    venv, _dropped = ao_venv
    res, result = check(run_cli, sshd, venv, "--gpus", "1")
    assert result["status"] == "fail" and "skipped" not in result["details"]
    parts = {(f["level"], f["part"]) for f in result["details"]["findings"]}
    assert ("fail", "driver") in parts and ("fail", "abi") in parts


@pytest.mark.parametrize("gpu, cc, runnable", [
    ("NVIDIA H100 80GB HBM3", "9.0", {CUTLASS: "yes", MXFP8: "no"}),
    ("NVIDIA B300 SXM6 AC", "10.3", {CUTLASS: "no", MXFP8: "yes"}),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", {CUTLASS: "no", MXFP8: "ptx"}),
])
def test_fake_driver_and_smi_decide_runnability(run_cli, sshd, ao_venv, tmp_path: Path, gpu: str, cc: str,
                                                runnable: dict[str, str]) -> None:
    """A fake /sys root and nvidia-smi on PATH (local host): which real torchao kernels each
    GPU can run (sm_90a only on 9.0; sm_100 on 10.x; compute_120 PTX by JIT on 12.0)."""
    venv, _dropped = ao_venv
    root = fake_driver_root(tmp_path / "root", "580.95.05")
    smi = fake_nvidia_smi(tmp_path / "bin", [(gpu, cc, "580.95.05")])
    env = {"ENVDOCTOR_SYSFS_ROOT": str(root), "PATH": f"{smi.parent}:{os.environ['PATH']}"}
    _res, result = check(run_cli, sshd, venv, env=env, host="local")
    doc = result["details"]["gpu"]
    assert doc["driver"]["version"] == "580.95.05" and doc["driver"]["source"].startswith(str(root))
    assert doc["gpus"] == [{"index": 0, "name": gpu, "compute_capability": cc,
                            "compute_capability_source": "nvidia-smi"}]
    assert {b["relpath"]: b["runnable"]["0"] for b in doc["binaries"] if b["role"] != "torch"} == runnable


def test_old_driver_fails_and_minor_compatible_warns(run_cli, sshd, ao_venv, tmp_path: Path) -> None:
    """torch CUDA 12.8 on an A100: driver 520 fails (below 12.x's floor), 550 warns; torchao's
    libcudart.so.13 (CUDA 13) fails on both (13.x needs 580)."""
    venv, _dropped = ao_venv
    smi = fake_nvidia_smi(tmp_path / "bin", [("NVIDIA A100-SXM4-80GB", "8.0", "x")])
    seen = {}
    for version in ("520.61.05", "550.54.15"):
        root = fake_driver_root(tmp_path / version, version)
        env = {"ENVDOCTOR_SYSFS_ROOT": str(root), "PATH": f"{smi.parent}:{os.environ['PATH']}"}
        _res, result = check(run_cli, sshd, venv, env=env, host="local")
        driver = [f for f in result["details"]["findings"] if f["part"] == "driver"]
        seen[version] = {f["level"] for f in driver if "torch 2.9.1+cu128" in f["message"]}
        assert any(f["level"] == "fail" and "libcudart.so.13" in f["message"] for f in driver)
    assert seen == {"520.61.05": {"fail"}, "550.54.15": {"warn"}}


def test_fuzzed_wheel_extensions_cost_bounded_time_and_memory(torchao_wheel: Path, tmp_path: Path) -> None:
    """300 seeded mutations of torchao 0.18.0's real extension modules (nvcc's .nv_fatbin, the
    wheel's .gnu.hash and version tables): each is read within the ELF budgets' time and
    memory bounds, and what goes wrong is an error the section reports for that binary."""
    sources = []
    with zipfile.ZipFile(next(torchao_wheel.glob("*.whl"))) as wheel:
        for name in (MXFP8, CUTLASS):
            target = tmp_path / Path(name).name
            target.write_bytes(wheel.read(name))
            sources.append(target)
    work = tmp_path / "cases"
    work.mkdir()
    outcomes = fuzz(sources, work, random.Random(20261202), 300)
    assert outcomes.get("read") and outcomes.get("error"), outcomes
