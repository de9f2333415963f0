"""pip's own install plan, and whether running it would break what is installed.

Before ``fix`` installs anything it asks the environment's own pip what it would do
(``<python> -m pip install --dry-run --report - --quiet ...``, pip >= 22.2). pip resolves
only what it was asked for: ``pip install 'urllib3<1.21'`` happily downgrades urllib3
below what the installed ``requests`` requires and only warns afterwards. So the plan is
judged here, the way ``pip check`` judges a venv: every distribution's ``Requires-Dist``
(markers evaluated for the host, no extras) against the versions there would be after the
install. A plan that adds a conflict ``pip check`` did not report before is not run.

Pure: parsing and evaluation only. The commands run in :mod:`envdoctor.operations.fleet`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from envdoctor.engine.facts import canonicalize_name

#: pip learnt ``install --dry-run --report`` in 22.2.
MIN_PIP = Version("22.2")
DRY_RUN_FLAGS = ("--dry-run", "--report", "-", "--quiet")
#: A plan is a few KB per distribution; a host that answers more is not answering a plan.
MAX_REPORT_BYTES = 32 * 1024 * 1024


class PlanError(ValueError):
    """pip's answer is not an install report this module understands."""


@dataclass(frozen=True)
class PackageState:
    """A distribution as the plan sees it: installed now, or installed by the plan."""

    name: str
    version: str
    requires: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)


@dataclass(frozen=True)
class InstallPlan:
    """What pip would install (each with its metadata) and the marker environment it used."""

    installs: tuple[PackageState, ...]
    environment: Mapping[str, str]
    pip_version: str = ""


@dataclass(frozen=True)
class Change:
    """One distribution the plan installs: new, or replacing an installed version."""

    name: str
    old: str | None
    new: str

    @property
    def kind(self) -> str:
        if self.old is None:
            return "new"
        try:
            old, new = Version(self.old), Version(self.new)
        except InvalidVersion:
            return "replace"
        return "upgrade" if new > old else "downgrade" if new < old else "reinstall"

    def describe(self) -> str:
        if self.old is None:
            return f"{self.name} {self.new} (new)"
        return f"{self.name} {self.old} -> {self.new} ({self.kind})"


@dataclass(frozen=True)
class Conflict:
    """One unmet requirement, as ``pip check`` would report it."""

    requirer: str
    requirer_version: str
    requirement: str
    target: str

    def describe(self, after: Mapping[str, PackageState], planned: Mapping[str, PackageState]) -> str:
        who = f"{self.requirer} {self.requirer_version} requires {self.requirement}"
        key = canonicalize_name(self.target)
        if key in planned:
            return f"{who}; the plan installs {planned[key].version}"
        if key not in after:
            return f"{who}, which is not installed"
        return f"{who}; {after[key].name} {after[key].version} stays installed"


@dataclass(frozen=True)
class PlanVerdict:
    changes: tuple[Change, ...]
    #: Conflicts the plan would add to what ``pip check`` reports now, described.
    breaks: tuple[str, ...]

    @property
    def safe(self) -> bool:
        return not self.breaks

    def describe(self) -> str:
        plan = ", ".join(c.describe() for c in self.changes) or "nothing to install"
        return f"pip's plan: {plan}" + (f"; it would break: {'; '.join(self.breaks)}" if self.breaks else "")


def supports_report(pip_version: str | None) -> bool:
    """Whether this pip can print its plan (``install --dry-run --report``)."""
    if not pip_version:
        return False
    try:
        return Version(pip_version) >= MIN_PIP
    except InvalidVersion:
        return False


def dry_run_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """The install command with pip's plan-only flags after ``install``, every other option kept."""
    try:
        at = list(argv).index("install")
    except ValueError:
        raise PlanError(f"not a pip install command: {' '.join(argv)}") from None
    return (*argv[: at + 1], *DRY_RUN_FLAGS, *argv[at + 1 :])


def parse_report(text: bytes | str) -> InstallPlan:
    """pip's ``--report`` JSON (version 1): each install item's metadata, and the environment."""
    if len(text) > MAX_REPORT_BYTES:
        raise PlanError(f"pip's report is larger than {MAX_REPORT_BYTES // (1024 * 1024)} MB")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PlanError(f"pip's report is not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("install"), list):
        raise PlanError("pip's report has no install list")
    installs = []
    for item in data["install"]:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not isinstance(meta.get("version"), str):
            raise PlanError("an install item of pip's report has no metadata name and version")
        requires = meta.get("requires_dist") or []
        if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
            raise PlanError(f"requires_dist of {meta['name']} in pip's report is not a list of strings")
        installs.append(PackageState(meta["name"], meta["version"], tuple(requires)))
    environment = data.get("environment") or {}
    if not isinstance(environment, dict):
        raise PlanError("the environment of pip's report is not a table")
    return InstallPlan(tuple(installs), {str(k): str(v) for k, v in environment.items()}, str(data.get("pip_version", "")))


def _applies(req: Requirement, environment: Mapping[str, str]) -> bool:
    # As pip check does: base requirements only, so `extra` is empty.
    return req.marker is None or req.marker.evaluate({**environment, "extra": ""})


def conflicts(packages: Mapping[str, PackageState], environment: Mapping[str, str]) -> set[Conflict]:
    """What ``pip check`` reports for this set of distributions: missing and conflicting
    requirements. A malformed requirement or version is left to packages.consistent."""
    found: set[Conflict] = set()
    for dist in packages.values():
        for text in dist.requires:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if not _applies(req, environment):
                continue
            have = packages.get(canonicalize_name(req.name))
            if have is not None:
                try:
                    if req.specifier.contains(Version(have.version), prereleases=True):
                        continue
                except InvalidVersion:
                    continue
            found.add(Conflict(dist.name, dist.version, f"{req.name}{req.specifier}", req.name))
    return found


def evaluate(plan: InstallPlan, installed: Iterable[PackageState], environment: Mapping[str, str] | None = None) -> PlanVerdict:
    """The plan's changes, and the conflicts it would add to the installed distributions."""
    marker_env = dict(plan.environment or environment or {})
    before = {d.key: d for d in installed}
    planned = {d.key: d for d in plan.installs}
    after = {**before, **planned}
    changes = tuple(Change(d.name, before[d.key].version if d.key in before else None, d.version) for d in plan.installs)
    # A conflict pip check already reports is not the plan's doing, whatever versions take part.
    old = {_identity(c) for c in conflicts(before, marker_env)}
    new = sorted((c for c in conflicts(after, marker_env) if _identity(c) not in old), key=_identity)
    return PlanVerdict(changes, tuple(c.describe(after, planned) for c in new))


def _identity(conflict: Conflict) -> tuple[str, str, str]:
    return canonicalize_name(conflict.requirer), conflict.requirement, canonicalize_name(conflict.target)


def plan_from_distributions(dists: Iterable[Any]) -> list[PackageState]:
    """Installed distributions (anything with name, version and requires) as plan states."""
    return [PackageState(d.name, d.version, tuple(d.requires)) for d in dists]
