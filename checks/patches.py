"""One check per patch: is it pending, applied, not applicable, or in conflict on this host?"""

from __future__ import annotations

import base64
import os
from dataclasses import replace
from collections.abc import Iterable, Mapping
from typing import Any

from envdoctor.checks._common import target_env
from envdoctor.patches import trust_remote_code

from envdoctor.engine.facts import Environment, canonicalize_name
from envdoctor.engine.graph import Check, CheckContext, CheckFunc, check
from envdoctor.engine.results import CheckResult, Remedy, errored, failed, passed, skipped, warned
from envdoctor.patching.engine import (
    APPLIED,
    CONFLICT,
    NOT_APPLICABLE,
    PENDING,
    REFUSED,
    FileChange,
    Patch,
    PatchFiles,
    PatchPlan,
    TransformMismatch,
    UndeclaredChange,
    DeferredChanges,
    changes_remedy,
    load_patches,
    patch_remedy,
    plan_patch,
    sha256_hex,
    shipped_patches,
    transform_source,
    unified_diff,
)

CONSENT_HINT = "pass --trust-remote-code (or trust_remote_code = true in envdoctor.toml) to let fix apply it"

#: Patch checks read the files the ``patch_files`` probe section fetched.
PATCH_FACTS = ("patch_files",)


def reinstall_remedy(plan: PatchPlan, env: Environment) -> Remedy:
    """A file the patch does not recognise: put the distribution's own files back, by hand."""
    requirement = f"{plan.patch.distribution}=={plan.version}" if plan.version else plan.patch.distribution
    if env.externally_managed:  # PEP 668: pip refuses, and the system's tools own these files
        return Remedy(summary=f"look at the local changes; {env.python} is externally managed (PEP 668): reinstall "
                              f"{requirement} with the system's package manager, or make a venv for the job",
                      automatic=False)
    return Remedy(
        summary=f"look at the local changes, then reinstall {requirement} so the patch can apply",
        argv=(env.python, "-m", "pip", "install", "--force-reinstall", "--no-deps", requirement),
        automatic=False,
    )


def result_for(plan: PatchPlan, env: Environment, *, consent: bool) -> CheckResult:
    details = {"state": plan.state, "patch": plan.patch.id, "files": list(plan.patch.files)}
    if plan.version:
        details["version"] = plan.version
    if plan.patch.fixed_in:
        details["fixed_in"] = plan.patch.fixed_in
    if plan.state == APPLIED:
        return passed(f"applied: {plan.message}", **details)
    if plan.state == NOT_APPLICABLE:
        if not plan.version:
            return skipped(plan.message, **details)
        return passed(f"not needed: {plan.message}", **details)
    if plan.state == CONFLICT:
        return failed(f"conflict: {plan.message}", remedy=reinstall_remedy(plan, env), **details)
    if plan.state == REFUSED:
        # The patch itself is at fault (it changes what it does not declare): no remedy.
        return errored(plan.message, diff=plan.diff, **details)
    assert plan.state == PENDING
    remedy = patch_remedy(plan, env, consent=consent)
    if not remedy.automatic:  # (held back only for consent)
        remedy = replace(remedy, unlocked_by="--trust-remote-code")
    if plan.diff:
        details["diff"] = plan.diff
    if not remedy.automatic:
        return warned(f"pending: {plan.message}; {CONSENT_HINT}", remedy=remedy, **details)
    return failed(f"pending: {plan.message}", remedy=remedy, **details)


def evaluator(patch: Patch) -> CheckFunc:
    def evaluate(ctx: CheckContext) -> CheckResult:
        env = target_env(ctx)
        assert env is not None  # python.venv passed
        files = PatchFiles.from_facts(ctx.facts)
        if files is None:
            failed = ctx.section_failed("patch_files", "the probe could not read the patched files")
            return failed or errored("the probe could not read the patched files: no data")
        if files.error:
            return errored(files.error)
        return result_for(plan_patch(patch, env, files), env, consent=ctx.spec.trust_remote_code)

    return evaluate


def _covered(env: Environment, patches: Iterable[Patch]) -> set[tuple[str, str]]:
    """(distribution, file) pairs a dedicated patch owns in this environment."""
    owned = set()
    for patch in patches:
        dist = env.installed.get(canonicalize_name(patch.distribution))
        if dist is not None and patch.applies_to(dist.version):
            owned.update((canonicalize_name(patch.distribution), path) for path in patch.files)
    return owned


