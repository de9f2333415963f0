"""The one per-host executor: every command that takes hosts runs them through here.

``check``, ``fix``, ``audit``, ``drift``, ``revert``, ``facts`` and ``run`` differ only in the
work they do on a connected host and in the value that work returns. What they share lives
here, once: hosts run concurrently up to ``--parallel`` (lowered to fit the descriptor limit),
each within its own ``--timeout`` (connection included), each reported to the progress
callback, and each isolated: a host that cannot be reached, runs out of time or sends an
answer envdoctor cannot handle becomes that host's :class:`Problem`, turned into the command's
own per-host value by ``on_problem``. One value per host comes back, in the order given.

This machine alone runs without an event loop (:mod:`envdoctor.engine.blocking`): importing
asyncio is a third of envdoctor's start-up, and one local probe has nothing to overlap.
"""

from __future__ import annotations

import resource
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from envdoctor.engine.facts import Problem
from envdoctor.engine.graph import RemedySettings
from envdoctor.errors import (
    AuthError,
    CommandTimeout,
    ConnectError,
    EnvdoctorError,
    HostKeyChangedError,
    HostKeyError,
    ProbeError,
    ProtocolError,
    TransportError,
)
from envdoctor.logsafe import get_logger
from envdoctor.transport.target import SSHOptions

if TYPE_CHECKING:
    from envdoctor.inventory import HostSpec
    from envdoctor.transport.interface import Transport

log = get_logger(__name__)

#: Called with (host name, phase): connecting, probing, fixing, done or problems.
Progress = Callable[[str, str], None]


class Outcome(Protocol):
    """What a command's work returns for one host: it knows whether the host is fine."""

    @property
    def ok(self) -> bool: ...


R = TypeVar("R", bound=Outcome)
#: The work a command does on one connected host.
HostWork = Callable[["HostSpec", "Transport"], Awaitable[R]]
#: The command's value for a host whose work could not be done, and why.
OnProblem = Callable[["HostSpec", Problem], R]


@dataclass(frozen=True)
class FleetSettings:
    ssh: SSHOptions = field(default_factory=SSHOptions)
    #: Deadline for everything done on one host, connection included.
    timeout: float | None = 900.0
    parallel: int = 64
    remedies: RemedySettings = field(default_factory=RemedySettings)
    #: Only these checks (and what they require); None for all.
    only: tuple[str, ...] | None = None


def problem_from_error(exc: EnvdoctorError) -> Problem:
    """The kind of problem an error is, for the report (unreachable, auth, host-key,
    host-key-changed, timeout, probe)."""
    kind = {
        HostKeyError: "host-key",
        HostKeyChangedError: "host-key-changed",
        AuthError: "auth",
        ConnectError: "unreachable",
        CommandTimeout: "timeout",
        ProbeError: "probe",
        ProtocolError: "probe",
    }.get(type(exc), "unreachable" if isinstance(exc, TransportError) else "probe")
    return Problem(kind, str(exc), exc.hint)


def timed_out(spec: HostSpec, settings: FleetSettings) -> Problem:
    return Problem("timeout", f"{spec.name} did not finish within {settings.timeout:g}s")


def unhandled(spec: HostSpec, exc: Exception) -> Problem:
    """An answer envdoctor could not handle: a bug or a hostile host, and only this host's problem."""
    log.exception("host_crashed", host=spec.name)
    return Problem("probe", f"envdoctor could not handle {spec.name}'s answer: {type(exc).__name__}: {exc}")


def open_transport(spec: HostSpec, settings: FleetSettings) -> Transport:
    if spec.ssh is None:
        from envdoctor.transport.local import LocalTransport  # (asyncio's subprocesses: start-up)

        return LocalTransport(spec.name)
    from envdoctor.transport.asyncssh_loader import import_asyncssh

    import_asyncssh(settings.ssh.resolved_config_files())  # without the liboqs search, unless asked
    from envdoctor.transport.ssh import (
        SSHTransport,  # asyncssh only when a host needs it (start-up)
    )

    return SSHTransport(spec.name, spec.ssh, settings.ssh)


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


async def on_connected(spec: HostSpec, transport: Transport, work: HostWork[R], on_problem: OnProblem[R],
                       progress: Progress) -> R:
    """Connect, do the work, close: a connection that fails is the host's problem."""
    progress(spec.name, "connecting")
    try:
        await transport.connect()
    except EnvdoctorError as exc:
        log.info("connect_failed", host=spec.name, error=str(exc))
        problem = problem_from_error(exc)
        if problem.kind == "probe":  # (a config that cannot be connected with): no login happened
            problem = Problem("unreachable", problem.message, problem.hint)
        return on_problem(spec, problem)
    log.info("connected", host=spec.name)  # (bench/daily_bench.py's phases start here)
    try:
        return await work(spec, transport)
    finally:
        await transport.close()


async def run_hosts(specs: Sequence[HostSpec], settings: FleetSettings, work: HostWork[R], *,
                    on_problem: OnProblem[R], progress: Progress | None = None) -> list[R]:
    """``work`` on every host concurrently, one value per host; never raises for a host."""
    import asyncio  # (only a run that needs an event loop pays for it: start-up)

    report = progress or _silent
    limit = asyncio.Semaphore(descriptor_bound(settings.parallel, len(specs)))

    async def one(spec: HostSpec) -> R:
        async with limit:
            try:
                async with asyncio.timeout(settings.timeout):
                    result = await on_connected(spec, open_transport(spec, settings), work, on_problem, report)
            except TimeoutError:
                result = on_problem(spec, timed_out(spec, settings))
            except EnvdoctorError as exc:
                log.info("host_failed", host=spec.name, error=str(exc))
                result = on_problem(spec, problem_from_error(exc))
            except Exception as exc:  # a hostile host's answer must not end the run of the others
                result = on_problem(spec, unhandled(spec, exc))
            report(spec.name, "done" if result.ok else "problems")
            return result

    return list(await asyncio.gather(*(one(spec) for spec in specs)))


def run_hosts_here(specs: Sequence[HostSpec], settings: FleetSettings, work: HostWork[R], *,
                   on_problem: OnProblem[R], progress: Progress | None = None) -> list[R]:
    """:func:`run_hosts` for this machine only (every spec local), without an event loop."""
    from envdoctor.engine.blocking import drive_each

    report = progress or _silent

    def failed(spec: HostSpec, exc: Exception) -> R:
        if isinstance(exc, EnvdoctorError):
            return on_problem(spec, problem_from_error(exc))
        return on_problem(spec, unhandled(spec, exc))

    return drive_each(specs, settings.timeout,
                      lambda spec, transport: on_connected(spec, transport, work, on_problem, report),
                      timed_out=lambda spec: on_problem(spec, timed_out(spec, settings)),
                      failed=failed, progress=report)


def execute(specs: Sequence[HostSpec], settings: FleetSettings, work: HostWork[R], *,
            on_problem: OnProblem[R], progress: Progress | None = None, blocking_here: bool = True) -> list[R]:
    """Run ``work`` on every host: this machine alone without an event loop (unless
    ``blocking_here`` is False: work that streams or runs commands concurrently), otherwise
    with asyncio."""
    if blocking_here and all(spec.ssh is None for spec in specs):
        return run_hosts_here(specs, settings, work, on_problem=on_problem, progress=progress)
    import asyncio

    return asyncio.run(run_hosts(specs, settings, work, on_problem=on_problem, progress=progress))


def _silent(_host: str, _phase: str) -> None:
    return None
