"""``envdoctor drift``: the drift section alone, on every host concurrently, judged here."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from envdoctor.drift.judge import ERROR, PairReport, judge
from envdoctor.drift.request import SECTION, drift_request
from envdoctor.engine.executor import FleetSettings, Progress, execute
from envdoctor.engine.facts import Problem
from envdoctor.errors import ProbeError
from envdoctor.inventory import HostSpec
from envdoctor.logsafe import get_logger
from envdoctor.probe.program import run_probe, venv_pythons
from envdoctor.transport.interface import Transport

log = get_logger(__name__)


@dataclass(frozen=True)
class DriftOptions:
    consumers: tuple[str, ...] = ()
    providers: tuple[str, ...] = ()
    entry: str | None = None
    cache: bool = True
    #: Environments on the host that may hold the provider version a consumer pins.
    baselines: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostDrift:
    host: str
    destination: str
    pairs: tuple[PairReport, ...] = ()
    problem: str | None = None
    hint: str = ""
    stats: dict[str, Any] = field(default_factory=dict)
    errors: tuple[dict[str, Any], ...] = ()
    not_found: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.problem is None and not any(p.count(ERROR) for p in self.pairs)


@dataclass(frozen=True)
class DriftReport:
    hosts: tuple[HostDrift, ...]

    @property
    def exit_status(self) -> int:
        return 0 if all(h.ok for h in self.hosts) else 1


def host_drift(spec: HostSpec, data: dict[str, Any], controller_seconds: float) -> HostDrift:
    stats = {k: data.get(k) for k in ("cache", "files_parsed", "bytes_read", "host_seconds", "host_cpu_seconds", "entry",
                                   "entries_unfound", "baselines_missing")}
    stats["controller_seconds"] = round(controller_seconds, 4)
    python = f"{spec.venv}/bin/python" if spec.venv else "python3"
    return HostDrift(spec.name, spec.destination, tuple(judge(data, python)), stats=stats,
                     errors=tuple(data.get("errors") or ()), not_found=tuple(data.get("not_found") or ()))


async def drift_on_host(spec: HostSpec, transport: Transport, settings: FleetSettings,
                        options: DriftOptions) -> HostDrift:
    """The drift section on one connected host, judged here."""
    request = {SECTION: drift_request(spec.venv, (*spec.scan, *options.consumers), entry=options.entry,
                                      providers=options.providers, cache=options.cache,
                                      baselines=options.baselines)}
    output = await run_probe(transport, request, python_candidates=venv_pythons(spec.venv), timeout=settings.timeout)
    if SECTION in output.errors:
        error = ProbeError(f"the drift section failed on the host: {output.errors[SECTION].strip().splitlines()[-1]}")
        return HostDrift(spec.name, spec.destination, problem=str(error))
    started = time.perf_counter()
    result = host_drift(spec, output.sections.get(SECTION) or {}, 0.0)
    result.stats["controller_seconds"] = round(time.perf_counter() - started, 4)
    log.info("drift_done", host=spec.name, pairs=len(result.pairs), cache=result.stats.get("cache"))
    return result


def run_drift(specs: Sequence[HostSpec], settings: FleetSettings, options: DriftOptions,
              progress: Progress | None = None) -> DriftReport:
    """Drift on every host; a host that cannot be judged is reported with its problem, never raised."""

    async def work(spec: HostSpec, transport: Transport) -> HostDrift:
        return await drift_on_host(spec, transport, settings, options)

    return DriftReport(tuple(execute(specs, settings, work, on_problem=undrifted, progress=progress)))


def undrifted(spec: HostSpec, problem: Problem) -> HostDrift:
    return HostDrift(spec.name, spec.destination, problem=problem.message, hint=problem.hint)
