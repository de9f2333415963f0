"""Run the check graph (and remedies) on every host of a fleet at once.

Each host gets one connection for the whole run: probe, remedies, probe again. Hosts run
concurrently up to ``parallel``; one slow or dead host never holds up the others beyond its
own deadline. Nothing here prints: progress goes to the callback the CLI passes in.
"""

from __future__ import annotations

import resource
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envdoctor.errors import EnvdoctorError, TransportError
from envdoctor.engine.facts import HostFacts, Problem
from envdoctor.operations.gather import gather_facts, problem_from_error, resolve_venv
from envdoctor.engine.graph import CheckGraph, RemedySettings
from envdoctor.install.index_credentials import wrapped_command
from envdoctor.inventory import HostSpec
from envdoctor.logsafe import get_logger
from envdoctor.engine.results import CheckResult, Remedy, Status
from envdoctor.transport.interface import CommandResult, Transport, shell_join
from envdoctor.transport.target import SSHOptions

if TYPE_CHECKING:
    from envdoctor.install.pip_remedy import InstalledState

log = get_logger(__name__)

#: How much of a remedy's output a report keeps.
OUTPUT_TAIL_CHARS = 2000

Progress = Callable[[str, str], None]


@dataclass(frozen=True)
class FleetSettings:
    ssh: SSHOptions = field(default_factory=SSHOptions)
    #: Deadline for everything done on one host, connection included.
    timeout: float | None = 900.0
    parallel: int = 64
    remedies: RemedySettings = field(default_factory=RemedySettings)
    #: Only these checks (and what they require); None for all.
    only: tuple[str, ...] | None = None


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

    @property
    def ok(self) -> bool:
        return not any(r.status.is_problem for r in self.results) and all(a.ok for a in self.actions)


@dataclass
class FleetReport:
    command: str
    hosts: list[HostReport]

    @property
    def exit_status(self) -> int:
        return 0 if all(h.ok for h in self.hosts) else 1


RemedyRunner = Callable[[Transport, HostSpec, str, Remedy, bool], Awaitable[Action]]


async def run_remedy_argv(transport: Transport, remedy: Remedy, argv: Sequence[str] | None = None) -> CommandResult:
    """The one place a command remedy (or pip's plan of it, ``argv``) is started on a host."""
    # Index URLs (and their passwords) go to pip's environment over stdin, never on its argv.
    command, stdin = wrapped_command(remedy.argv if argv is None else argv)
    return await transport.run(command, stdin=stdin, timeout=1800)


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
    from envdoctor.patching.engine import apply_patch_remedy  # the patch engine (libcst) only when a patch runs

    log.info("patch_start", host=spec.name, check=check_id, dry_run=dry_run)
    outcome = await apply_patch_remedy(transport, remedy, dry_run=dry_run)
    return Action(check_id, remedy.summary, remedy.display, outcome.exit_status, outcome.output, outcome.diff)


#: How each kind of remedy is applied; modules that add a kind (patches) add a row.
REMEDY_RUNNERS: dict[str, RemedyRunner] = {"command": run_command_remedy, "patch": run_patch_remedy}


def open_transport(spec: HostSpec, settings: FleetSettings) -> Transport:
    if spec.ssh is None:
        from envdoctor.transport.local import LocalTransport  # (asyncio's subprocesses)

        return LocalTransport(spec.name)
    from envdoctor.transport.asyncssh_loader import import_asyncssh

    import_asyncssh(settings.ssh.resolved_config_files())  # without the liboqs search, unless asked
    from envdoctor.transport.ssh import SSHTransport  # asyncssh only when a host needs it

    return SSHTransport(spec.name, spec.ssh, settings.ssh)


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