def trust_remote_code_remedy(
    ctx: CheckContext, items: Iterable[Mapping[str, Any]], gaps: Iterable[Any],
    exports: Mapping[str, Any] | None = None, refused: list[UndeclaredChange] | None = None,
) -> Remedy | None:
    """The generic patch for the scanner's ``missing`` sites in installed files, or None.

    ``items`` are the files the ``sources`` probe section shipped; ``gaps`` the sites found in
    them (anything with ``.distribution`` and ``.site.path/.line/.column/.callee/.state``);
    ``exports`` the re-export table of each distribution (canonical name -> ExportTable) the
    scanner used. Each call is named by line, column and callee, and the new text is proven
    to add exactly one keyword per named call (a file whose patch would change anything else
    is left alone and appended to ``refused``). A file that a dedicated patch owns
    (speculators' generator) is left to it, so the two never collide; a call with
    ``**kwargs`` is never patched. Automatic only with the user's consent.
    """
    env = target_env(ctx)
    if env is None:
        return None
    sites: dict[tuple[str, str], set[tuple[int, int, str]]] = {}
    for gap in gaps:
        if gap.site.state == "missing":
            sites.setdefault((canonicalize_name(gap.distribution), gap.site.path), set()).add(
                (gap.site.line, gap.site.column, gap.site.callee))
    covered = _covered(env, load_patches(ctx.spec.patches).patches)
    files = [item for item in items
             if _item_key(item) in sites and _item_key(item) not in covered]
    if not files:
        return None

    def changes() -> list[FileChange]:
        # libcst on each whole file (vllm's are thousands of lines): seconds of the controller's
        # CPU, worth paying only when fix applies or shows the patch, never for a `check`.
        made = []
        for item in files:
            change = _file_change(item, sites[_item_key(item)], exports, refused)
            if change is not None:
                made.append(change)
        return made

    remedy = changes_remedy(trust_remote_code.PATCH_ID, DeferredChanges(changes), env,
                            automatic=ctx.spec.trust_remote_code,
                            files=[str(item.get("path", "")) for item in files])
    return remedy if remedy.automatic else replace(remedy, unlocked_by="--trust-remote-code")


def _item_key(item: Mapping[str, Any]) -> tuple[str, str]:
    return canonicalize_name(str(item.get("distribution", ""))), str(item.get("path", ""))


def _file_change(item: Mapping[str, Any], calls: set[tuple[int, int, str]], exports: Mapping[str, Any] | None,
                 refused: list[UndeclaredChange] | None) -> FileChange | None:
    """The generic patch of one shipped file at these calls, proven; None when it does not apply."""
    key = _item_key(item)
    data = base64.b64decode(str(item["data"]))
    patch = trust_remote_code.for_file(str(item["distribution"]), str(item.get("version", "")), key[1],
                                       calls, (exports or {}).get(key[0]))
    try:
        new = transform_source(patch, data, key[1])
    except TransformMismatch:
        return None
    except UndeclaredChange as exc:
        if refused is not None:
            refused.append(exc)
        return None
    if new is None:
        return None
    site = str(item.get("site", ""))
    return FileChange(patch.id, os.path.join(site, key[1]), key[1], patch.distribution,
                      str(item.get("version", "")), sha256_hex(data), sha256_hex(new), new,
                      unified_diff(key[1], data, new), record_site=site)


def patch_checks(patches: Iterable[Patch]) -> list[Check]:
    """The checks for patches given at run time (the user's --patches files)."""
    return [
        Check(f"patch.{p.id}", f"Patch: {p.summary}", evaluator(p), ("python.venv",), p.why, PATCH_FACTS)
        for p in patches
    ]


# The graph finds checks as marked module attributes, so each shipped patch gets one here.
for _patch in shipped_patches():
    globals()[f"check_{_patch.id.replace('-', '_')}"] = check(
        f"patch.{_patch.id}", title=f"Patch: {_patch.summary}", requires=["python.venv"], why=_patch.why,
        facts=PATCH_FACTS,
    )(evaluator(_patch))
