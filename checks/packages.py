"""Are the required packages installed, and do the installed ones agree with each other?"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from envdoctor.checks._common import (
    NOT_CHOSEN,
    chosen_venv,
    init_line,
    system_interpreter,
    target_env,
    target_python,
)
from packaging.version import InvalidVersion, Version

from envdoctor.engine.facts import Distribution, Environment, canonicalize_name
from envdoctor.engine.graph import CheckContext, check
from envdoctor.engine.results import CheckResult, Remedy, failed, passed, skipped
from envdoctor.transport.interface import shell_join

if TYPE_CHECKING:
    from packaging.requirements import Requirement

    from envdoctor.install.consistency import Consistency


@functools.lru_cache(maxsize=16384)
def parse(text: str) -> Requirement:
    """Requirement strings repeat across hosts and environments; parse each once."""
    from packaging.requirements import Requirement  # (its parser: 20 ms of start-up)

    return Requirement(text)


@functools.lru_cache(maxsize=16384)
def parse_version(text: str) -> Version:
    return Version(text)


def applies(text: str, markers: Mapping[str, str]) -> bool:
    """Whether a requirement's marker holds on the host (base requirements only: no extra)."""
    if parse(text).marker is None:
        return True
    return _marker_holds(text, tuple(sorted(markers.items())))


@functools.lru_cache(maxsize=16384)
def _marker_holds(text: str, markers: tuple[tuple[str, str], ...]) -> bool:
    # Keyed by the requirement's text: hashing a packaging Requirement formats it again, which
    # cost more than the evaluation it saved (about 6 ms per host of a fleet).
    marker = parse(text).marker
    assert marker is not None
    return marker.evaluate({**dict(markers), "extra": ""})


def satisfied_by(req: Requirement, dist: Distribution) -> bool:
    if not req.specifier:
        return True
    try:
        return req.specifier.contains(parse_version(dist.version), prereleases=True)
    except InvalidVersion:
        return True  # a legacy version string cannot be compared; do not guess


def unmet_requirements(
    env: Environment, requirements: Iterable[str]
) -> list[tuple[Requirement, Distribution | None]]:
    """Requirements the environment does not satisfy, with what is installed instead."""
    unmet = []
    for text in requirements:
        req = parse(text)
        if env.markers and not applies(text, env.markers):
            continue
        dist = env.installed.get(canonicalize_name(req.name))
        if dist is None or not satisfied_by(req, dist):
            unmet.append((req, dist))
    return unmet


def install_remedy(ctx: CheckContext, requirements: Iterable[str], *, automatic: bool = True, by_hand: str = "",
                   unlocked_by: str = "", plan_first: bool = False) -> Remedy:
    """``<python> -m pip install REQS`` with the job's absolute interpreter. fix runs it only into
    an interpreter the user chose, and only after pip's own plan shows it breaks nothing
    (envdoctor.install.pip_remedy); ``by_hand`` says why it is only shown, ``unlocked_by``
    which options would let fix run it (``--venv PATH`` is added when no venv was chosen).
    ``plan_first``: a command only shown is not shown before pip's plan for it is judged (fix
    does that, check runs no pip): the remedy names ``envdoctor fix HOST --dry-run`` instead."""
    reqs = list(dict.fromkeys(requirements))
    env = target_env(ctx)
    if env is not None and env.externally_managed:
        return externally_managed_remedy(ctx, env, reqs)
    argv = (target_python(ctx), "-m", "pip", "install", *ctx.settings.pip_args(), *reqs)
    summary = f"install {', '.join(reqs)} with the environment's own pip"
    if not chosen_venv(ctx):
        by_hand = by_hand or NOT_CHOSEN
        unlocked_by = " ".join(filter(None, ("--venv PATH", unlocked_by)))
    if by_hand:
        summary += f" (shown only: {by_hand})"
        automatic = False
    payload = environment_payload(env) if env is not None else {}
    if plan_first and not automatic and payload:
        return plan_first_remedy(ctx, payload, argv, summary, unlocked_by)
    return Remedy(summary=summary, argv=argv, automatic=automatic, payload=payload,
                  unlocked_by=unlocked_by if not automatic else "")


