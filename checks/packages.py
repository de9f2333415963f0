"""Are the required packages installed, and do the installed ones agree with each other?"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envdoctor.facts import Distribution, Environment
from envdoctor.graph import CheckContext, check
from envdoctor.results import CheckResult, Remedy, failed, passed, skipped

from envdoctor.checks._common import target_env, target_python


@functools.lru_cache(maxsize=16384)
def parse(text: str) -> Requirement:
    """Requirement strings repeat across hosts and environments; parse each once."""
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


def install_remedy(ctx: CheckContext, requirements: Iterable[str], *, automatic: bool = True) -> Remedy:
    reqs = list(dict.fromkeys(requirements))
    argv = (target_python(ctx), "-m", "pip", "install", *ctx.settings.pip_args(), *reqs)
    return Remedy(summary=f"install {', '.join(reqs)} with the environment's own pip", argv=argv, automatic=automatic)


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


def _broken_dependencies(env: Environment) -> dict[str, list[tuple[str, str]]]:
    """pip check, on the controller: each name that is missing or at a wrong version, with
    who requires it and with which specifier."""
    broken: dict[str, list[tuple[str, str]]] = {}
    for dist in sorted(env.installed.values(), key=lambda d: d.key):
        for text in dist.requires:
            try:
                req = parse(text)
            except InvalidRequirement:
                continue  # a malformed Requires-Dist is the package's problem, not the host's
            if not applies(text, env.markers):
                continue
            have = env.installed.get(canonicalize_name(req.name))
            if have is None or not satisfied_by(req, have):
                name = have.name if have else req.name
                broken.setdefault(name, []).append((f"{dist.name} {dist.version}", str(req.specifier)))
    return broken


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
    broken = _broken_dependencies(env)
    if not broken:
        return passed(f"{len(env.installed)} distributions, all requirements met")
    parts, wanted, missing, conflicts = [], [], [], {}
    for name, wants in sorted(broken.items()):
        have = env.installed.get(canonicalize_name(name))
        if have is None:
            who = ", ".join(w for w, _ in wants)
            parts.append(f"{who} require{'s' if len(wants) == 1 else ''} {name}, which is not installed")
            missing.append(name)
        else:
            parts += [f"{w} requires {name}{spec}, but {have.version} is installed" for w, spec in wants]
            conflicts[name] = [[w, spec] for w, spec in wants]
        wanted.append(f"{name}{SpecifierSet(','.join(spec for _, spec in wants if spec))}")
    # Never applied by fix on its own: installing a library's missing dependency (often torch)
    # lets pip re-resolve versions other packages rely on. Name it with --require to have
    # fix install it.
    remedy = install_remedy(ctx, wanted, automatic=False)
    return failed(
        "; ".join(parts),
        remedy=remedy,
        missing=sorted(missing),
        conflicts={k: [list(w) for w in v] for k, v in conflicts.items()},
    )
