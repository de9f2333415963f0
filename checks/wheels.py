"""Does every installed wheel fit the environment's interpreter?

The probe section ``wheel-tags`` reads each distribution's WHEEL ``Tag`` lines and
``Requires-Python``, and asks the environment's interpreter for its version, ABI, platform and
C library (glibc from ``os.confstr``); :mod:`envdoctor.install.wheel_tags` compares them as
pip would when choosing a wheel (and as ``uv pip check`` reports).
"""

from __future__ import annotations

from envdoctor.checks._common import target_env, target_python
from envdoctor.checks.packages import environment_payload, plan_first_remedy
from envdoctor.engine.graph import CheckContext, check
from envdoctor.engine.results import CheckResult, Remedy, errored, failed, passed, skipped

SECTION = "wheel-tags"
SHOWN = 3


@check(
    "packages.tags",
    facts=(SECTION,),
    title="Installed wheels fit the interpreter (tags, Requires-Python)",
    requires=["python.venv"],
    why="a wheel built for another Python, ABI or a newer glibc imports only to fail (undefined "
    "symbols, a missing extension); pip check does not look at tags",
)
def wheel_tags(ctx: CheckContext) -> CheckResult:
    from envdoctor.install.wheel_tags import InterpreterUnknown, judge_wheels

    if unread := ctx.section_failed(SECTION, "could not read the installed wheels' tags"):
        return unread
    data = ctx.facts.section(SECTION)
    if not isinstance(data, dict):
        return skipped("the probe did not read the installed wheels' tags")
    try:
        verdict = ctx.facts.judged_once("packages.tags", data, judge_wheels)  # (only read below)
    except InterpreterUnknown as exc:
        return errored(f"the environment's interpreter did not report its tags: {exc}")
    interp = verdict.interpreter
    details = {"interpreter": interp.describe(), "platforms": list(interp.platforms[:6]),
               "checked": verdict.checked, "no_wheel_file": verdict.no_wheel, "not_judged": verdict.not_judged,
               "mismatches": [m.to_json() for m in verdict.mismatches]}
    if not verdict.mismatches:
        note = f" ({len(verdict.no_wheel)} without a WHEEL file, not judged)" if verdict.no_wheel else ""
        return passed(f"{verdict.checked} distribution(s) fit {interp.describe()}{note}", **details)
    shown = [m.sentence() for m in verdict.mismatches[:SHOWN]]
    more = f" (and {len(verdict.mismatches) - SHOWN} more)" if len(verdict.mismatches) > SHOWN else ""
    pins = [f"{m.name}=={m.version}" for m in verdict.mismatches if m.kind == "tag" and m.version]
    summary = ("reinstall them with the environment's own pip, which picks a wheel that fits"
               + ("" if pins else "; for Requires-Python, install a version that admits this Python"))
    # Never run by fix (a reinstall may pull another build than the one the job was tested
    # with); shown as a command only once pip's plan for it breaks nothing installed.
    remedy = Remedy(summary=summary, automatic=False)
    env = target_env(ctx)
    if pins and env is not None:
        argv = (target_python(ctx), "-m", "pip", "install", "--force-reinstall", "--no-deps",
                *ctx.settings.pip_args(), *pins)
        remedy = plan_first_remedy(ctx, environment_payload(env), argv, summary)
    return failed("; ".join(shown) + more, remedy=remedy, **details)
