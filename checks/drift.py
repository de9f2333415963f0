"""Will the job start? The installed libraries' calls against the definitions they reach.

The probe section ``drift`` reads, on the host and with Python's own ``ast`` (nothing is
imported or run), the libraries the trust_remote_code scan selects (those depending on
transformers, vllm or sglang, plus ``--scan DIST``) and the modules of the other installed
distributions they import; :mod:`envdoctor.drift.judge` checks every import, attribute and
call against the definition it reaches.
"""

from __future__ import annotations

from typing import Any

from envdoctor.drift.judge import ERROR, WARN, judge
from envdoctor.drift.request import SECTION
from envdoctor.graph import CheckContext, check
from envdoctor.results import CheckResult, Remedy, failed, passed, skipped, warned

#: Findings named in the message; the rest are in details.
SHOWN = 3


@check(
    "code.api-drift",
    facts=(SECTION,),
    title="Installed libraries fit the APIs of the libraries they call",
    requires=["python.venv"],
    why="two installed versions that pip check accepts can still disagree on an API; the job then "
    "fails only after it has loaded the model, one crash at a time",
)
def api_drift(ctx: CheckContext) -> CheckResult:
    if SECTION in ctx.facts.probe.errors:
        lines = ctx.facts.probe.errors[SECTION].strip().splitlines()
        return warned(f"could not read the installed libraries' code: {(lines or ['?'])[-1]}")
    data = ctx.facts.section(SECTION)
    if data is None:
        return skipped("the probe did not read the installed libraries' code")
    pairs = judge(data, f"{ctx.spec.venv}/bin/python" if ctx.spec.venv else "python3")
    details: dict[str, Any] = {"pairs": [p.to_json() for p in pairs], "cache": data.get("cache"),
                               "files_parsed": data.get("files_parsed")}
    if data.get("errors"):
        details["errors"] = data["errors"]
    errors = [p for p in pairs if p.count(ERROR)]
    warnings = [p for p in pairs if p.count(WARN)]
    checked = f"{sum(p.uses for p in pairs)} use(s) in {len(pairs)} consumer→provider pair(s)"
    if not errors and not warnings:
        return passed(f"{checked}, none that the installed definitions reject", **details)
    bad = errors or warnings
    severity = ERROR if errors else WARN
    shown = [f"{f.path}:{f.line} {f.use}: {f.why}" for p in bad for f in p.findings if f.severity == severity][:SHOWN]
    message = "; ".join(p.headline() for p in bad) + " — " + "; ".join(shown)
    remedy = Remedy(bad[0].remedy, automatic=False)
    if errors:
        return failed(message, remedy=remedy, **details)
    return warned(message, remedy=remedy, **details)
