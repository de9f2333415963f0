"""Judge what the probe's ``drift`` section found: each use against the definition it reaches.

Pure: the section's data in, :class:`PairReport` values out. Severity:

- ``error``: the use is unambiguous, unguarded, and its definition says it cannot work;
- ``warn``: the same under ``try``/``except ImportError`` (or another guarding handler),
  a version check that cannot be evaluated, ``hasattr``/``getattr`` or ``TYPE_CHECKING``;
- ``unresolved``: the provider is dynamic there (lazy module, compiled extension,
  signature-changing decorator, a base class outside the provider, a name bound twice).

Dead code is dropped: a fallback in ``except ImportError`` whose ``try`` imports resolve,
and a branch of a simple version comparison that is false for the installed version.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from envdoctor.drift.baseline import ERROR, WARN, KnownGood, view
from envdoctor.drift.signature import Callee, call_problems, constructor, function_callee
from envdoctor.probe.host.drift.resolve import Resolver, Target
from envdoctor.engine.facts import canonicalize_name

UNRESOLVED = "unresolved"
SEVERITIES = (ERROR, WARN, UNRESOLVED)


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    use: str
    severity: str
    why: str
    definition: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "use": self.use, "severity": self.severity,
                "why": self.why, "definition": self.definition}


@dataclass(frozen=True)
class PairReport:
    """One consumer distribution against one provider distribution it imports."""

    consumer: str
    consumer_version: str
    provider: str
    provider_version: str
    findings: tuple[Finding, ...] = ()
    uses: int = 0
    remedy: str = ""
    #: The provider version the consumer pins, found in another environment and checked too.
    known_good: KnownGood | None = None
    #: Uses the host settled as unresolved and only counted (a few are findings, as examples).
    unresolved_counted: int = 0

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    @property
    def title(self) -> str:
        return f"{self.consumer} {self.consumer_version} → {self.provider} {self.provider_version}"

    def headline(self) -> str:
        errors, warns = self.count(ERROR), self.count(WARN)
        parts = [f"{errors} error{'s' if errors != 1 else ''}"]
        if warns:
            parts.append(f"{warns} warning{'s' if warns != 1 else ''}")
        return f"{self.title}: {', '.join(parts)}"

    def to_json(self, verbose: bool = True) -> dict[str, Any]:
        """``verbose``: with the uses that could not be resolved too, the first
        UNRESOLVED_SHOWN of them (vLLM -> cutlass alone has 9,412: megabytes per host)."""
        unresolved = [f for f in self.findings if f.severity == UNRESOLVED][:UNRESOLVED_SHOWN if verbose else 0]
        shown = [f for f in self.findings if f.severity != UNRESOLVED or f in unresolved]
        return {"consumer": self.consumer, "consumer_version": self.consumer_version, "provider": self.provider,
                "provider_version": self.provider_version, "uses": self.uses,
                "errors": self.count(ERROR), "warnings": self.count(WARN),
                "unresolved": self.count(UNRESOLVED) + self.unresolved_counted,
                "remedy": self.remedy, "findings": [f.to_json() for f in shown],
                "known_good": self.known_good.to_json() if self.known_good else None}


#: Unresolved uses a verbose pair report lists (the rest are counted in "unresolved").
UNRESOLVED_SHOWN = 20


@dataclass
class _Judge:
    data: Mapping[str, Any]
    resolver: Resolver = field(init=False)

    def __post_init__(self) -> None:
        modules = self.data.get("modules") or {}
        self.resolver = Resolver(modules.get)
        self.versions = {canonicalize_name(k): str(v.get("version", "")) for k, v in (self.data.get("providers") or {}).items()}
        self.import_names = {k: canonicalize_name(v) for k, v in (self.data.get("import_names") or {}).items()}

    def definition(self, module: str, line: int) -> str:
        summary = self.resolver.load(module) or {}
        return f"{summary.get('path', module)}:{line}"

    def judge_use(self, use: Mapping[str, Any]) -> tuple[str, str, str] | None:
        """(severity if something is wrong, why, definition) or None when the use fits."""
        if use.get("amb"):
            return UNRESOLVED, f"{use.get('src')} is bound to more than one thing in this file", ""
        targets = self.resolver.resolve(use["path"])
        found = [t for t in targets if t.kind != "missing"]
        if not found:
            miss = targets[0] if targets else Target("missing", use["path"])
            what = "cannot be imported" if use["kind"] == "import" else "does not exist"
            return ERROR, f"{use['path']} {what}: {miss.why}", self._where_missing(miss)
        if any(t.kind == "unresolved" for t in found) and all(t.kind in ("unresolved",) for t in found):
            return UNRESOLVED, found[0].why, ""
        if use["kind"] != "call":
            return None
        return self.judge_call(use, found)

    def _where_missing(self, target: Target) -> str:
        if target.owner is not None and target.owner.binding:
            return self.definition(target.owner.module, target.owner.binding.get("line", 0))
        summary = self.resolver.load(target.module)
        return f"{summary.get('path', target.module)}" if summary else ""

    def judge_call(self, use: Mapping[str, Any], targets: list[Target]) -> tuple[str, str, str] | None:
        callees: list[Callee] = []
        variants = [t for t in targets if not (t.kind == "def" and t.binding.get("ovl"))] or targets
        for target in variants:
            if target.kind == "class":
                callees.append(constructor(self.resolver, target))
            elif target.kind == "def":
                bound = bool(use.get("call", {}).get("bound")) and not any(
                    d.split(".")[-1] in ("staticmethod", "classmethod") for d, _ in target.binding.get("dec", []))
                callees.append(function_callee(self.resolver, target, drop_first=bound))
            elif target.kind == "unresolved":
                callees.append(Callee(None, target.module, 0, use["path"], unknown=target.why))
            else:
                return None  # a value or a module: what calling it does is not known statically
        rejected: list[tuple[Callee, list[str]]] = []
        unknown: list[Callee] = []
        for callee in callees:
            if callee.signature is None:
                unknown.append(callee)
                continue
            problems = call_problems(callee.signature, use.get("call", {}), callee.drop_first)
            if not problems:
                return None  # accepted by one variant: accepted
            rejected.append((callee, problems))
        if unknown:
            return UNRESOLVED, unknown[0].unknown, self.definition(unknown[0].module, unknown[0].line) if unknown[0].line else ""
        callee, problems = rejected[0]
        why = f"{callee.what} " + "; ".join(problems)
        if len(rejected) > 1:
            why += f" (none of its {len(rejected)} variants accepts the call)"
        return ERROR, why, self.definition(callee.module, callee.line)

    def version_of(self, name: str) -> Version | None:
        dist = self.import_names.get(name, canonicalize_name(name))
        # A provider's version, else the one the host read for the name a guard tests
        # (`importlib.metadata.version("transformers")` in a file that does not call it).
        text = self.versions.get(dist) or (self.data.get("versions") or {}).get(name)
        try:
            return Version(str(text)) if text else None
        except InvalidVersion:
            return None

    def guard_severity(self, guards: Iterable[Mapping[str, Any]], try_ok: Mapping[int, bool]) -> str | None:
        """ERROR, WARN, or None when the guarded code cannot run (dead)."""
        severity = ERROR
        for guard in guards:
            if "fallback" in guard:
                if try_ok.get(int(guard["fallback"]), False):
                    return None
                severity = WARN
            elif "ver" in guard:
                holds = self.version_holds(guard)
                if holds is None:
                    severity = WARN
                elif holds == bool(guard.get("neg")):
                    return None
            else:
                severity = WARN
        return severity

    def version_holds(self, guard: Mapping[str, Any]) -> bool | None:
        installed = self.version_of(str(guard["ver"]))
        try:
            wanted = Version(str(guard["v"]))
        except InvalidVersion:
            return None
        if installed is None:
            return None
        op = guard["op"]
        return {"<": installed < wanted, "<=": installed <= wanted, ">": installed > wanted,
                ">=": installed >= wanted, "==": installed == wanted, "!=": installed != wanted}.get(op)


def describe_use(use: Mapping[str, Any]) -> str:
    src = str(use.get("src") or use["path"])
    if use["kind"] == "import":
        module, _, name = use["path"].rpartition(".")
        return f"import {use['path']}" if src == use["path"] else f"from {module} import {name}"
    if use["kind"] == "call":
        call = use.get("call", {})
        args = ["…"] * int(call.get("n", 0)) + (["*…"] if call.get("star") else [])
        args += [f"{k}=…" for k in call.get("kw", [])] + (["**…"] if call.get("dstar") else [])
        return f"{src}({', '.join(args)})"
    return src


def remedy_for(consumer: Mapping[str, Any], provider: str, provider_version: str, python: str = "<venv>/bin/python") -> str:
    """By hand: the provider version the consumer's metadata names, or a consumer upgrade."""
    for text in consumer.get("requires", []):
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != canonicalize_name(provider) or not req.specifier:
            continue
        try:
            fits = req.specifier.contains(Version(provider_version), prereleases=True)
        except InvalidVersion:
            continue
        if not fits:
            extra = ""
            if req.marker is not None and "extra" in str(req.marker):
                extra = " [" + str(req.marker).split("==")[-1].strip().strip("'\"") + "]"
            return (f"install the {provider} its code was written for ({consumer['name']} {consumer['version']}{extra} "
                    f"requires {req.name}{req.specifier}): {shlex.quote(python)} -m pip install '{req.name}{req.specifier}' "
                    f"— or upgrade {consumer['name']} to a release written for {provider} {provider_version}")
    return (f"upgrade {consumer['name']} to a release written for {provider} {provider_version}, or install the "
            f"{provider} version {consumer['name']} {consumer['version']} was written for")


