"""``diff`` and ``snapshot`` on hosts, and the comparison ``check`` adds for a ``same = true`` group.

``diff`` probes each host once for what it has (no checks run) and compares the hosts item
by item; ``snapshot`` runs the checks and gathers what a bug report needs in the same round
trip; ``check`` of a ``same = true`` group gathers what its hosts have beside the checks and
adds a ``fleet.same`` result to each of them. Every host goes through the one executor
(parallel, timeout, progress, isolation); nothing here prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envdoctor.compare.have import Have, build_have
from envdoctor.compare.majority import Comparison, Difference, compare
from envdoctor.compare.snapshot import snapshot_document
from envdoctor.engine.executor import FleetSettings, Progress, execute
from envdoctor.engine.facts import Problem
from envdoctor.engine.graph import CheckGraph
from envdoctor.engine.results import CheckResult, Status
from envdoctor.inventory import HostSpec
from envdoctor.operations.fleet import (
    HAVE_OVERRIDES,
    HAVE_SECTIONS,
    FleetReport,
    HostReport,
    HostRun,
)
from envdoctor.operations.gather import gather_facts, resolve_venv
from envdoctor.transport.interface import Transport

#: The sections ``diff`` reads: the host itself (for its GPU list) and what it has.
DIFF_SECTIONS = ("host", *HAVE_SECTIONS)
#: ``snapshot`` also shows the GPU topology (nvidia-smi topo -m).
SNAPSHOT_OVERRIDES: dict[str, dict[str, object]] = {**HAVE_OVERRIDES, "system": {"topology": True}}
SAME_CHECK = "fleet.same"


@dataclass(frozen=True)
class HostHave:
    """One host of a ``diff``: what it has, or why that could not be gathered."""

    spec: HostSpec
    have: Have | None
    problem: Problem | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclass(frozen=True)
class DiffReport:
    hosts: tuple[HostHave, ...]
    comparison: Comparison
    #: Where the hosts came from: the command line's hosts, or the report files read.
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def exit_status(self) -> int:
        return 0 if self.comparison.ok and all(h.ok for h in self.hosts) else 1


def compare_hosts(hosts: Sequence[HostHave], ignore: Sequence[str] = (),
                  sources: Mapping[str, str] | None = None) -> DiffReport:
    haves = [(h.spec.name, h.have) for h in hosts if h.have is not None]
    return DiffReport(tuple(hosts), compare(haves, ignore), dict(sources or {}))


def diff_hosts(specs: Sequence[HostSpec], settings: FleetSettings, *, ignore: Sequence[str] = (),
               progress: Progress | None = None) -> DiffReport:
    """What every host has, compared: one probe round trip per host, no checks."""

    async def work(spec: HostSpec, transport: Transport) -> HostHave:
        if progress is not None:
            progress(spec.name, "probing")
        spec = await resolve_venv(transport, spec)
        facts = await gather_facts(transport, spec, sections=DIFF_SECTIONS, overrides=HAVE_OVERRIDES)
        if facts.problem is not None:
            return HostHave(spec, None, facts.problem)
        return HostHave(spec, build_have(spec, facts))

    hosts = execute(specs, settings, work, on_problem=lambda spec, problem: HostHave(spec, None, problem),
                    progress=progress)
    return compare_hosts(hosts, ignore)


@dataclass
class HostSnapshot:
    """One host of a ``snapshot``: its check results, the document and what it has."""

    report: HostReport
    document: dict[str, Any] | None
    problem: Problem | None = None

    @property
    def ok(self) -> bool:
        return self.report.ok


def snapshot_hosts(specs: Sequence[HostSpec], graph: CheckGraph, settings: FleetSettings, *,
                   progress: Progress | None = None) -> list[HostSnapshot]:
    """The checks and the snapshot document of every host, in one probe round trip each."""

    async def work(spec: HostSpec, transport: Transport) -> HostSnapshot:
        run = HostRun(spec, graph, settings, progress, extra_sections=HAVE_SECTIONS, overrides=SNAPSHOT_OVERRIDES)
        facts, results = await run.check(transport)
        report = HostReport(run.spec, results, have=run.have(facts))
        if facts.problem is not None:
            return HostSnapshot(report, None, facts.problem)
        return HostSnapshot(report, snapshot_document(run.spec, facts, results))

    def on_problem(spec: HostSpec, problem: Problem) -> HostSnapshot:
        return HostSnapshot(HostRun(spec, graph, settings, None).unavailable(problem), None, problem)

    return execute(specs, settings, work, on_problem=on_problem, progress=progress)


def add_same_results(report: FleetReport, groups: Mapping[str, Sequence[str]]) -> dict[str, DiffReport]:
    """For each ``same = true`` group: its hosts compared, and a ``fleet.same`` result on each
    of them (pass, or fail naming what differs from the majority). Returns the comparisons."""
    by_name = {host.spec.name: host for host in report.hosts}
    found = {}
    for group, names in groups.items():
        members = [by_name[name] for name in names if name in by_name]
        hosts = [HostHave(h.spec, h.have, None if h.have is not None else Problem("probe", "not compared"))
                 for h in members]
        diff = compare_hosts(hosts)
        found[group] = diff
        for host in members:
            host.results.append(same_result(group, host, diff))
    return found


def same_result(group: str, host: HostReport, diff: DiffReport) -> CheckResult:
    title = f"Same as the other hosts of {group}"
    why = (f"The hosts of {group} run one job: a node with another torch or NCCL hangs the collectives, "
           "another tokenizer file or library version changes the tokens, a patch on some nodes only changes "
           "what the job computes there.")
    if host.have is None:
        return CheckResult(SAME_CHECK, Status.ERROR, f"not compared with the other hosts of {group}: "
                           "what it has could not be gathered", title, why, details={"group": group})
    mine = diff.comparison.differs_on(host.spec.name)
    compared = len([h for h in diff.hosts if h.have is not None])
    if not mine:
        return CheckResult(SAME_CHECK, Status.PASS, f"has what the majority of {group} has "
                           f"({diff.comparison.compared} items, {compared} hosts compared)", title, why,
                           details={"group": group})
    status = Status.FAIL if any(not d.ignored for d in mine) else Status.PASS
    listed = "; ".join(_mine(d, host.spec.name) for d in mine[:8]) + (f"; and {len(mine) - 8} more" if len(mine) > 8
                                                                     else "")
    return CheckResult(SAME_CHECK, status, f"differs from the majority of {group} in {len(mine)} item(s): {listed}",
                       title, why, details={"group": group, "differs": [d.to_json() for d in mine]})


def _mine(difference: Difference, host: str) -> str:
    other = next(o for o in difference.others if o.host == host)
    tie = ", a tie" if difference.tie else ""
    return (f"{difference.key} is {other.value} (majority {difference.majority} on {len(difference.holders)} "
            f"of {difference.of}{tie})")
