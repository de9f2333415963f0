"""The check graph: checks declare what they require, the engine orders and evaluates them.

A check is a pure function ``(CheckContext) -> CheckResult``; it never awaits and never
opens a connection. Checks are found, not registered by side effect: a module in
``checks/`` (or a file the user names) marks its functions with :func:`check`.
"""

from __future__ import annotations

import graphlib
import importlib
import importlib.util
import os
import pkgutil
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType

from envdoctor.config_trust import check_trusted_file
from envdoctor.engine.facts import HostFacts
from envdoctor.engine.results import SUBJECT_SEPARATOR, CheckResult, Status, errored, waive, worst
from envdoctor.errors import ConfigError
from envdoctor.inventory import HostSpec
from envdoctor.logsafe import get_logger
from envdoctor.suggestions import did_you_mean

log = get_logger(__name__)

CHECK_MARK = "__envdoctor_check__"


@dataclass(frozen=True)
class RemedySettings:
    """How remedies install packages: passed through to the venv's pip."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()

    def pip_args(self) -> tuple[str, ...]:
        args: list[str] = []
        if self.index_url:
            args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        for link in self.find_links:
            args += ["--find-links", link]
        return tuple(args)


@dataclass(frozen=True)
class CheckContext:
    """What a check may look at."""

    spec: HostSpec
    facts: HostFacts
    settings: RemedySettings = field(default_factory=RemedySettings)
    #: Results of the checks evaluated so far on this host (every prerequisite is there).
    results: Mapping[str, CheckResult] = field(default_factory=dict)

    def section_failed(self, section: str, could_not: str) -> CheckResult | None:
        """The result of a check whose probe section failed on the host (``could_not``: what
        the check could not do), or None when the section ran. One status for every check:
        ``error``, since the check could not look, which is neither a pass nor a finding."""
        error = self.facts.probe.errors.get(section)
        if error is None:
            return None
        last = (error.strip().splitlines() or ["no detail"])[-1]
        return errored(f"{could_not}: {last}", section=section)


CheckFunc = Callable[[CheckContext], CheckResult]


#: Probe sections every check may rely on: the host and its Python environments.
BASE_FACTS = ("host", "venvs")


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    func: CheckFunc
    requires: tuple[str, ...] = ()
    why: str = ""
    #: Probe sections it reads beyond BASE_FACTS; None (a user's check that does not say)
    #: means every section.
    facts: tuple[str, ...] | None = None


def check(
    id: str, *, title: str, requires: Iterable[str] = (), why: str = "", facts: Iterable[str] | None = None
) -> Callable[[CheckFunc], CheckFunc]:
    """Mark a function as the check ``id``. ``why`` is the default 'why it matters' text;
    ``facts`` names the probe sections it reads beyond the host and its environments, so that
    ``--only`` gathers no more than the chosen checks need (leave it out to get them all)."""

    def mark(func: CheckFunc) -> CheckFunc:
        setattr(func, CHECK_MARK, Check(id, title, func, tuple(requires), why,
                                        None if facts is None else tuple(facts)))
        return func

    return mark


class CheckGraph:
    """Checks in a deterministic dependency order."""

    def __init__(self, checks: Iterable[Check]) -> None:
        self.checks: dict[str, Check] = {}
        for item in checks:
            if item.id in self.checks:
                raise ConfigError(f"two checks are named {item.id!r}")
            self.checks[item.id] = item
        for item in self.checks.values():
            for req in item.requires:
                if req not in self.checks:
                    raise ConfigError(f"check {item.id!r} requires {req!r}, which no check defines")
        sorter = graphlib.TopologicalSorter({c.id: c.requires for c in self.checks.values()})
        try:
            sorter.prepare()
        except graphlib.CycleError as exc:
            raise ConfigError(f"checks require each other in a cycle: {' -> '.join(exc.args[1])}") from None
        self.order: list[str] = []
        while sorter.is_active():
            ready = sorted(sorter.get_ready())
            self.order.extend(ready)
            sorter.done(*ready)

    def sections_for(self, ids: Iterable[str] | None) -> list[str] | None:
        """The probe sections the given checks (and their prerequisites) read; None for all."""
        if ids is None:
            return None
        needed = set(BASE_FACTS)
        for check_id in self.closure(ids):
            facts = self.checks[check_id].facts
            if facts is None:
                return None
            needed.update(facts)
        return sorted(needed)

    def closure(self, ids: Iterable[str]) -> set[str]:
        """The given checks and everything they require, transitively."""
        wanted: set[str] = set()
        stack = list(ids)
        while stack:
            current = stack.pop()
            if current not in self.checks:
                raise ConfigError(f"no check named {current!r}{did_you_mean(current, self.checks)}",
                                  hint="`envdoctor checks` lists them")
            if current not in wanted:
                wanted.add(current)
                stack.extend(self.checks[current].requires)
        return wanted

    def evaluate(
        self,
        spec: HostSpec,
        facts: HostFacts,
        settings: RemedySettings = RemedySettings(),
        *,
        only: Iterable[str] | None = None,
        until: float | None = None,
    ) -> list[CheckResult]:
        """Run every check (or ``only`` those and their prerequisites) in order. ``until`` (a
        time.monotonic): the host's budget; a check not started by then is not judged (an
        ``error`` whose details say ``deadline``), so --timeout bounds the judging too."""
        selected = self.closure(only) if only is not None else set(self.checks)
        waivers = dict(spec.skip)
        results: dict[str, CheckResult] = {}
        reported: list[CheckResult] = []
        for check_id in self.order:
            if check_id not in selected:
                continue
            item = self.checks[check_id]
            if until is not None and time.monotonic() > until:
                results[check_id] = CheckResult(
                    check_id, Status.ERROR, "not judged: the host's --timeout ran out before this check ran",
                    title=item.title, details={"deadline": True})
                reported.append(results[check_id])
                continue
            result = self._evaluate_one(item, CheckContext(spec, facts, settings, results))
            if result.findings:
                # One result per subject, each waivable alone (ID:SUBJECT) or with the check (ID);
                # the check stands for the worst of those not waived to the checks after it.
                shown = [_waived(f, waivers, check_id) for f in self._subjects(item, result)]
                reported += shown
                results[check_id] = replace(worst(shown), id=check_id, subject="", findings=tuple(shown))
                continue
            # A waived check still runs and says what it found; its dependents run after it
            # (waived is not a problem, so nothing is blocked by it).
            results[check_id] = waive(result, waivers[check_id]) if check_id in waivers else result
            reported.append(results[check_id])
        return reported

    @staticmethod
    def _subjects(item: Check, result: CheckResult) -> list[CheckResult]:
        """The findings of a check as results of their own: id ``CHECK:SUBJECT``, the check's title,
        and its details (what it looked at) beside the finding's own."""
        named = []
        for finding in result.findings:
            why = finding.why or (item.why if finding.status.is_problem or finding.status is Status.WARN else "")
            named.append(replace(finding, id=f"{item.id}{SUBJECT_SEPARATOR}{finding.subject}", title=item.title,
                                 why=why, details={**result.details, **finding.details}))
        return named

    def _evaluate_one(self, item: Check, context: CheckContext) -> CheckResult:
        for req in item.requires:
            prior = context.results[req]
            if prior.status.is_problem:
                return CheckResult(
                    item.id, Status.BLOCKED, f"not run: {req} is {prior.status}",
                    title=item.title, blocked_by=req,
                )
            if prior.status is Status.SKIPPED:
                return CheckResult(item.id, Status.SKIPPED, f"not run: {req} was skipped", title=item.title)
        try:
            result = item.func(context)
        except Exception as exc:  # one broken check must not take the host's report with it
            log.exception("check_crashed", host=context.spec.name, check=item.id)
            return CheckResult(item.id, Status.ERROR, f"the check itself failed: {exc!r}", title=item.title)
        why = result.why or (item.why if result.status.is_problem or result.status is Status.WARN else "")
        if result.__class__ is not CheckResult:
            return replace(result, id=item.id, title=item.title, why=why)
        # dataclasses.replace, without its introspection of the fields: a fifth of the checks'
        # CPU at 1,000 hosts. CheckResult is frozen and has no __post_init__ to run again.
        named = object.__new__(CheckResult)
        named.__dict__.update(result.__dict__, id=item.id, title=item.title, why=why)
        return named