def plan_first_remedy(ctx: CheckContext, payload: dict[str, Any], argv: tuple[str, ...], summary: str,
                      unlocked_by: str = "") -> Remedy:
    """A pip command shown for a person to type only once pip's plan for it is judged (fix asks
    pip; check runs no pip, so it names ``envdoctor fix HOST --dry-run``): see
    envdoctor.install.pip_remedy.judge_shown_install. ``payload`` is install_payload's."""
    from envdoctor.install.pip_remedy import plan_first_payload

    dry_run = shell_join(("envdoctor", "fix", ctx.spec.name, "--dry-run"))
    return Remedy(summary=f"{summary}: `{dry_run}` asks pip for its plan and shows the command "
                          "if that plan breaks nothing installed",
                  automatic=False, payload=plan_first_payload(payload, argv, summary), unlocked_by=unlocked_by)


def environment_payload(env: Environment) -> dict[str, Any]:
    """What fix needs to judge pip's plan of an install into ``env`` (Remedy.payload)."""
    from envdoctor.install.pip_plan import plan_from_distributions  # (only when there is a remedy)
    from envdoctor.install.pip_remedy import install_payload

    pip = env.installed.get("pip")
    return install_payload(env.prefix, pip.version if pip else None,
                           plan_from_distributions(env.installed.values()), dict(env.markers))


def externally_managed_remedy(ctx: CheckContext, env: Environment, requirements: Iterable[str]) -> Remedy:
    """No install into an externally-managed interpreter (PEP 668: pip refuses, and the
    system's tools rely on its packages): the advice is a venv for the job, then init."""
    reqs = " ".join(shlex.quote(r) for r in requirements)
    return Remedy(
        summary=f"{env.executable or env.python} is externally managed (PEP 668): nothing is installed into it; "
                f"make a venv for the job (python3 -m venv ~/venv-job && ~/venv-job/bin/python -m pip install "
                f"{reqs}), then run `{init_line(ctx)}` (or pass --venv)",
        automatic=False,
    )


@check(
    "packages.required",
    facts=(),
    title="Required packages installed",
    requires=["python.venv"],
    why="the job imports these; a missing one fails after the model has started loading",
)
def required(ctx: CheckContext) -> CheckResult:
    if not ctx.spec.requires:
        return skipped("no packages required (use --require or requires in envdoctor.toml)")
    env = target_env(ctx)
    assert env is not None  # python.venv passed
    unmet = unmet_requirements(env, ctx.spec.requires)
    if not unmet:
        found = [f"{r} ({env.installed[canonicalize_name(parse(r).name)].version})"
                 for r in ctx.spec.requires if canonicalize_name(parse(r).name) in env.installed]
        return passed(f"installed: {', '.join(found)}" if found else "nothing required applies to this host")
    parts = [
        f"{req.name} is missing" if dist is None else f"{req.name} {dist.version} does not satisfy {req.specifier}"
        for req, dist in unmet
    ]
    return failed(
        "; ".join(parts) + f" in {env.prefix}",
        remedy=install_remedy(ctx, (str(req) for req, _ in unmet)),
        unmet=[str(req) for req, _ in unmet],
    )


