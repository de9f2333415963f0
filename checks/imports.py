"""Will the job's imports resolve? Every import its entry reaches, looked up in the environment.

The probe section ``imports`` (the drift host module's import walk alone) walks, on the host and with Python's own ``ast`` (nothing is
imported or run), from each stage's entry (its ``-m module``, script or console script, in
the folder its ``cd DIR`` names) along the imports it reaches, through the job's own files
and the libraries drift reads; without a stage, from those libraries' top-level packages.
See :mod:`envdoctor.drift.imports` for what fails, warns and only informs.
"""

from __future__ import annotations

from envdoctor.checks._common import target_env
from envdoctor.checks.packages import install_remedy
from envdoctor.engine.graph import CheckContext, check
from envdoctor.engine.results import CheckResult, Remedy, failed, passed, skipped, warned

#: Findings named in the message; the rest are in details.
SHOWN = 3
#: The probe section (envdoctor.drift.request.IMPORTS_SECTION).
SECTION = "imports"


@check(
    "code.imports",
    facts=(SECTION,),
    title="Every import the job's entry reaches resolves",
    requires=["python.venv"],
    why="a module the entry imports but the environment lacks stops the job at start-up, after the "
    "scheduler gave it the GPUs; a local folder named like a library silently replaces it",
)
def code_imports(ctx: CheckContext) -> CheckResult:
    from envdoctor.drift.imports import FAIL, INFO, WARN, judge_imports, shadow_sentence

    if unread := ctx.section_failed(SECTION, "could not walk the job's imports"):
        return unread
    data = ctx.facts.section(SECTION)
    if not isinstance(data, dict) or not isinstance(data.get("imports"), dict):
        return skipped("the probe did not walk the job's imports (an older probe, or no imports section)")
    verdict = judge_imports(data["imports"])
    env = target_env(ctx)
    prefix = env.prefix if env is not None else "the environment"
    details = {
        "entries": verdict.entries, "files": verdict.files, "imports": verdict.sites, "counts": verdict.counts,
        "missing": [f.to_json() for f in verdict.findings], "shadows": verdict.shadows,
        "not_followed": [s for sev, s in verdict.entry_problems if sev == INFO],
        "cache": data.get("cache"),
    }
    if not verdict.entries:
        return passed("nothing to walk: no stage runs on this host and no installed library depends on "
                      "transformers, vllm or sglang", **details)
    fails = [s for sev, s in verdict.entry_problems if sev == FAIL] + grouped(verdict.of(FAIL), prefix)
    warns = [f.sentence(prefix) + f" ({f.klass})" for f in verdict.of(WARN)] + \
        [shadow_sentence(s) for s in verdict.shadows]
    reached = f"{verdict.sites} import(s) in {verdict.files} file(s) from {_entries_text(verdict.entries)}"
    providers = sorted({f.provider for f in verdict.of(FAIL) + verdict.of(WARN) if f.provider})
    remedy = install_remedy(ctx, providers, automatic=False,
                            by_hand="the distribution is inferred from the import's name") if providers else None
    if fails:
        more = f" (and {len(fails) - SHOWN} more)" if len(fails) > SHOWN else ""
        tail = f"; also {len(warns)} warning(s)" if warns else ""
        return failed("; ".join(fails[:SHOWN]) + more + tail, remedy=remedy, **details)
    if warns:
        more = f" (and {len(warns) - SHOWN} more)" if len(warns) > SHOWN else ""
        if verdict.shadows and not verdict.of(WARN):
            remedy = Remedy(summary="rename or move the local folder, or start the job in another folder",
                            automatic=False)
        return warned(f"{reached}: " + "; ".join(warns[:SHOWN]) + more, remedy=remedy, **details)
    optional = len(verdict.of(INFO))
    note = f"; {optional} optional import(s) of absent modules (guarded, typing-only or in library functions)" \
        if optional else ""
    return passed(f"{reached} resolve{note}", **details)


def _entries_text(entries: list) -> str:
    if not entries:
        return "no entry"
    kinds = {e.get("kind") for e in entries}
    if kinds == {"package"}:
        names = ", ".join(str(e.get("name")) for e in entries[:4]) + (", ..." if len(entries) > 4 else "")
        return f"the libraries' packages ({names}; no stage runs on this host)"
    return ", ".join(str(e.get("module") or e.get("name")) for e in entries)


def grouped(findings: list, prefix: str) -> list[str]:
    """One sentence per missing module (its first import), with how many other imports need it:
    an environment without torch has a hundred imports of it, and one fix."""
    by_module: dict[str, list] = {}
    for finding in findings:
        by_module.setdefault(finding.missing.split(".")[0] if not finding.incomplete else finding.missing,
                             []).append(finding)
    sentences = []
    for module, group in by_module.items():
        more = f" (and {len(group) - 1} more import(s) of {module})" if len(group) > 1 else ""
        sentences.append(group[0].sentence(prefix) + more)
    return sentences
