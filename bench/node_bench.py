"""Benchmark: what the "node" probe section (gpu.free, gpu.health, host.collectives,
python.jit-toolchain) adds to a check, on a fake node with 8 GPUs.

The node is tests/node_layouts.py's: a stand-in root and an nvidia-smi that prints the
real-format samples of tests/node_samples.py (8x H100, `-q -x` with its supported-clocks
tables, --query-compute-apps with a busy GPU, `topo -m` with 4 NICs), a dmesg with Xid
lines, 4 NVSwitches with a fabric manager process, and a CUDA toolkit whose nvcc answers
--version. A real nvidia-smi costs more than `cat` (a real H100 node answers `-q -x` in
0.2-2 s, mostly NVML start-up, less with persistence mode on); that part is the driver's and
is not measured here. Measured, best of --repeat:

- the section alone, in this process (its commands start together; their wall time counts);
- the whole probe through the local transport with the sections every check reads
  ("host", "venvs"), with and without "node": the difference is what the section adds;
- the controller: parsing the answer and judging the four checks.

Usage: python bench/node_bench.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envdoctor.checks import node as node_checks  # noqa: E402  # after the sys.path line above
from envdoctor.engine.facts import HostFacts  # noqa: E402
from envdoctor.engine.graph import CheckContext  # noqa: E402
from envdoctor.inventory import HostSpec  # noqa: E402
from envdoctor.operations.gather import build_request  # noqa: E402
from envdoctor.probe.host.node import section as node_probe  # noqa: E402
from envdoctor.probe.program import run_probe  # noqa: E402
from envdoctor.transport.local import LocalTransport  # noqa: E402
from tests.node_layouts import fake_node  # noqa: E402
from tests.node_samples import Host, Proc, node_gpus, outputs_of, xid_line  # noqa: E402

BENCH = Path("/tmp/envdoctor-bench/node")
TARGET_MS = 150


def build() -> object:
    gpus = node_gpus("H100")
    gpus[0] = replace(gpus[0], procs=(Proc(4242, "/usr/bin/python3", 76000),))
    dmesg = "".join(xid_line("18", 13, "Graphics SM Warp Exception", 100.0 + i) for i in range(20))
    host = Host(processes={4242: (1000, "python3 -m vllm.entrypoints.openai.api_server --tensor-parallel-size 8")},
                hcas=("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"), nvswitches=4, fabric_manager_pid=3131, cuda="12.8")
    return fake_node(BENCH, gpus, host, outputs_of(gpus, nics=4, dmesg=dmesg))


def best_ms(runs: list[float]) -> float:
    return min(runs) * 1000


def section_once() -> float:
    start = time.perf_counter()
    node_probe.node_section({"test_root": os.environ["ENVDOCTOR_TEST_ROOT"]}, None)
    return time.perf_counter() - start


async def probe_once(sections: tuple[str, ...]) -> tuple[float, object]:
    spec = HostSpec("local", None)
    start = time.perf_counter()
    output = await run_probe(LocalTransport(), build_request(spec, sections))
    elapsed = time.perf_counter() - start
    assert set(output.sections) == set(sections), output.errors
    return elapsed, output


def judge_once(output: object) -> float:
    facts = HostFacts.from_probe(output)  # type: ignore[arg-type]  # a ProbeOutput
    ctx = CheckContext(HostSpec("local", None, gpus=8), facts)
    start = time.perf_counter()
    for check in (node_checks.gpu_free, node_checks.gpu_health, node_checks.collectives, node_checks.jit_toolchain):
        check(ctx)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    node = build()
    os.environ.update(node.env())  # type: ignore[attr-defined]  # the probe inherits this process's environment
    base, with_node, alone, judged = [], [], [], []
    output = None
    section_once()  # warm the page cache and the probe's compile cache
    asyncio.run(probe_once(("host", "venvs", "node")))
    for _ in range(args.repeat):
        alone.append(section_once())
        base.append(asyncio.run(probe_once(("host", "venvs")))[0])
        elapsed, output = asyncio.run(probe_once(("host", "venvs", "node")))
        with_node.append(elapsed)
        judged.append(judge_once(output))
    added = best_ms(with_node) - best_ms(base)
    print(f"fake node: 8x H100 at {BENCH} (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    print(f"best of {args.repeat}:")
    print(f"  node section alone, in process       {best_ms(alone):8.1f} ms")
    print(f"  probe host+venvs                     {best_ms(base):8.1f} ms")
    print(f"  probe host+venvs+node                {best_ms(with_node):8.1f} ms")
    print(f"  controller: parse + judge 4 checks   {best_ms(judged):8.1f} ms")
    # Two minima of a loaded machine can differ by more than the section costs: the larger of
    # the probe's difference and the section's own time is the figure reported.
    host_side = max(added, best_ms(alone))
    total = host_side + best_ms(judged)
    print(f"  probe difference (with - without)    {added:8.1f} ms")
    print(f"added to a check by the node section:  {total:8.1f} ms (host {host_side:.1f} + controller "
          f"{best_ms(judged):.1f}); target under {TARGET_MS} ms: {'met' if total < TARGET_MS else 'NOT met'}")


if __name__ == "__main__":
    main()