def judge(data: Mapping[str, Any], python: str = "<venv>/bin/python") -> list[PairReport]:
    """Every consumer→provider pair the section found, with its findings (sorted by place)."""
    judge_ = _Judge(data)
    pairs: list[PairReport] = []
    against = {(str(b.get("consumer")), str(b.get("provider"))): (b, _Judge(view(data, b)))
               for b in data.get("baselines") or [] if isinstance(b, Mapping)}
    for consumer in data.get("consumers") or []:
        by_provider: dict[str, list[Finding]] = {}
        counts: dict[str, int] = {}
        uses = consumer.get("uses") or []
        try_ok = _try_imports_resolve(judge_, uses)
        # What the host settled (fits, or only unresolved) counts as uses of the pair.
        settled = {str(k): v for k, v in (consumer.get("settled") or {}).items() if isinstance(v, Mapping)}
        for provider, numbers in settled.items():
            counts[provider] = counts.get(provider, 0) + int(numbers.get("fits", 0)) + int(numbers.get("unresolved", 0))
            by_provider.setdefault(provider, [])
        for use in uses:
            provider = str(use.get("provider", ""))
            counts[provider] = counts.get(provider, 0) + 1
            by_provider.setdefault(provider, [])
            verdict = judge_.judge_use(use)
            if verdict is None:
                continue
            if verdict[0] == ERROR and (setter := _set_by_consumer(use, consumer)):
                verdict = (UNRESOLVED, f"{consumer['name']} sets {setter} itself at run time", "")
            severity, why, definition = verdict
            if severity != UNRESOLVED:
                graded = judge_.guard_severity(use.get("g") or [], try_ok.get(use["file"], {}))
                if graded is None:
                    continue
                severity = graded if severity == ERROR else severity
            if severity == ERROR and (consumer["name"], provider) in against:
                item, there = against[consumer["name"], provider]
                known = KnownGood.from_section(item, consumer.get("version", ""))
                severity, why = known.regrade(why, there.judge_use(use), judge_.versions.get(canonicalize_name(provider), ""))
            by_provider[provider].append(Finding(use["file"], int(use["line"]), describe_use(use), severity, why, definition))
        for provider, findings in sorted(by_provider.items()):
            version = judge_.versions.get(canonicalize_name(provider), "")
            findings.sort(key=lambda f: (SEVERITIES.index(f.severity), f.path, f.line))
            known_good = None
            remedy = remedy_for(consumer, provider, version, python)
            if (consumer["name"], provider) in against:
                known_good = KnownGood.from_section(against[consumer["name"], provider][0], consumer.get("version", ""))
                remedy += f"; {known_good.provider} {known_good.version} is installed in {known_good.prefix}"
            pairs.append(PairReport(consumer["name"], consumer.get("version", ""), provider, version, tuple(findings),
                                    counts[provider], remedy, known_good,
                                    int((settled.get(provider) or {}).get("unresolved", 0))))
    return pairs


def _set_by_consumer(use: Mapping[str, Any], consumer: Mapping[str, Any]) -> str:
    """The provider name (or a prefix of the use's) the consumer assigns at run time, or ""."""
    path = str(use.get("path", ""))
    for name in consumer.get("sets") or []:
        if path == name or path.startswith(f"{name}."):
            return str(name)
    return ""


def _try_imports_resolve(judge_: _Judge, uses: Iterable[Mapping[str, Any]]) -> dict[str, dict[int, bool]]:
    """For each file and try statement: whether every provider import in its body resolves."""
    status: dict[str, dict[int, bool]] = {}
    for use in uses:
        if use["kind"] != "import":
            continue
        for guard in use.get("g") or []:
            if "try" in guard:
                tid = int(guard["try"])
                fine = not any(t.kind == "missing" for t in judge_.resolver.resolve(use["path"]))
                file_status = status.setdefault(use["file"], {})
                file_status[tid] = file_status.get(tid, True) and fine
    return status
