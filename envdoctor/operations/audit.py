"""``envdoctor audit`` on every host: one probe run each (RECORD verification and the patch
ledger), judged here by :class:`envdoctor.audit.records.RecordAuditor`."""

from __future__ import annotations

from collections.abc import Sequence

from envdoctor.audit.records import AuditReport, HostAudit, RecordAuditor
from envdoctor.engine.executor import FleetSettings, Progress, execute
from envdoctor.engine.facts import Problem
from envdoctor.inventory import HostSpec
from envdoctor.transport.interface import Transport


def run_audit(specs: Sequence[HostSpec], settings: FleetSettings, auditor: RecordAuditor,
              progress: Progress | None = None, *, blocking_here: bool = True) -> AuditReport:
    """Audit every host; a host that cannot be audited is reported with its problem, never raised.
    This machine alone is audited without an event loop unless ``blocking_here`` is False."""

    async def work(spec: HostSpec, transport: Transport) -> HostAudit:
        return await auditor.audit(transport, spec)

    return AuditReport(tuple(execute(specs, settings, work, on_problem=unaudited, progress=progress,
                                        blocking_here=blocking_here)))


def unaudited(spec: HostSpec, problem: Problem) -> HostAudit:
    return HostAudit(spec.name, spec.destination, problem=problem.message, hint=problem.hint)