class HostRun:
    """Everything done on one host during one command."""

    def __init__(self, spec: HostSpec, graph: CheckGraph, settings: FleetSettings, progress: Progress | None,
                 transport: Transport | None = None) -> None:
        self.spec = spec
        self.graph = graph
        self.settings = settings
        self.progress = progress or (lambda host, phase: None)
        self.transport = transport

    def evaluate(self, facts: HostFacts) -> list[CheckResult]:
        return self.graph.evaluate(self.spec, facts, self.settings.remedies, only=self.settings.only)

    async def check(self, transport: Transport) -> tuple[HostFacts, list[CheckResult]]:
        self.progress(self.spec.name, "probing")
        self.spec = await resolve_venv(transport, self.spec)  # `~/venv` as the host reads it
        facts = await gather_facts(transport, self.spec, sections=self.graph.sections_for(self.settings.only))
        return facts, self.evaluate(facts)

    async def run(self, *, fix: bool, dry_run: bool) -> HostReport:
        transport = self.transport or open_transport(self.spec, self.settings)
        self.progress(self.spec.name, "connecting")
        try:
            await transport.connect()
        except EnvdoctorError as exc:
            log.info("connect_failed", host=self.spec.name, error=str(exc))
            problem = problem_from_error(exc)
            if problem.kind == "probe":  # (a config that cannot be connected with): no login happened
                problem = Problem("unreachable", problem.message, problem.hint)
            return HostReport(self.spec, self.evaluate(HostFacts.unavailable(problem)))
        try:
            facts, results = await self.check(transport)
            if not fix:
                return HostReport(self.spec, results)
            return await self.fix(transport, results, dry_run=dry_run)
        finally:
            await transport.close()

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

    async def fix(self, transport: Transport, before: list[CheckResult], *, dry_run: bool) -> HostReport:
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
        _, after = await self.check(transport)
        return HostReport(self.spec, after, before=before, actions=actions)


#: Descriptors one host may hold at once: its socket, and a command's pipes while one runs
#: locally (a local remedy, an ``ssh -G`` resolution). Kept for the rest of the process.
DESCRIPTORS_PER_HOST = 4
DESCRIPTORS_RESERVED = 64


def descriptor_bound(parallel: int, hosts: int) -> int:
    """Hosts worked on at once: ``parallel``, lowered so that the fleet stays inside the
    process's descriptor limit (``ulimit -n``): a fleet larger than the limit waits its
    turn instead of failing with EMFILE."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max(1, min(parallel, hosts))
    if soft == resource.RLIM_INFINITY:
        return wanted
    bound = max(1, (soft - DESCRIPTORS_RESERVED) // DESCRIPTORS_PER_HOST)
    if bound < wanted:
        log.info("parallel_bounded", parallel=parallel, bound=bound, nofile=soft)
    return min(wanted, bound)


async def run_fleet(
    specs: Sequence[HostSpec],
    graph: CheckGraph,
    settings: FleetSettings,
    *,
    command: str = "check",
    fix: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> FleetReport:
    """Check (and with ``fix``, repair) every host concurrently; never raises for a host's failure."""
    import asyncio

    limit = asyncio.Semaphore(descriptor_bound(settings.parallel, len(specs)))

    async def one(spec: HostSpec) -> HostReport:
        async with limit:
            run = HostRun(spec, graph, settings, progress)
            try:
                async with asyncio.timeout(settings.timeout):
                    report = await run.run(fix=fix, dry_run=dry_run)
            except TimeoutError:
                report = timed_out(run, settings)
            except Exception as exc:  # a hostile host's answer must not end the run of the others
                report = crashed(run, exc)
            if progress:
                progress(spec.name, "done" if report.ok else "problems")
            return report

    reports = await asyncio.gather(*(one(spec) for spec in specs))
    return FleetReport(command, list(reports))


def check_here(specs: Sequence[HostSpec], graph: CheckGraph, settings: FleetSettings, *,
               progress: Progress | None = None) -> FleetReport:
    """``check`` of this machine (every spec local), without an event loop: the same HostRun,
    each command run to its end by envdoctor.operations.blocking (start-up: no asyncio)."""
    from envdoctor.operations.blocking import drive_each

    def host(spec: HostSpec, transport: Transport | None = None) -> HostRun:
        return HostRun(spec, graph, settings, progress, transport)

    reports = drive_each(specs, settings.timeout,
                         lambda spec, transport: host(spec, transport).run(fix=False, dry_run=False),
                         timed_out=lambda spec: timed_out(host(spec), settings),
                         failed=lambda spec, exc: crashed(host(spec), exc), progress=progress)
    return FleetReport("check", reports)


def timed_out(run: HostRun, settings: FleetSettings) -> HostReport:
    problem = Problem("timeout", f"{run.spec.name} did not finish within {settings.timeout:g}s")
    return HostReport(run.spec, run.evaluate(HostFacts.unavailable(problem)))


def crashed(run: HostRun, exc: Exception) -> HostReport:
    log.exception("host_crashed", host=run.spec.name)
    problem = Problem("probe", f"envdoctor could not handle {run.spec.name}'s answer: {type(exc).__name__}: {exc}")
    return HostReport(run.spec, run.evaluate(HostFacts.unavailable(problem)))
