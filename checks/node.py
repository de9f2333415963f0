"""Will the job start on this node? GPUs free and healthy, collectives ready, JIT toolchain present.

Four checks over the probe's "node" section (one run of nvidia-smi -q -x, --query-compute-apps
and topo -m, the device nodes, /dev/shm, limits, /sys/class/net and /sys/class/infiniband,
the NCCL settings and the compiler toolchain), judged against what each stage on the host
asks for (GPU count, memory share, its own CUDA_VISIBLE_DEVICES and NCCL_* settings). On a
host without NVIDIA GPUs, where none are expected, each check is skipped. Every remedy is
shown, never run: they stop processes, reset GPUs or change the system.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from envdoctor.checks._common import findings_result, target_env, target_python
from envdoctor.engine.graph import CheckContext, check
from envdoctor.engine.results import CheckResult, errored, skipped

if TYPE_CHECKING:
    from envdoctor.gpu.node import NodeFacts
    from envdoctor.gpu.verdicts import Finding

SECTION = "node"
NO_GPU = "no NVIDIA GPU, driver or device node on this host, and none expected (gpus = N / --gpus N)"


def node_of(ctx: CheckContext) -> tuple[NodeFacts | None, CheckResult | None]:
    """The section as values, or the result that says why it cannot be judged."""
    from envdoctor.gpu.node import node_facts

    if unread := ctx.section_failed(SECTION, "the probe could not read the node's state"):
        return None, unread
    raw = ctx.facts.section(SECTION)
    if not isinstance(raw, dict):
        return None, errored("the probe returned no node facts")
    try:
        return node_facts(raw), None
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # a host's answer is untrusted input
        return None, errored(f"the probe's node facts are malformed ({type(exc).__name__}: {exc})")


@check(
    "gpu.free",
    facts=(SECTION,),
    title="GPUs free for the job: the ones it sees, and their memory",
    requires=["host.python"],
    why="vLLM and SGLang refuse to start when another process holds the GPU (\"Free memory on device ... is less "
        "than desired GPU memory utilization\"), and a job that sees fewer GPUs than it starts on never starts",
)
def gpu_free(ctx: CheckContext) -> CheckResult:
    from envdoctor.gpu.free_rules import judge_free
    from envdoctor.gpu.job import job_asks
    from envdoctor.gpu.node_document import gpu_node_document

    node, problem = node_of(ctx)
    if node is None:
        return problem  # type: ignore[return-value]  # node_of returns one of the two
    if not node.gpus:
        reason = node.log_error or ("no nvidia-smi on PATH" if not node.smi_path else "it listed none")
        why = NO_GPU if not node.has_nvidia and not ctx.spec.gpus else \
            f"no GPU state from nvidia-smi ({reason}): free memory unknown"
        return skipped(why)
    views = judge_free(node, job_asks(ctx.spec.stage_commands, ctx.spec.gpus), ctx.spec.gpus)
    findings = [f for v in views for f in v.findings]
    jobs = [{"stage": v.ask.label, "gpus_needed": v.needed, "gpus_needed_from": v.ask.gpus_from or None,
             "memory_fraction": v.ask.fraction, "memory_fraction_from": v.ask.fraction_from,
             "visible": list(v.visible.indices), "uses": list(v.used)} for v in views]
    used = sorted({i for v in views for i in v.used})
    free = ", ".join(f"GPU {i} {node.gpus[i].free_mib / 1024:.0f}/{node.gpus[i].total_mib / 1024:.0f} GiB free"
                     for i in used if node.gpus[i].free_mib is not None and node.gpus[i].total_mib)
    summary = f"the job gets {len(used)} GPU(s) with the memory it asks for" + (f" ({free})" if free else "")
    return findings_result(findings, summary, {"gpu": gpu_node_document(node, views[0].visible), "jobs": jobs})


@check(
    "gpu.health",
    facts=(SECTION,),
    title="GPUs healthy and CUDA able to initialise",
    requires=["host.python"],
    why="without /dev/nvidia-uvm or a registered NVSwitch fabric CUDA cannot initialise (error 802) although "
        "nvidia-smi works; a GPU with uncorrectable ECC errors, a pending row remap or fields in ERR! crashes the "
        "job or corrupts its results",
)
def gpu_health(ctx: CheckContext) -> CheckResult:
    from envdoctor.gpu.health_rules import judge_health
    from envdoctor.gpu.job import job_asks
    from envdoctor.gpu.node_document import gpu_node_document
    from envdoctor.gpu.visible import visible_gpus

    node, problem = node_of(ctx)
    if node is None:
        return problem  # type: ignore[return-value]
    if not node.has_nvidia and not node.lost:
        return skipped(NO_GPU) if not ctx.spec.gpus else skipped("no NVIDIA driver answers (host.gpu says why)")
    asks = job_asks(ctx.spec.stage_commands, ctx.spec.gpus)
    views = [visible_gpus(node.gpus, ask.env, node.env) for ask in asks]
    visible = sorted({i for v in views for i in v.indices})
    findings = judge_health(node, visible, ctx.spec.gpus, mig_named=any(v.mig for v in views))
    names = sorted({g.name for g in node.gpus})
    summary = (f"{len(node.gpus)} GPU(s) ({', '.join(names)}): no ECC, remapping, reset or fabric problem; device "
               "nodes present" if node.gpus else "device nodes present")
    return findings_result(findings, summary, {"gpu": gpu_node_document(node, views[0])})


@check(
    "host.collectives",
    facts=(SECTION,),
    title="Collective communication ready: /dev/shm, limits, NCCL settings and version, GPU links",
    requires=["host.python"],
    why="NCCL fails at start or hangs on a 64 MB /dev/shm, a locked-memory limit too low for RDMA, an "
        "NCCL_SOCKET_IFNAME or NCCL_IB_HCA naming devices that do not exist, an NCCL older than torch's, or GPUs "
        "whose NVLinks are down",
)
def collectives(ctx: CheckContext) -> CheckResult:
    from envdoctor.gpu import collective_rules as rules
    from envdoctor.gpu.free_rules import judge_free
    from envdoctor.gpu.job import job_asks
    from envdoctor.gpu.node_document import host_node_document, topology_json

    node, problem = node_of(ctx)
    if node is None:
        return problem  # type: ignore[return-value]
    if not node.has_nvidia and not ctx.spec.gpus:
        return skipped(NO_GPU)
    views = judge_free(node, job_asks(ctx.spec.stage_commands, ctx.spec.gpus), ctx.spec.gpus)
    findings: list[Finding] = []
    for view in views:
        ranks = view.needed or len(view.used) or len([d for d in node.devices if d[11:].isdigit()])
        scoped = [f if ranks > 1 or f.level != "fail" else replace(f, level="warn")
                  for f in rules.shm_findings(node, ranks) + rules.variable_findings(node, view.ask.env)
                  + rules.limit_findings(node, view.ask.env)]
        findings += scoped + rules.topology_findings(node, view.used)
    findings += rules.nccl_version_findings(target_env(ctx), node, target_python(ctx))
    findings = list(dict.fromkeys(findings))
    host = host_node_document(node, views[0].ask.env)
    shm = host["shm"]
    summary = (f"/dev/shm {shm['size'] / 1024**3:.1f} GiB" if shm.get("size") else "/dev/shm size unknown") + \
        f"; {len(views[0].used)} GPU rank(s); NCCL settings match the host's interfaces and RDMA devices"
    return findings_result(findings, summary, {"host": host, "gpu": {"topology": topology_json(node)}})


@check(
    "python.jit-toolchain",
    facts=(SECTION,),
    title="Toolchain for kernels compiled at run time (flashinfer, deep_gemm, triton, torch extensions)",
    requires=["host.python"],
    why="flashinfer, deep_gemm, triton and torch extensions compile kernels on first use: without nvcc, CUDA_HOME, "
        "the CUDA headers, a C compiler, Python.h or ninja the job fails minutes in, at its first request",
)
def jit_toolchain(ctx: CheckContext) -> CheckResult:
    from envdoctor.gpu.node_document import host_node_document
    from envdoctor.gpu.toolchain_rules import judge_toolchain, jit_users

    node, problem = node_of(ctx)
    if node is None:
        return problem  # type: ignore[return-value]
    if not node.has_nvidia and not ctx.spec.gpus:
        return skipped(NO_GPU)
    env = target_env(ctx)
    toolchain = node.raw.get("toolchain") or {}
    users = jit_users(env, toolchain, node.env)
    details = {"host": {"jit_toolchain": host_node_document(node, {})["jit_toolchain"]},
               "compiles_at_run_time": [f"{u.name} {u.version}" for u in users]}
    if not users:
        where = env.prefix if env else "the job's environment"
        return skipped(f"nothing in {where} compiles at run time (triton, flashinfer, deep_gemm, deepspeed)",
                       **details)
    findings = judge_toolchain(users, toolchain, node)
    summary = f"{', '.join(details['compiles_at_run_time'])}: compiler, Python.h, nvcc, CUDA headers and ninja present"
    return findings_result(findings, summary, details)
