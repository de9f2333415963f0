"""Will the job start? The installed libraries' calls against the definitions they reach.

The probe section ``drift`` reads, on the host and with Python's own ``ast`` (nothing is
imported or run), the libraries the trust_remote_code scan selects (those depending on
transformers, vllm or sglang, plus ``--scan DIST``) and the modules of the other installed
distributions they import; :mod:`envdoctor.drift.judge` checks every import, attribute and
call against the definition it reaches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from envdoctor.engine.graph import CheckContext, check
from envdoctor.engine.results import CheckResult, Remedy, failed, passed, skipped, warned

#: Findings named in the message; the rest are in details.
SHOWN = 3
#: The probe section (envdoctor.drift.request.SECTION; the judge and the request builder,
#: which reads the scanner, are imported when the check runs).
SECTION = "drift"


@check(
    "code.api-drift",
    facts=(SECTION,),
    title="Installed libraries fit the APIs of the libraries they call",
    requires=["python.venv"],
    why="two installed versions that pip check accepts can still disagree on an API; the job then "
    "fails only after it has loaded the model, one crash at a time",
)
def api_drift(ctx: CheckContext) -> CheckResult:
    from envdoctor.drift.judge import ERROR, WARN, judge

    if unread := ctx.section_failed(SECTION, "could not read the installed libraries' code"):
        return unread
    data = ctx.facts.section(SECTION)
    if data is None:
        return skipped("the probe did not read the installed libraries' code")
    pairs = judge(data, f"{ctx.spec.venv}/bin/python" if ctx.spec.venv else "python3")
    scope, scope_note = scope_of(data, ctx.spec.stage_commands)
    details: dict[str, Any] = {"pairs": [p.to_json(verbose=False) for p in pairs], "cache": data.get("cache"),
                               "files_parsed": data.get("files_parsed"), "scope": scope}
    if data.get("errors"):
        details["errors"] = data["errors"]
    errors = [p for p in pairs if p.count(ERROR)]
    warnings = [p for p in pairs if p.count(WARN)]
    checked = f"{sum(p.uses for p in pairs)} use(s) in {len(pairs)} consumer→provider pair(s){scope_note}"
    if not errors and not warnings:
        return passed(f"{checked}, none that the installed definitions reject", **details)
    bad = errors or warnings
    severity = ERROR if errors else WARN
    shown = [f"{f.path}:{f.line} {f.use}: {f.why}" for p in bad for f in p.findings if f.severity == severity][:SHOWN]
    message = "; ".join(p.headline() for p in bad) + scope_note + " — " + "; ".join(shown)
    remedy = Remedy(bad[0].remedy, automatic=False)
    if errors:
        return failed(message, remedy=remedy, **details)
    return warned(message, remedy=remedy, **details)


def scope_of(data: Mapping[str, Any], stage_commands: Sequence[str]) -> tuple[dict[str, Any], str]:
    """Which entries the section followed (the host's stages'), or why it read every consumer
    file: as details and as a clause of the message ("" when no stage runs on the host)."""
    entry = data.get("entry")
    entries = [entry] if isinstance(entry, str) else [str(e) for e in entry or []]
    unfound = [str(e) for e in data.get("entries_unfound") or []]
    if entries and not unfound:
        files = data.get("scoped_files")
        count = f", {len(files)} consumer file(s)" if isinstance(files, list) else ""
        return ({"entries": entries, "files": len(files) if isinstance(files, list) else None},
                f" (scoped to the host's stage entry {', '.join(entries)}{count})")
    if unfound:
        why = (f"the stage entry {', '.join(unfound)} is neither a module of the checked libraries "
               "nor a script on the host")
    else:
        from envdoctor.drift.request import stage_scope

        why = stage_scope(stage_commands).unscoped
    if not why:
        return {"entries": None}, ""
    return {"entries": None, "unscoped": why}, f" (not scoped: {why}; every file checked)"
