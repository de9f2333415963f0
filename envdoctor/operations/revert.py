"""`envdoctor revert HOST PATCH`: put back the original files of a recorded patch.

One connection per host: probe the environment and its ledger, then send the host program
that restores each backup after checking the file is still what envdoctor wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from envdoctor.engine.executor import FleetSettings, Progress, execute
from envdoctor.engine.facts import Problem
from envdoctor.errors import PatchError
from envdoctor.inventory import HostSpec
from envdoctor.logsafe import get_logger
from envdoctor.operations.gather import gather_facts, resolve_venv
from envdoctor.patching.engine import PatchFiles, RevertResult, revert_patch
from envdoctor.patching.ledger import LedgerEntry, applied_patches, outside_environment
from envdoctor.transport.interface import Transport

log = get_logger(__name__)


@dataclass(frozen=True)
class HostRevert:
    host: str
    patch: str
    files: tuple[RevertResult, ...] = ()
    error: str | None = None
    #: What to do about ``error`` (from the connection's problem), when known.
    hint: str = ""
    #: Nothing to do, and why (the patch was already reverted).
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(f.ok for f in self.files)

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "host": self.host, "patch": self.patch, "ok": self.ok,
            "files": [{"file": f.file, "result": f.result, "message": f.message} for f in self.files],
        }
        if self.error:
            data["error"] = self.error
        if self.hint:
            data["hint"] = self.hint
        if self.note:
            data["note"] = self.note
        return data


def already_reverted(ledger: Sequence[LedgerEntry], patch_id: str) -> LedgerEntry | None:
    """The last completed revert of ``patch_id`` when none of its changes is in force any more."""
    if any(pid == patch_id for pid, _ in applied_patches(ledger)):
        return None
    reverts = [e for e in ledger if e.patch == patch_id and e.op == "revert" and e.phase == "done"]
    return reverts[-1] if reverts else None


async def revert_on_host(spec: HostSpec, transport: Transport, patch_id: str) -> HostRevert:
    """Revert ``patch_id`` in a connected host's environment; problems become ``error``, not exceptions."""
    spec = await resolve_venv(transport, spec)
    facts = await gather_facts(transport, spec, sections=["venvs", "patch_files"])
    if facts.problem is not None:
        return HostRevert(spec.name, patch_id, error=facts.problem.message)
    env = facts.env_at(spec.venv) if spec.venv else facts.default_env
    files = PatchFiles.from_facts(facts)
    if env is None or not env.runs or files is None or files.error:
        reason = (files.error if files else None) or f"no working Python environment at {spec.venv or 'python3'}"
        return HostRevert(spec.name, patch_id, error=reason)
    already = already_reverted(files.ledger, patch_id)
    if already is not None:
        return HostRevert(spec.name, patch_id, note=f"{patch_id} was already reverted in {env.prefix} "
                                                    f"(at {already.time or 'an unknown time'}); nothing to do")
    for entry in files.ledger:
        problem = outside_environment(entry, env.prefix) if entry.patch == patch_id else None
        if problem:  # the ledger is a file in the venv: never trusted to name other files
            return HostRevert(spec.name, patch_id, error=problem)
    try:
        results = await revert_patch(transport, env, files, patch_id)
    except PatchError as exc:
        return HostRevert(spec.name, patch_id, error=str(exc))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a hostile host's answer
        return HostRevert(spec.name, patch_id, error=f"the host's answer could not be used: {exc!r}")
    log.info("revert_done", host=spec.name, patch=patch_id, results=[r.result for r in results])
    return HostRevert(spec.name, patch_id, tuple(results))


def run_revert(specs: Sequence[HostSpec], settings: FleetSettings, patch_id: str,
               progress: Progress | None = None) -> list[HostRevert]:
    """Revert ``patch_id`` on every host, one result per host, never raised."""

    async def work(spec: HostSpec, transport: Transport) -> HostRevert:
        return await revert_on_host(spec, transport, patch_id)

    def not_reverted(spec: HostSpec, problem: Problem) -> HostRevert:
        return HostRevert(spec.name, patch_id, error=problem.message, hint=problem.hint)

    return execute(specs, settings, work, on_problem=not_reverted, progress=progress, blocking_here=False)
