"""Run the check graph (and remedies) on every host of a fleet at once.

Each host gets one connection for the whole run: probe, remedies, probe again. Hosts run
concurrently up to ``parallel``; one slow or dead host never holds up the others beyond its
own deadline. Nothing here prints: progress goes to the callback the CLI passes in.
"""

from __future__ import annotations

import dataclasses
import posixpath
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envdoctor.engine.executor import FleetSettings, Progress, run_hosts, run_hosts_here
from envdoctor.engine.facts import HostFacts, Problem
from envdoctor.engine.graph import CheckGraph
from envdoctor.engine.results import SUBJECT_SEPARATOR, CheckResult, Remedy, Status
from envdoctor.errors import EnvdoctorError, TransportError
from envdoctor.install.index_credentials import wrapped_command
from envdoctor.transport.watched import run_watched
from envdoctor.inventory import HostSpec
from envdoctor.logsafe import get_logger
from envdoctor.operations.gather import default_sections, gather_facts, resolve_venv
from envdoctor.transport.interface import CommandResult, Transport, shell_join

if TYPE_CHECKING:
    from envdoctor.compare.have import Have
    from envdoctor.install.pip_remedy import InstalledState

log = get_logger(__name__)

#: How much of a remedy's output a report keeps.
OUTPUT_TAIL_CHARS = 2000


@dataclass(frozen=True)
class Action:
    """A remedy that fix ran (or, with --dry-run, would run)."""

    check_id: str
    summary: str
    command: str
    exit_status: int | None
    output: str = ""
    #: For patches: the unified diff of what was (or, with --dry-run, would be) changed.
    diff: str = ""
    #: For installs: pip's plan, one line per distribution it would install or replace.
    plan: tuple[str, ...] = ()
    #: Why fix did not run it (the remedy became "fix (by hand)"); empty when it ran.
    refused: str = ""

    @property
    def ok(self) -> bool:
        return not self.refused and self.exit_status in (0, None)

    def to_json(self) -> dict[str, object]:
        return {
            "check": self.check_id,
            "summary": self.summary,
            "command": self.command,
            "exit_status": self.exit_status,
            "output": self.output,
            "dry_run": self.exit_status is None and not self.refused,
            **({"diff": self.diff} if self.diff else {}),
            **({"plan": list(self.plan)} if self.plan else {}),
            **({"by_hand": True, "refused": self.refused} if self.refused else {}),
        }


@dataclass
class HostReport:
    spec: HostSpec
    results: list[CheckResult]
    #: For fix: the results before any remedy ran (None for check).
    before: list[CheckResult] | None = None
    actions: list[Action] = field(default_factory=list)
    #: What the host has, for a host of a ``same = true`` group (compared once all have run).
    have: Have | None = None

    @property
    def ok(self) -> bool:
        return not any(r.status.is_problem for r in self.results) and all(a.ok for a in self.actions)

    @property
    def timed_out(self) -> bool:
        """envdoctor's own deadline (--timeout) stopped the work on this host before every
        check could be judged: the host did not finish in time, or the probe stopped at its
        deadline. The checks it left unjudged are ``error`` results that say so; a gate that
        must not blame the node for envdoctor's own time reads this (see docs/cluster-gate.md)."""
        for result in self.results:
            if result.id == "host.reachable" and result.details.get("kind") == "timeout":
                return True
            if result.details.get("deadline") is True:  # host.probe's, or a check not judged in time
                return True
        return False

    @property
    def changed(self) -> list[Change]:
        """For fix: each check whose state differs between before and now (nothing for check)."""
        return [] if self.before is None else changes(self.before, self.results)


@dataclass(frozen=True)
class Change:
    """A check (or one finding of it, ``CHECK:SUBJECT``) whose status fix changed."""

    id: str
    before: Status | None
    after: Status | None

    def to_json(self) -> dict[str, str | None]:
        return {"id": self.id, "before": _status(self.before), "after": _status(self.after)}

    def line(self) -> str:
        """``model.tokenizer-live: fail -> pass``."""
        return f"{self.id}: {_status(self.before) or 'absent'} -> {_status(self.after) or 'absent'}"


def _status(status: Status | None) -> str | None:
    return None if status is None else str(status)


