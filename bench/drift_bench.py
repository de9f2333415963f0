"""API-drift cost: files parsed, wall time on the host and on the controller, re-check time.

    python bench/drift_bench.py [VENV...]

Without VENV, builds two venvs in a temp folder (see tests/drift_sources.py): speculators
0.3.0 (--no-deps) beside vLLM 0.16.0's sources (about 30 MB of downloads), and sglang 0.5.3
beside flashinfer-python 0.7.4, the wheels' .py files laid out (about 100 MB). For each venv: a first check
with the cache cleared, then a re-check of the unchanged venv, through the real probe
program on this machine (the local transport: the same program an SSH host runs).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from envdoctor.drift.judge import judge  # noqa: E402  (after the path tweak)
from envdoctor.drift.request import SECTION, drift_request  # noqa: E402
from envdoctor.probe.program import run_probe  # noqa: E402
from envdoctor.transport.local import LocalTransport  # noqa: E402


def build_default(root: Path) -> list[Path]:
    import venv as venv_module

    from tests.conftest import make_venv
    from tests.drift_sources import (download_sdist, download_wheel, install_sdist_sources, install_wheel_sources,
                                     site_packages)

    spec = make_venv(root / "spec-vllm-0.16.0")
    wheel = download_wheel("speculators==0.3.0", root / "dl")
    subprocess.run([str(spec / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
    install_sdist_sources(download_sdist("vllm", "0.16.0", root / "dl"), site_packages(spec), "vllm", "0.16.0")
    sglang = root / "sglang-flashinfer"
    venv_module.EnvBuilder(with_pip=False).create(sglang)
    for requirement in ("sglang==0.5.3", "flashinfer-python==0.7.4"):
        install_wheel_sources(download_wheel(requirement, root / "dl"), site_packages(sglang))
    return [spec, sglang]


async def one_run(venv: Path) -> tuple[dict, float, float]:
    request = {SECTION: drift_request(str(venv))}
    started = time.perf_counter()
    async with LocalTransport("bench") as transport:
        output = await run_probe(transport, request, python_candidates=[str(venv / "bin" / "python")])
    total = time.perf_counter() - started
    data = output.sections[SECTION]
    started = time.perf_counter()
    pairs = judge(data)
    controller = time.perf_counter() - started
    return {"data": data, "pairs": pairs}, total, controller


def bench(venv: Path) -> None:
    shutil.rmtree(venv / ".envdoctor", ignore_errors=True)
    first, first_total, first_controller = asyncio.run(one_run(venv))
    again, again_total, again_controller = asyncio.run(one_run(venv))
    data = first["data"]
    print(f"{venv}")
    for pair in first["pairs"]:
        print(f"  {pair.headline()} ({pair.uses} uses)")
    print(f"  files parsed on the host:      {data['files_parsed']} ({data['bytes_read'] / 1e6:.1f} MB read)")
    print(f"  first check, host section:     {data['host_seconds']:.3f} s wall, {data['host_cpu_seconds']:.3f} s CPU"
          f"   (probe command end to end {first_total:.3f} s)")
    print(f"  first check, controller judge: {first_controller:.3f} s")
    print(f"  re-check, host section:        {again['data']['host_seconds']:.3f} s wall, "
          f"{again['data']['host_cpu_seconds']:.3f} s CPU   (cache {again['data']['cache']}; "
          f"probe command end to end {again_total:.3f} s)")
    print(f"  re-check, controller judge:    {again_controller:.3f} s")


def main() -> None:
    venvs = [Path(p) for p in sys.argv[1:]]
    if not venvs:
        root = Path(tempfile.mkdtemp(prefix="drift-bench-"))
        venvs = build_default(root)
    for venv in venvs:
        bench(venv)


if __name__ == "__main__":
    main()