def _waived(finding: CheckResult, waivers: Mapping[str, str], check_id: str) -> CheckResult:
    """A finding under its own waiver (``ID:SUBJECT``) or its check's (``ID``)."""
    reason = waivers.get(finding.id, waivers.get(check_id))
    return finding if reason is None else waive(finding, reason)


def checks_in(module: ModuleType) -> list[Check]:
    return [getattr(v, CHECK_MARK) for v in vars(module).values() if hasattr(v, CHECK_MARK)]


def load_module_file(path: Path, prefix: str) -> ModuleType:
    """Import a user's Python file by path (their own checks or patches)."""
    if not path.is_file():
        raise ConfigError(f"{path} does not exist")
    check_trusted_file(path, "Python file")  # it runs here: refused if another user could have written it
    name = f"{prefix}_{path.stem}_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: {exc.msg}") from None
    except Exception as exc:  # the file's own code failed while it was loaded: its fault, said in one line
        import traceback

        del sys.modules[name]
        line = next((f.lineno for f in reversed(traceback.extract_tb(exc.__traceback__))
                     if os.path.abspath(f.filename) == os.path.abspath(path)), None)
        where = f"{path}:{line}" if line else str(path)
        raise ConfigError(f"{where}: loading it raised {type(exc).__name__}: {exc}",
                          hint="fix the file, or leave it out (run it with python to see the whole traceback)") from None
    return module


def package_modules(package: str) -> list[ModuleType]:
    root = importlib.import_module(package)
    return [
        importlib.import_module(f"{package}.{info.name}")
        for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda i: i.name)
        if not info.name.startswith("_")
    ]


def load_checks(extra_files: Iterable[Path] = ()) -> CheckGraph:
    """Every check shipped in ``checks/`` plus those in the user's own files."""
    modules = package_modules("envdoctor.checks") + [load_module_file(p, "envdoctor_user_checks") for p in extra_files]
    return CheckGraph(c for m in modules for c in checks_in(m))
