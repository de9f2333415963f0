"""Can we reach the host, run its Python, and does it have GPUs and disk?"""

from __future__ import annotations

from dataclasses import dataclass, field

from envdoctor.engine.graph import CheckContext, check
from envdoctor.engine.results import CheckResult, Remedy, errored, failed, passed, skipped, warned

_CONNECTION_WORDS = {
    "unreachable": "host unreachable",
    "timeout": "host did not answer in time",
    "auth": "authentication failed",
    "host-key": "host key not trusted",
    "host-key-changed": "host key changed",
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
    """Informational unless the host is expected to have GPUs (``gpus = N``, ``--gpus N``):
    then a missing driver, a failing nvidia-smi or fewer GPUs than expected fail."""
    facts, expected = ctx.facts, ctx.spec.gpus or 0
    driver = Remedy(summary="check the NVIDIA driver (a reboot after a driver upgrade often fixes a version mismatch)",
                    automatic=False)
    wanted = f"; {expected} GPU(s) expected" if expected else ""
    if not facts.nvidia_smi:
        text = "no nvidia-smi on PATH: no NVIDIA driver on this host"
        if expected:
            return failed(text + wanted, remedy=driver, expected=expected, found=0)
        return skipped(text)
    if facts.gpu_error or not facts.gpus:
        text = f"{facts.nvidia_smi} -L failed: {facts.gpu_error or 'no GPU listed'}"
        if expected:
            return failed(text + wanted, remedy=driver, expected=expected, found=len(facts.gpus))
        return warned(text + " (no GPU count expected: pass --gpus N or set gpus in envdoctor.toml to gate on it)",
                      remedy=driver)
    names = sorted(set(g.split(":", 1)[-1].split("(UUID")[0].strip() for g in facts.gpus))
    text = f"{len(facts.gpus)} GPU(s): {', '.join(names)}"
    if len(facts.gpus) < expected:
        return failed(f"only {text}{wanted}", remedy=driver, gpus=list(facts.gpus), expected=expected)
    return passed(text + (f" ({expected} expected)" if expected else ""), gpus=list(facts.gpus),
                  **({"expected": expected} if expected else {}))


@dataclass
class Filesystem:
    mount: str
    free: int
    total: int
    #: What of the job lives there: "venv /root/venv", "model /models/K", "home".
    holds: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return f"{self.mount} ({', '.join(self.holds)}): {self.free / GIB:.1f} GiB free of {self.total / GIB:.0f}"


def filesystems(ctx: CheckContext) -> list[Filesystem]:
    """The filesystems the job uses (home, venv, each model), once each, by mount point."""
    roles = {path: "home" for path in ctx.facts.disk}
    if ctx.spec.venv:
        roles[ctx.spec.venv] = f"venv {ctx.spec.venv}"
    for model in ctx.spec.models:
        roles[model] = f"model {model}"
    by_mount: dict[str, Filesystem] = {}
    for path, usage in ctx.facts.disk.items():
        mount = str(usage.get("mount") or path)
        fs = by_mount.setdefault(mount, Filesystem(mount, int(usage["free"]), int(usage["total"])))
        fs.holds.append(roles.get(path, path))
    return sorted(by_mount.values(), key=lambda fs: fs.mount)


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
    found = filesystems(ctx)
    lowest = min(found, key=lambda fs: fs.free)
    text = "; ".join(fs.describe() for fs in found)
    details = {"filesystems": [{"mount": fs.mount, "free": fs.free, "total": fs.total, "holds": fs.holds}
                               for fs in found]}
    if lowest.free < DISK_FAIL_BYTES:
        return failed(text, remedy=Remedy(summary=f"free space on the filesystem mounted on {lowest.mount}",
                                          automatic=False), **details)
    if lowest.free < DISK_WARN_BYTES:
        return warned(text, **details)
    return passed(text, **details)


#: Skipped files named in the message (the rest are counted; all are in the details).
SKIPPED_NAMED = 5


@check(
    "host.probe",
    facts=(),
    title="The probe finished and read every file it looked at",
    requires=["host.python"],
    why="what the probe did not finish before its deadline, or a file it left unread (a FIFO, a device, a "
        "planted multi-GiB file, one you may not read), is missing from every verdict that needs it",
)
def probe_complete(ctx: CheckContext) -> CheckResult:
    probe = ctx.facts.probe
    count = len(probe.skipped) + probe.skipped_more
    parts = []
    if probe.unfinished:
        parts.append(f"stopped at its deadline before finishing {', '.join(probe.unfinished)}: "
                     f"{probe.errors.get(probe.unfinished[0], '').strip()}")
    if count:
        named = "; ".join(s.describe() for s in probe.skipped[:SKIPPED_NAMED])
        rest = count - min(len(probe.skipped), SKIPPED_NAMED)
        parts.append(f"{count} file{'s' if count > 1 else ''} not read: {named}" + (f" (and {rest} more)" if rest else ""))
    if not parts:
        return passed("every section finished; every file the probe looked at was read")
    # Stopped by its own deadline (the end record lists what it did not finish), not a probe
    # that died: envdoctor's --timeout ran out, which a gate must not take for the node's fault.
    deadline = bool(probe.unfinished) and probe.complete
    return warned("; ".join(parts), unfinished=list(probe.unfinished), deadline=deadline,
                  skipped=[{"section": s.section, "path": s.path, "why": s.why} for s in probe.skipped],
                  skipped_more=probe.skipped_more,
                  remedy=Remedy(summary="give the host more time (--timeout) or remove what the probe stalls on",
                                automatic=False) if probe.unfinished else None)