@check(
    "packages.consistent",
    facts=(),
    title="Installed packages' own requirements are met",
    requires=["python.venv"],
    why="a library whose dependency drifted fails at import or, worse, misbehaves at run time",
)
def consistent(ctx: CheckContext) -> CheckResult:
    env = target_env(ctx)
    assert env is not None  # python.venv passed
    if not env.markers:
        return skipped(f"{env.python} did not report its platform, so markers cannot be evaluated")
    from envdoctor.install.consistency import check_environment, summary_lines, wanted_requirements

    found = check_environment(env)
    details = {
        "pip_check": {"ok": found.pip_ok, "lines": found.pip_lines(),
                      "missing": [u.to_json() for u in found.missing],
                      "conflicts": [u.to_json() for u in found.conflicts],
                      "parse_errors": [e.to_json() for e in found.parse_errors]},
        "extras": [u.to_json() for u in found.extras],
        "duplicates": [d.to_json() for d in found.duplicates],
    }
    message = "\n".join(summary_lines(found, len(env.installed)))
    if found.ok:
        return passed(message, **details)
    system = system_interpreter(ctx)
    if system is not None:
        return system_consistency(ctx, system, found, details)
    # Never applied by fix on its own: installing a library's missing dependency (often torch)
    # lets pip re-resolve versions other packages rely on. Name it with --require to have
    # fix install it.
    wanted = sorted(wanted_requirements(found.missing + found.conflicts + found.extras))
    remedy, unsafe = consistency_remedy(ctx, env, wanted)
    message = "\n".join([message, *unsafe])
    return failed(message, remedy=remedy, missing=sorted({u.name for u in found.missing}), **details)


def consistency_remedy(ctx: CheckContext, env: Environment, wanted: list[str]) -> tuple[Remedy | None, list[str]]:
    """The by-hand install of ``wanted``, less what provably breaks an installed requirement
    (each of those a "no safe remedy" line instead: a remedy shown to type is held to what
    fix would run). What is left is shown as a command only after pip's plan for it (fix)."""
    from envdoctor.install.consistency import breaking_requirements

    if not wanted:  # (parse errors, duplicate folders: nothing an install would mend)
        return None, []
    breaking = breaking_requirements(env, wanted)
    lines = [f"no safe remedy: {reason}" for reason in breaking.values()]
    safe = [w for w in wanted if w not in breaking]
    if not safe:
        return None, lines
    return install_remedy(ctx, safe, automatic=False, unlocked_by=require_flags(safe), plan_first=True), lines


def require_flags(requirements: Iterable[str]) -> str:
    """``--require 'pycairo>=1.16.0'``: naming a dependency is what lets fix install it."""
    return " ".join(f"--require {shlex.quote(r)}" for r in requirements)


def system_consistency(ctx: CheckContext, env: Environment, found: Consistency,
                       details: dict[str, Any]) -> CheckResult:
    """The system interpreter with no environment chosen: what the job needs of it (``--require``,
    the models' code, the stages' commands, and what those require in turn) is judged; the
    distro's own packages that none of that touches are noted, never failed (there is no
    ``info`` status: a pass, with ``details.not_gated``)."""
    from envdoctor.install.consistency import (
        requirement_closure,
        restricted_to,
        summary_lines,
        wanted_requirements,
    )
    from envdoctor.install.env_choice import job_needs

    needs = [need.requirement for need in job_needs(ctx.spec, ctx.facts, ctx.spec.stage_commands)]
    judged, noted = restricted_to(found, requirement_closure(env, needs))
    noted_lines = [line.strip() for line in summary_lines(noted, len(env.installed))
                   if not line.startswith("pip check:")]
    details = {**details, "not_gated": noted_lines}
    note = f"not gated (the system's own packages of {env.executable or env.python}; nothing the job needs touches them):"
    notes = [note, *(f"  {line}" for line in noted_lines)] if noted_lines else []
    if judged.ok:
        asked = ", ".join(sorted({need.split(";")[0].strip() for need in needs})) or "nothing named"
        return passed("\n".join([f"what the job needs ({asked}) has no broken requirement", *notes]), **details)
    wanted = sorted(wanted_requirements(judged.missing + judged.conflicts + judged.extras))
    remedy, unsafe = consistency_remedy(ctx, env, wanted)
    message = "\n".join([*summary_lines(judged, len(env.installed)), *unsafe, *notes])
    return failed(message, remedy=remedy, missing=sorted({u.name for u in judged.missing}), **details)
