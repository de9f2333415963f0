"""Can we reach the host, run its Python, and does it have GPUs and disk?"""

from __future__ import annotations

from envdoctor.graph import CheckContext, check
from envdoctor.results import CheckResult, Remedy, errored, failed, passed, skipped, warned

_CONNECTION_WORDS = {
    "unreachable": "host unreachable",
    "timeout": "host did not answer in time",
    "auth": "authentication failed",
    "host-key": "host key not trusted",
}

GIB = 1024**3
DISK_FAIL_BYTES = 1 * GIB
DISK_WARN_BYTES = 10 * GIB


@check(
    "host.reachable",
    facts=(),
    title="Host reachable and authenticated",
    why="nothing else can be checked or fixed until envdoctor can log in",
)
def reachable(ctx: CheckContext) -> CheckResult:
    problem = ctx.facts.problem
    if problem is None or problem.kind == "probe":
        return passed(f"logged in to {ctx.spec.destination}" if ctx.spec.ssh else "the local machine")
    words = _CONNECTION_WORDS.get(problem.kind, "host unreachable")
    remedy = Remedy(summary=problem.hint, automatic=False) if problem.hint else None
    return errored(f"{words}: {problem.message}", remedy=remedy, kind=problem.kind)


@check(
    "host.python",
    facts=(),
    title="A Python 3 interpreter runs the probe",
    requires=["host.reachable"],
    why="envdoctor's probe and every Python job need an interpreter on the host",
)
def python_runs(ctx: CheckContext) -> CheckResult:
    problem = ctx.facts.problem
    if problem is not None:
        return failed(
            problem.message,
            remedy=Remedy(summary="install Python 3 on the host (e.g. apt-get install python3)", automatic=False),
        )
    probe_python = (ctx.facts.section("host") or {}).get("probe_python", {})
    return passed(f"probe ran with {probe_python.get('executable', '?')} (Python {probe_python.get('version', '?')})")


@check(
    "host.gpu",
    facts=(),
    title="NVIDIA GPUs visible",
    requires=["host.python"],
    why="serving and training jobs need the driver to answer; a driver/library mismatch fails every job",
)
def gpus(ctx: CheckContext) -> CheckResult:
    facts = ctx.facts
    if not facts.nvidia_smi:
        return skipped("no nvidia-smi on PATH: no NVIDIA driver on this host")
    if facts.gpu_error or not facts.gpus:
        return failed(
            f"{facts.nvidia_smi} -L failed: {facts.gpu_error or 'no GPU listed'}",
            remedy=Remedy(summary="check the NVIDIA driver (a reboot after a driver upgrade often fixes a version mismatch)", automatic=False),
        )
    names = sorted(set(g.split(":", 1)[-1].split("(UUID")[0].strip() for g in facts.gpus))
    return passed(f"{len(facts.gpus)} GPU(s): {', '.join(names)}", gpus=list(facts.gpus))


@check(
    "host.disk",
    facts=(),
    title="Free disk space",
    requires=["host.python"],
    why="package installs and checkpoints fail half-way on a full disk",
)
def disk(ctx: CheckContext) -> CheckResult:
    if not ctx.facts.disk:
        return skipped("the probe reported no disk usage")
    lowest_path, lowest = min(ctx.facts.disk.items(), key=lambda item: item[1]["free"])
    free = lowest["free"]
    text = f"{free / GIB:.1f} GiB free at {lowest_path}"
    if free < DISK_FAIL_BYTES:
        return failed(text, remedy=Remedy(summary=f"free space on the filesystem of {lowest_path}", automatic=False))
    if free < DISK_WARN_BYTES:
        return warned(text)
    return passed(text, disk={k: dict(v) for k, v in ctx.facts.disk.items()})
