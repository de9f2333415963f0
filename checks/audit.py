"""Are envdoctor's recorded patches still in their files? (A reinstall silently drops them.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envdoctor.engine.graph import CheckContext, check
from envdoctor.engine.results import CheckResult, failed, passed, warned

if TYPE_CHECKING:
    from envdoctor.audit.records import FileState


@check(
    "audit.patches",
    facts=("patch-ledger",),
    title="envdoctor's recorded patches are still in their files",
    requires=["python.venv"],
    why="a job that relies on a patched library fails the old way once a reinstall removed the patch",
)
def recorded_patches(ctx: CheckContext) -> CheckResult:
    if unread := ctx.section_failed("patch-ledger", "the patch ledger could not be read"):
        return unread
    ledger = ctx.facts.section("patch-ledger")
    if not ledger or not ledger.get("exists"):
        return passed("no patch ledger: envdoctor has not patched this environment")
    from envdoctor.audit.records import (  # (the audit engine, only with a ledger)
        FileState,
        patch_statuses,
    )

    statuses, notes = patch_statuses(ledger)
    by_state: dict[FileState, list[str]] = {}
    for status in statuses:
        by_state.setdefault(status.state, []).append(f"{', '.join(status.patches)} on {status.file}")
    details = {"files": {s.file: {"state": str(s.state), "patches": list(s.patches)} for s in statuses}}
    if notes:
        details["unfinished"] = notes
    reverted = by_state.get(FileState.REVERTED, [])
    if reverted:
        # No remedy of its own: each patch's own check (patch.<id>) sees it pending again and
        # `fix` re-applies it from there, with the diff and the ledger record.
        return failed(
            f"{len(reverted)} recorded patch(es) no longer in their files (pending again; `envdoctor fix` "
            f"re-applies them): {'; '.join(reverted)}",
            **details,
        )
    changed = by_state.get(FileState.MODIFIED, []) + by_state.get(FileState.MISSING, [])
    if changed:
        return warned(
            f"patched file(s) changed or removed since envdoctor patched them: {'; '.join(changed)}; "
            "`envdoctor audit` shows the details",
            **details,
        )
    if notes:
        return warned("; ".join(notes), **details)
    return passed(f"{len(statuses)} patched file(s) as recorded", **details)