def changes(before: Sequence[CheckResult], after: Sequence[CheckResult]) -> list[Change]:
    """What differs, by result id. A finding (``model.code-imports:tiktoken``) that is gone
    after takes its check's own status then (all its findings resolved: the check passes);
    a check reported by findings on one side only is shown by them, not twice."""
    def status_of(results: dict[str, CheckResult], result_id: str) -> Status | None:
        found = results.get(result_id)
        if found is not None:
            return found.status
        check_id = result_id.partition(SUBJECT_SEPARATOR)[0]
        if check_id != result_id and check_id in results:
            return results[check_id].status
        return None

    old = {r.id: r for r in before}
    new = {r.id: r for r in after}
    ids = list(dict.fromkeys([*old, *new]))
    with_findings = {i.partition(SUBJECT_SEPARATOR)[0] for i in ids if SUBJECT_SEPARATOR in i}
    found = []
    for result_id in ids:
        if result_id in with_findings:
            continue  # its findings speak for it
        was, now = status_of(old, result_id), status_of(new, result_id)
        if was != now:
            found.append(Change(result_id, was, now))
    return found


@dataclass
class FleetReport:
    command: str
    hosts: list[HostReport]

    @property
    def exit_status(self) -> int:
        return 0 if all(h.ok for h in self.hosts) else 1


RemedyRunner = Callable[[Transport, HostSpec, str, Remedy, bool], Awaitable[Action]]


#: Seconds a remedy command (pip) may take on a host, and a probe at most.
REMEDY_TIMEOUT = 1800
PROBE_TIMEOUT = 300


async def run_remedy_argv(transport: Transport, remedy: Remedy, argv: Sequence[str] | None = None) -> CommandResult:
    """The one place a command remedy (or pip's plan of it, ``argv``) is started on a host:
    under the host-side supervisor, so an interrupted or killed envdoctor leaves no pip
    running (SIGINT first: pip ends as its own Ctrl-C ends it)."""
    from envdoctor.install.uv_plan import uv_target_python  # (only when a remedy runs: start-up)

    chosen = list(remedy.argv if argv is None else argv)
    # Index URLs (and their passwords) go to pip's (or uv's) environment over stdin, never on its argv.
    command, stdin = wrapped_command(chosen)
    python = chosen[0] if posixpath.basename(chosen[0]).startswith("python") else (
        uv_target_python(chosen) or "python3")  # (the supervisor runs under the venv's interpreter)
    return await run_watched(transport, command, python=python, stdin=stdin, stop="INT", timeout=REMEDY_TIMEOUT)


async def run_command_remedy(
    transport: Transport, spec: HostSpec, check_id: str, remedy: Remedy, dry_run: bool
) -> Action:
    if dry_run:
        return Action(check_id, remedy.summary, remedy.display, None)
    log.info("remedy_start", host=spec.name, check=check_id, command=remedy.display)
    result = await run_remedy_argv(transport, remedy)
    output = (result.stdout + result.stderr).decode("utf-8", "replace")
    log.info("remedy_done", host=spec.name, check=check_id, exit_status=result.exit_status)
    return Action(check_id, remedy.summary, remedy.display, result.exit_status, output[-OUTPUT_TAIL_CHARS:])


async def run_patch_remedy(
    transport: Transport, spec: HostSpec, check_id: str, remedy: Remedy, dry_run: bool
) -> Action:
    from envdoctor.patching.engine import (
        apply_patch_remedy,  # the patch engine (libcst) only when a patch runs
    )

    log.info("patch_start", host=spec.name, check=check_id, dry_run=dry_run)
    outcome = await apply_patch_remedy(transport, remedy, dry_run=dry_run)
    return Action(check_id, remedy.summary, remedy.display, outcome.exit_status, outcome.output, outcome.diff)


#: How each kind of remedy is applied; modules that add a kind (patches) add a row.
REMEDY_RUNNERS: dict[str, RemedyRunner] = {"command": run_command_remedy, "patch": run_patch_remedy}


def pending_remedies(results: Sequence[CheckResult]) -> list[tuple[str, Remedy]]:
    """Remedies fix may apply by itself, once each, in check order."""
    seen: set[str] = set()
    chosen = []
    for result in results:
        remedy = result.remedy
        if remedy is None or not remedy.automatic:
            continue
        if not (result.status.is_problem or result.status is Status.WARN):
            continue
        key = f"{remedy.kind}:{remedy.display}"
        if key not in seen:
            seen.add(key)
            chosen.append((result.id, remedy))
    return chosen


#: What a host of a ``same = true`` group is probed for beyond its checks (in the same round
#: trip): the sections that say what it has (see envdoctor.compare.have).
HAVE_SECTIONS = ("venvs", "patch-ledger", "gpu-stack", "system", "digests")
#: Arguments of those sections when the checks did not ask for them themselves: the gpu-stack
#: is then read for its driver, GPUs and torch, not for the code of its binaries.
HAVE_OVERRIDES: dict[str, dict[str, object]] = {"gpu-stack": {"binaries": False}}


