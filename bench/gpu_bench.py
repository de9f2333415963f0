"""Benchmark for the gpu.stack check (issue 17) on real wheels.

Venv layouts are unpacked from real PyPI wheels (only the files the check reads: torch's
version.py and torch/lib/lib{c10,c10_cuda,torch,torch_cpu,torch_cuda,torch_python}.so, and
every .so with the .dist-info of the extension wheels), once, into
/tmp/envdoctor-bench/gpu/. The default set is torch 2.9.1 (+cu128, ~900 MB wheel, its
libtorch_cuda.so is 1.0 GB) with vllm 0.11.0 (~440 MB wheel, _C.abi3.so 369 MB, seven
extension modules). It measures, in turns, best of --repeat:

- the probe section alone, in this process: cold (no envdoctor cache; the page cache is
  warm, since dropping it would slow everyone else on the machine) and the re-check;
- the whole probe through the local transport (interpreter start, program sent, JSON read)
  for the gpu-stack section, cold and re-check, beside the same probe with no section (the
  fixed cost of starting the host's interpreter, which every check pays once);
- `envdoctor check local --only gpu.stack` through the CLI, as a user runs it.

Usage: python bench/gpu_bench.py [--repeat 3] [--torch 2.9.1] [--ext vllm==0.11.0 ...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envdoctor.operations.gather import build_request  # noqa: E402  # after the sys.path line above
from envdoctor.inventory import HostSpec  # noqa: E402
from envdoctor.probe.host.gpu import stack as gpu_stack  # noqa: E402
from envdoctor.probe.program import run_probe  # noqa: E402
from envdoctor.transport.local import LocalTransport  # noqa: E402

BENCH = Path("/tmp/envdoctor-bench/gpu")
TORCH_FILES = ("torch/version.py", *(f"torch/lib/{n}" for n in gpu_stack.TORCH_LIBS))


def download(requirement: str) -> Path:
    wheels = BENCH / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    name = requirement.split("==")[0].replace("-", "_")
    version = requirement.split("==")[1] if "==" in requirement else ""
    found = sorted(wheels.glob(f"{name}-{version}*.whl"))
    if not found:
        print(f"downloading {requirement} (once) ...", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
                        "--platform", "manylinux1_x86_64", "-d", str(wheels), requirement], check=True)
        found = sorted(wheels.glob(f"{name}-{version}*.whl"))
    return found[-1]


def unpack(wheel: Path, site: Path, wanted) -> list[str]:
    names = []
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if wanted(info.filename):
                target = site / info.filename
                if not target.exists() or target.stat().st_size != info.file_size:
                    archive.extract(info, site)
                names.append(info.filename)
    return names


def build_layout(torch: str, extensions: list[str]) -> Path:
    venv = BENCH / ("venv-" + "-".join([f"torch{torch}", *(e.replace("==", "") for e in extensions)]))
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    unpack(download(f"torch=={torch}"), site, lambda n: n in TORCH_FILES)
    for requirement in extensions:
        unpack(download(requirement), site, lambda n: n.endswith(".so") or ".dist-info/" in n)
    return venv


def best(runs: list[float]) -> str:
    return f"{min(runs) * 1000:8.1f} ms"


def clear_cache(venv: Path) -> None:
    shutil.rmtree(venv / ".envdoctor", ignore_errors=True)


def section(venv: Path) -> float:
    start = time.perf_counter()
    gpu_stack.gpu_stack_section({"prefix": str(venv)}, None)
    return time.perf_counter() - start


async def through_probe(venv: Path, sections: tuple[str, ...] = ("gpu-stack",)) -> float:
    spec = HostSpec("local", None, venv=str(venv))
    start = time.perf_counter()
    output = await run_probe(LocalTransport(), build_request(spec, sections))
    elapsed = time.perf_counter() - start
    assert set(output.sections) == set(sections), output.errors
    return elapsed


def through_cli(venv: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "envdoctor", "check", "local", "--venv", str(venv), "--only", "gpu.stack",
                    "--format", "json"], capture_output=True, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--torch", default="2.9.1")
    parser.add_argument("--ext", action="append", default=None, help="extension wheels (default vllm==0.11.0)")
    args = parser.parse_args()
    venv = build_layout(args.torch, args.ext or ["vllm==0.11.0"])
    site = venv / "lib" / "python3.11" / "site-packages"
    sizes = {str(p.relative_to(site)): p.stat().st_size for p in site.rglob("*.so")}
    print(f"layout {venv}: {len(sizes)} shared objects, {sum(sizes.values()) / 1e9:.2f} GB")
    for name, size in sorted(sizes.items(), key=lambda item: -item[1])[:6]:
        print(f"  {size / 1e6:8.1f} MB  {name}")
    result = gpu_stack.gpu_stack_section({"prefix": str(venv)}, None)  # warm the page cache
    for item in result["binaries"]:
        fatbin = item.get("fatbin") or {}
        print(f"  {item['relpath']}: {fatbin.get('containers', 0)} containers, {fatbin.get('entries', 0)} entries, "
              f"missing torch symbols: {item.get('missing_count', '-')} {item.get('missing', '')}")
    figures: dict[str, list[float]] = {k: [] for k in ("section cold", "section re-check", "probe, no section",
                                                       "probe cold", "probe re-check", "cli cold", "cli re-check")}
    for _ in range(args.repeat):
        clear_cache(venv)
        figures["section cold"].append(section(venv))
        figures["section re-check"].append(section(venv))
        figures["probe, no section"].append(asyncio.run(through_probe(venv, ())))
        clear_cache(venv)
        figures["probe cold"].append(asyncio.run(through_probe(venv)))
        figures["probe re-check"].append(asyncio.run(through_probe(venv)))
        clear_cache(venv)
        figures["cli cold"].append(through_cli(venv))
        figures["cli re-check"].append(through_cli(venv))
    print(f"best of {args.repeat} (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores):")
    for name, runs in figures.items():
        print(f"  {name:18s} {best(runs)}")
    print("targets: under 500 ms per venv cold, under 50 ms re-check (the section's own time)")


if __name__ == "__main__":
    main()