class HostRun:
    """Everything done on one host during one command."""

    def __init__(self, spec: HostSpec, graph: CheckGraph, settings: FleetSettings, progress: Progress | None,
                 *, extra_sections: Sequence[str] = (), overrides: dict[str, dict[str, object]] | None = None
                 ) -> None:
        """``extra_sections``: probe sections gathered beyond the checks' own; ``overrides``:
        arguments for those of them the checks do not ask for."""
        self.spec = spec
        self.graph = graph
        self.settings = settings
        self.progress = progress or (lambda host, phase: None)
        self.extra_sections = tuple(extra_sections)
        self.overrides = overrides
        # The host's whole budget (--timeout) runs from about here: the executor made this run
        # once the host was connected (the connection's own seconds are not counted).
        self.started = time.monotonic()

    @property
    def until(self) -> float | None:
        """When the host's whole budget (--timeout) ends (time.monotonic): the probe's own
        deadline comes before it, so it reports what it did not finish before envdoctor gives up."""
        return None if self.settings.timeout is None else self.started + self.settings.timeout

    def evaluate(self, facts: HostFacts) -> list[CheckResult]:
        results = self.graph.evaluate(self.spec, facts, self.settings.remedies, only=self.settings.only,
                                      until=self.until)
        if any(r.remedy is not None and r.remedy.kind == "command" and r.remedy.payload for r in results):
            # (only with an install remedy, whose check has imported the install modules already)
            from envdoctor.install.uv_remedy import with_host_installer

            results = with_host_installer(results, facts.uv)  # a venv without pip: the host's uv
        return results

    def request(self) -> tuple[list[str] | None, dict[str, dict[str, object]]]:
        """The sections to gather, and the overrides of the extra ones the checks do not read."""
        sections = self.graph.sections_for(self.settings.only)
        if not self.extra_sections:
            return sections, {}
        base = sections if sections is not None else default_sections()
        added = [name for name in self.extra_sections if name not in base]
        overrides = {name: args for name, args in (self.overrides or {}).items() if name in added}
        return [*base, *added], overrides

    async def check(self, transport: Transport) -> tuple[HostFacts, list[CheckResult]]:
        self.progress(self.spec.name, "probing")
        self.spec = await resolve_venv(transport, self.spec)  # `~/venv` as the host reads it
        sections, overrides = self.request()
        facts = await gather_facts(transport, self.spec, sections=sections, overrides=overrides,
                                   timeout=PROBE_TIMEOUT, until=self.until)
        return facts, self.evaluate(facts)

    async def run(self, transport: Transport, *, fix: bool, dry_run: bool) -> HostReport:
        """Check (and with ``fix``, repair) the host over a connected transport."""
        facts, results = await self.check(transport)
        if not fix:
            return HostReport(self.spec, results, have=self.have(facts))
        report = await self.fix(transport, results, dry_run=dry_run)
        if report.have is None:  # nothing ran, so nothing was probed again: what it had before
            report.have = self.have(facts)
        return report

    def have(self, facts: HostFacts) -> Have | None:
        """What the host has, when it was asked for (and its facts could be gathered)."""
        if "digests" not in self.extra_sections or facts.problem is not None:
            return None
        from envdoctor.compare.have import build_have  # (only for a same = true group: start-up)

        return build_have(self.spec, facts)

    def unavailable(self, problem: Problem) -> HostReport:
        """The report of a host whose facts could not be gathered: every check says why."""
        return HostReport(self.spec, self.evaluate(HostFacts.unavailable(problem)))

    async def install(self, transport: Transport, check_id: str, remedy: Remedy, dry_run: bool,
                      installed: InstalledState) -> Action:
        """A pip install remedy: run only when pip's own plan breaks nothing installed."""
        from envdoctor.install.pip_remedy import apply_pip_install

        async def run(argv: Sequence[str]) -> CommandResult:
            log.info("remedy_start", host=self.spec.name, check=check_id, command=shell_join(argv))
            result = await run_remedy_argv(transport, remedy, argv)
            log.info("remedy_done", host=self.spec.name, check=check_id, exit_status=result.exit_status)
            return result

        outcome = await apply_pip_install(run, remedy, dry_run=dry_run, installed=installed)
        log.info("install_judged", host=self.spec.name, check=check_id, exit_status=outcome.exit_status,
                 refused=outcome.refused or None)
        return Action(check_id, remedy.summary, remedy.display, outcome.exit_status,
                      outcome.output[-OUTPUT_TAIL_CHARS:], plan=outcome.plan, refused=outcome.refused)

    async def planned(self, transport: Transport, results: list[CheckResult],
                      installed: InstalledState) -> list[CheckResult]:
        """The results with each pip install shown for a person to type judged by pip's plan
        first (envdoctor.install.pip_remedy.judge_shown_install): a remedy whose plan breaks an
        installed requirement, or has none, is not shown; the result says what the plan showed."""
        from envdoctor.install.pip_remedy import judge_shown_install, plan_first_install

        judged: dict[str, tuple[Remedy | None, str]] = {}
        out = []
        for result in results:
            remedy = result.remedy
            if remedy is None or plan_first_install(remedy) is None or not result.status.is_problem:
                out.append(result)
                continue
            if remedy.display not in judged:
                async def run(argv: Sequence[str], remedy: Remedy = remedy) -> CommandResult:
                    return await run_remedy_argv(transport, remedy, argv)
                judged[remedy.display] = await judge_shown_install(run, remedy, installed)
            shown, line = judged[remedy.display]
            out.append(dataclasses.replace(result, remedy=shown, message=f"{result.message}\n{line}"))
        return out

    async def fix(self, transport: Transport, before: list[CheckResult], *, dry_run: bool) -> HostReport:
        report = await self.fix_pending(transport, before, dry_run=dry_run)
        try:
            report.results = await self.planned(transport, report.results, {})
        except TransportError as exc:
            log.info("shown_plan_failed", host=self.spec.name, error=str(exc))
        return report

    async def fix_pending(self, transport: Transport, before: list[CheckResult], *, dry_run: bool) -> HostReport:
        remedies = pending_remedies(before)
        if not remedies:
            return HostReport(self.spec, before, before=before)
        from envdoctor.install.pip_remedy import is_pip_install

        self.progress(self.spec.name, "fixing")
        actions = []
        installed: InstalledState = {}  # what each install changed, for judging the next plan
        for check_id, remedy in remedies:
            runner = REMEDY_RUNNERS.get(remedy.kind)
            if runner is None:
                raise EnvdoctorError(f"no runner for remedies of kind {remedy.kind!r}")
            try:
                if is_pip_install(remedy):
                    actions.append(await self.install(transport, check_id, remedy, dry_run, installed))
                else:
                    actions.append(await runner(transport, self.spec, check_id, remedy, dry_run))
            except TransportError as exc:
                actions.append(Action(check_id, remedy.summary, remedy.display, -1, str(exc)))
                break  # the connection is gone or the host is stuck: re-checking would tell nothing new
        if dry_run or all(a.exit_status is None for a in actions):  # nothing ran: nothing to check again
            return HostReport(self.spec, before, before=before, actions=actions)
        facts, after = await self.check(transport)
        return HostReport(self.spec, after, before=before, actions=actions, have=self.have(facts))


async def run_fleet(
    specs: Sequence[HostSpec],
    graph: CheckGraph,
    settings: FleetSettings,
    *,
    command: str = "check",
    fix: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
    same: Collection[str] = (),
) -> FleetReport:
    """Check (and with ``fix``, repair) every host concurrently; never raises for a host's
    failure. The hosts named in ``same`` (of ``same = true`` groups) are also probed for
    what they have, in the same round trip (HostReport.have)."""
    reports = await run_hosts(specs, settings, _work(graph, settings, progress, fix=fix, dry_run=dry_run, same=same),
                              on_problem=_on_problem(graph, settings), progress=progress)
    return FleetReport(command, reports)


def check_here(specs: Sequence[HostSpec], graph: CheckGraph, settings: FleetSettings, *,
               progress: Progress | None = None, same: Collection[str] = ()) -> FleetReport:
    """``check`` of this machine (every spec local), without an event loop: the same HostRun,
    each command run to its end by envdoctor.engine.blocking (start-up: no asyncio)."""
    reports = run_hosts_here(specs, settings, _work(graph, settings, progress, fix=False, dry_run=False, same=same),
                             on_problem=_on_problem(graph, settings), progress=progress)
    return FleetReport("check", reports)


def _work(graph: CheckGraph, settings: FleetSettings, progress: Progress | None, *, fix: bool,
          dry_run: bool, same: Collection[str] = ()) -> Callable[[HostSpec, Transport], Awaitable[HostReport]]:
    async def work(spec: HostSpec, transport: Transport) -> HostReport:
        extra = HAVE_SECTIONS if spec.name in same else ()
        run = HostRun(spec, graph, settings, progress, extra_sections=extra, overrides=HAVE_OVERRIDES)
        return await run.run(transport, fix=fix, dry_run=dry_run)

    return work


def _on_problem(graph: CheckGraph, settings: FleetSettings) -> Callable[[HostSpec, Problem], HostReport]:
    return lambda spec, problem: HostRun(spec, graph, settings, None).unavailable(problem)
