"""What ``pip check`` says about an environment, computed on the controller from the probe's
metadata, and what it does not say: duplicate metadata folders and extras in use.

pip's own rules (pip/_internal/operations/check.py and metadata/importlib): one distribution
per name, the first found on sys.path (each folder in directory order); a distribution whose
version or ``Requires-Dist`` cannot be parsed is "Error parsing dependencies" and left out of
the set, so what requires it reads as not installed; requirements whose marker does not hold
(with ``extra`` empty) are ignored; a version is checked with prereleases allowed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from functools import lru_cache

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name as _canonicalize_name
from packaging.version import InvalidVersion, Version

from envdoctor.engine.facts import Distribution, Environment

#: canonicalize_name is a regex substitution; a fleet asks it the same few hundred names.
canonicalize_name = lru_cache(maxsize=65536)(_canonicalize_name)

_EXTRA_IN_MARKER = re.compile(r"""\bextra\s*==\s*["']([^"']+)["']""")
#: PEP 508's marker variables (``extra`` aside) as packaging prints a parsed marker: legacy
#: spellings such as ``os.name`` or ``python_implementation`` come out as these.
_MARKER_VARIABLES = ("implementation_name", "implementation_version", "os_name", "platform_machine",
                     "platform_python_implementation", "platform_release", "platform_system",
                     "platform_version", "python_full_version", "python_version", "sys_platform")
_VARIABLE_IN_MARKER = re.compile(r"\b(" + "|".join(_MARKER_VARIABLES) + r")\b")


@dataclass(frozen=True)
class Unmet:
    """``who`` requires ``requirement``; ``have`` is the version installed (None: missing)."""

    who: str
    who_version: str
    requirement: Requirement
    have: str | None = None
    #: For extras in use: the extra of ``who`` that names the requirement.
    extra: str = ""

    @property
    def name(self) -> str:
        return canonicalize_name(self.requirement.name)

    def pip_line(self) -> str:
        """The line ``pip check`` prints for it."""
        if self.have is None:
            return f"{self.who} {self.who_version} requires {self.name}, which is not installed."
        return f"{self.who} {self.who_version} has requirement {self.requirement}, but you have {self.name} {self.have}."

    def extra_line(self) -> str:
        return f"{self.who} {self.who_version} [{self.extra}] requires {self.requirement}; {self.have} is installed"

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"distribution": self.who, "version": self.who_version,
                                   "requirement": str(self.requirement), "name": self.name, "installed": self.have}
        if self.extra:
            data["extra"] = self.extra
        return data


@dataclass(frozen=True)
class ParseError:
    """pip's "Error parsing dependencies of NAME": a version or Requires-Dist line it cannot read."""

    name: str
    path: str
    line: str
    error: str

    def pip_line(self) -> str:
        return f"Error parsing dependencies of {self.name}: {self.error} (in {self.line!r} of {self.path})"

    def to_json(self) -> dict[str, str]:
        return {"distribution": self.name, "path": self.path, "line": self.line, "error": self.error}


@dataclass(frozen=True)
class Duplicate:
    """Two or more metadata folders of one distribution in one folder of sys.path."""

    name: str
    used: Distribution
    others: tuple[Distribution, ...]

    def line(self) -> str:
        others = ", ".join(f"{d.path} ({d.version})" for d in self.others)
        return f"{self.name}: {len(self.others) + 1} metadata folders in {self.used.site}: " \
               f"{self.used.path} ({self.used.version}, the one Python and pip use) and {others}"

    def to_json(self) -> dict[str, object]:
        return {"distribution": self.name, "site": self.used.site, "used": self.used.path,
                "used_version": self.used.version, "others": [d.path for d in self.others]}


@dataclass
class Consistency:
    """pip check's verdict (missing, conflicts, parse_errors) and envdoctor's own findings."""

    missing: list[Unmet] = field(default_factory=list)
    conflicts: list[Unmet] = field(default_factory=list)
    parse_errors: list[ParseError] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    extras: list[Unmet] = field(default_factory=list)

    @property
    def pip_ok(self) -> bool:
        return not (self.missing or self.conflicts or self.parse_errors)

    @property
    def ok(self) -> bool:
        return self.pip_ok and not self.duplicates and not self.extras

    def pip_lines(self) -> list[str]:
        return [u.pip_line() for u in self.missing + self.conflicts] + [e.pip_line() for e in self.parse_errors]


@dataclass(frozen=True)
class _Parsed:
    dist: Distribution
    version: Version
    requires: tuple[tuple[str, Requirement], ...]
    #: The marker variables its requirements read: only their values can change a verdict.
    variables: frozenset[str] = frozenset()


@lru_cache(maxsize=16384)
def _parse(dist: Distribution) -> _Parsed | ParseError:
    """Parsed once per distinct metadata for the whole run (the hosts of a fleet share most)."""
    name = canonicalize_name(dist.name)
    if dist.error:
        return ParseError(name, dist.path, "METADATA", dist.error)
    try:
        version = Version(dist.version)
    except InvalidVersion as exc:
        return ParseError(name, dist.path, f"Version: {dist.version}", _first_line(exc))
    requires = []
    for text in dist.requires:
        try:
            requires.append((text, _requirement(text.strip())))
        except InvalidRequirement as exc:
            return ParseError(name, dist.path, f"Requires-Dist: {text.strip()}", _first_line(exc))
    variables = frozenset(v for _, req in requires if req.marker is not None
                          for v in _VARIABLE_IN_MARKER.findall(str(req.marker)))
    return _Parsed(dist, version, tuple(requires), variables)


@lru_cache(maxsize=65536)
def _requirement(text: str) -> Requirement:
    """Parsed once per text for the whole run: a fleet's hosts share most of their metadata.
    (Callers never change the object; one they want to change is a copy.)"""
    return Requirement(text)


def _first_line(exc: Exception) -> str:
    """packaging's messages draw a caret under the text on more lines; the report keeps one."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


#: Marker verdicts by (requirement text, the host's marker values, extra). Evaluating a
#: packaging Marker costs tens of microseconds and a venv has thousands of Requires-Dist
#: lines with markers, the same on most hosts of a fleet.
_VERDICTS: dict[tuple[str, tuple[tuple[str, str], ...], str], bool] = {}
_VERDICTS_MAX = 200_000


def _holds(text: str, marker: Marker | None, markers: Mapping[str, str], extra: str = "",
           env_key: tuple[tuple[str, str], ...] | None = None) -> bool:
    if marker is None:
        return True
    key = (text, env_key if env_key is not None else tuple(sorted(markers.items())), extra)
    verdict = _VERDICTS.get(key)
    if verdict is None:
        if len(_VERDICTS) >= _VERDICTS_MAX:
            _VERDICTS.clear()
        verdict = _VERDICTS[key] = marker.evaluate({**markers, "extra": extra})
    return verdict


def duplicates(env: Environment) -> list[Duplicate]:
    """Distributions with more than one metadata folder in the same site folder; the first in
    the probe's order (sys.path, then directory order) is the one importlib.metadata returns."""
    groups: dict[tuple[str, str], list[Distribution]] = {}
    for dist in env.distributions:
        groups.setdefault((dist.site, dist.key), []).append(dist)
    return [Duplicate(key, found[0], tuple(found[1:])) for (_, key), found in groups.items() if len(found) > 1]


def extras_of(parsed: _Parsed) -> list[str]:
    names = []
    for text, req in parsed.requires:
        if req.marker is not None and "extra" in text:
            names += [canonicalize_name(e) for e in _EXTRA_IN_MARKER.findall(text)]
    return list(dict.fromkeys(names))


#: Verdicts by (distributions, marker values): the nodes of a fleet built from one image
#: have the same environment, which is then worked out once.
_ENVIRONMENTS: dict[tuple[Any, ...], Consistency] = {}
_ENVIRONMENTS_MAX = 256


#: The same verdicts by the environment object itself (kept in the value, so that its id
#: cannot be reused): hosts that sent the same answer share one (envdoctor.probe.shared_answers),
#: and hashing 150 distributions for the key above is then work done for nothing.
_BY_OBJECT: dict[int, tuple[Environment, Consistency]] = {}


def check_environment(env: Environment) -> Consistency:
    """``pip check`` for ``env`` (with the host's markers), plus duplicates and extras in use."""
    seen = _BY_OBJECT.get(id(env))
    if seen is not None and seen[0] is env:
        found = seen[1]
    else:
        # Keyed by the marker values the requirements read, not all of them: hosts that
        # differ only in, say, their kernel release (platform_release) share one verdict.
        env_key = marker_key(env)
        key = (env.distributions, env_key)
        found = _ENVIRONMENTS.get(key)
        if found is None:
            found = _check_environment(env, env_key)
            if len(_ENVIRONMENTS) >= _ENVIRONMENTS_MAX:
                _ENVIRONMENTS.clear()
            _ENVIRONMENTS[key] = found
        if len(_BY_OBJECT) >= _ENVIRONMENTS_MAX:
            _BY_OBJECT.clear()
        _BY_OBJECT[id(env)] = (env, found)
    # A copy of the lists: what a caller does with its verdict never reaches another host's.
    return Consistency(list(found.missing), list(found.conflicts), list(found.parse_errors),
                       list(found.duplicates), list(found.extras))


def marker_key(env: Environment) -> tuple[tuple[str, str | None], ...]:
    """The values of the marker variables that any requirement of ``env`` reads, sorted."""
    variables: set[str] = set()
    for dist in env.distributions:
        if dist.active:
            parsed = _parse(dist)
            if not isinstance(parsed, ParseError):
                variables |= parsed.variables
    return tuple((name, env.markers.get(name)) for name in sorted(variables))


def _check_environment(env: Environment, env_key: tuple[tuple[str, str | None], ...]) -> Consistency:
    result = Consistency(duplicates=duplicates(env))
    package_set: dict[str, _Parsed] = {}
    for dist in env.distributions:
        if not dist.active:
            continue
        parsed = _parse(dist)
        if isinstance(parsed, ParseError):
            result.parse_errors.append(parsed)
        else:
            package_set[dist.key] = parsed
    markers = env.markers
    wants_of = {key: _wants(parsed, markers, env_key) for key, parsed in package_set.items()}
    graph = requirement_graph(wants_of)
    for key, parsed in package_set.items():
        who, who_version = key, str(parsed.version)
        wants = wants_of[key]
        for name, req in wants.always:
            have = package_set.get(name)
            if have is None:
                result.missing.append(Unmet(who, who_version, req))
            elif not _contains(req, have.version):
                result.conflicts.append(Unmet(who, who_version, req, str(have.version)))
        if wants.by_extra:
            result.extras += _extras_in_use(parsed, wants, package_set, graph)
    return result


#: A node of the requirement graph: a distribution's own requirements (extra "") or one extra's.
Node = tuple[str, str]


@dataclass(frozen=True)
class RequirementGraph:
    """Who requires what on this host: every installed distribution's requirements (markers
    evaluated with ``extra`` empty), plus the requirements of every extra that something in
    the graph asks for (``torch`` -> ``cuda-toolkit[cublas,...]``, ``vllm`` ->
    ``humming-kernels[cu13]`` -> ``nvidia-cuda-nvcc``), transitively. An extra nobody asks
    for adds nothing."""

    #: name -> the nodes whose requirements name it.
    required_by: Mapping[str, set[Node]]
    #: (name, extra) pairs that a node of the graph asks for (installed or not).
    asked: set[Node]
    #: name -> every requirement of the graph that names it, with the node it comes from.
    requirements: Mapping[str, list[tuple[Node, Requirement]]]


def requirement_graph(wants_of: Mapping[str, _Wants]) -> RequirementGraph:
    """The graph over ``wants_of`` (what each installed distribution requires on this host).
    (Built for every environment checked: plain loops, the names already canonical in _Wants.)"""
    required_by: dict[str, set[Node]] = {}
    requirements: dict[str, list[tuple[Node, Requirement]]] = {}
    asked: set[Node] = set()
    stack: list[Node] = []

    def add(node: Node, reqs: Sequence[tuple[str, Requirement]]) -> None:
        for name, req in reqs:
            nodes = required_by.get(name)
            if nodes is None:
                required_by[name] = {node}
                requirements[name] = [(node, req)]
            else:
                nodes.add(node)
                requirements[name].append((node, req))
            if req.extras:
                stack.extend((name, canonicalize_name(extra)) for extra in req.extras)

    for key, wants in wants_of.items():
        add((key, ""), wants.always)
    while stack:
        node = stack.pop()
        if node in asked:
            continue
        asked.add(node)
        wants = wants_of.get(node[0])
        if wants is not None:
            for extra, reqs in wants.by_extra:
                if extra == node[1]:
                    add(node, [(canonicalize_name(req.name), req) for req in reqs])
    return RequirementGraph(required_by, asked, requirements)


@dataclass(frozen=True)
class _Wants:
    """What one distribution requires on one kind of host: without an extra, and per extra
    (only requirements that hold with the extra and not without it)."""

    always: tuple[tuple[str, Requirement], ...]
    by_extra: tuple[tuple[str, tuple[Requirement, ...]], ...]


_WANTS: dict[tuple[Distribution, tuple[tuple[str, str], ...]], _Wants] = {}


def _wants(parsed: _Parsed, markers: Mapping[str, str], env_key: tuple[tuple[str, str], ...]) -> _Wants:
    """Worked out once per (distribution, marker values): the hosts of a fleet share both."""
    cache_key = (parsed.dist, env_key)
    found = _WANTS.get(cache_key)
    if found is not None:
        return found
    always = []
    extras: dict[str, list[Requirement]] = {}
    for text, req in parsed.requires:
        if _holds(text, req.marker, markers, "", env_key):
            always.append((canonicalize_name(req.name), req))
        elif req.marker is not None and "extra" in text:
            # It can hold for extra X (and not without it) only if its marker names X.
            for extra in dict.fromkeys(canonicalize_name(e) for e in _EXTRA_IN_MARKER.findall(text)):
                if _holds(text, req.marker, markers, extra, env_key):
                    extras.setdefault(extra, []).append(req)
    order = extras_of(parsed)
    found = _Wants(tuple(always), tuple((e, tuple(extras[e])) for e in order if e in extras))
    if len(_WANTS) >= _VERDICTS_MAX:
        _WANTS.clear()
    _WANTS[cache_key] = found
    return found


#: Verdicts of ``req``'s specifier on a version, by (id(req), version), with the requirement
#: kept in the value so that its id cannot be reused. Requirements come from the per
#: distribution parse cache, so the hosts of a fleet ask the same questions.
_CONTAINS: dict[tuple[int, Version], tuple[Requirement, bool]] = {}


def _contains(req: Requirement, version: Version) -> bool:
    key = (id(req), version)
    found = _CONTAINS.get(key)
    if found is not None and found[0] is req:
        return found[1]
    verdict = req.specifier.contains(version, prereleases=True)
    if len(_CONTAINS) >= _VERDICTS_MAX:
        _CONTAINS.clear()
    _CONTAINS[key] = (req, verdict)
    return verdict


def _extras_in_use(parsed: _Parsed, wants: _Wants, package_set: Mapping[str, _Parsed],
                   graph: RequirementGraph) -> list[Unmet]:
    """Extras in use (pip check ignores extras nobody asked for at install time), whose
    version pins must hold too: one that the requirement graph asks for (``X[extra]``,
    transitively), or one whose every package is installed and one of them for no other
    reason (nothing in the graph requires it: speculators' ``datagen`` beside a vllm that
    nothing else wants). An extra whose packages are all there for other reasons shows no
    use: old setuptools' ``certs`` extra pins certifi==2016.9.26, and the certifi that
    requests needs says nothing of it; flashinfer's ``b12x`` pins nvidia-cutlass-dsl==4.7.1,
    and the 4.8.0 that vllm requires says nothing of it either."""
    unmet = []
    who = parsed.dist.key
    for extra, wanted in wants.by_extra:
        if (who, extra) not in graph.asked:
            # A requirement on the distribution itself (``sglang[dev]`` -> ``sglang[test]``)
            # asks for more of its extras: no sign of use, whatever else installed it.
            names = [name for name in (canonicalize_name(r.name) for r in wanted) if name != who]
            if not names or any(name not in package_set for name in names):
                continue
            if all(graph.required_by.get(name) for name in names):
                continue
        for req in wanted:
            have = package_set.get(canonicalize_name(req.name))
            if have is not None and not _contains(req, have.version):
                shown = Requirement(str(req))
                shown.marker = None
                unmet.append(Unmet(parsed.dist.key, str(parsed.version), shown, str(have.version), extra))
    return unmet


def environment_graph(env: Environment) -> RequirementGraph:
    """The requirement graph of ``env``'s active distributions on this host (see RequirementGraph)."""
    env_key = marker_key(env)
    wants_of = {}
    for dist in env.distributions:
        if dist.active:
            parsed = _parse(dist)
            if not isinstance(parsed, ParseError):
                wants_of.setdefault(dist.key, _wants(parsed, env.markers, env_key))
    return requirement_graph(wants_of)


def _pins(specifiers: Sequence[Any]) -> list[Version]:
    """The versions that ``==V`` specifiers (no wildcard) allow: every version that meets them is one of these."""
    found = []
    for spec in specifiers:
        if spec.operator == "==" and not spec.version.endswith(".*"):
            try:
                found.append(Version(spec.version))
            except InvalidVersion:
                continue
    return found


def _cannot_both_hold(one: Requirement, other: Requirement) -> bool:
    """Provably no version meets both: one of them pins (``==V``), and no pinned version meets
    both. Without a pin nothing is claimed (the index, which only the installer's plan reads,
    decides)."""
    candidates = _pins([*one.specifier, *other.specifier])
    return bool(candidates) and not any(
        one.specifier.contains(v, prereleases=True) and other.specifier.contains(v, prereleases=True)
        for v in candidates)


def breaking_requirements(env: Environment, wanted: Sequence[str]) -> dict[str, str]:
    """Of the requirements a remedy would install (``wanted``, as wanted_requirements makes
    them), those that provably break a requirement the installed distributions hold on this
    host (the whole requirement graph: base requirements and asked-for extras), each with the
    sentence that says whose: ``nvidia-cutlass-dsl==4.7.1 cannot hold beside vllm 0.33.0's
    nvidia-cutlass-dsl[cu13]==4.8.0``. A requirement held by a distribution the remedy itself
    replaces is left to the installer's plan, until that one is found breaking in turn (then
    what the remedy no longer replaces keeps its requirements: worked out to a fixed point)."""
    graph = environment_graph(env)
    versions = {dist.key: dist.version for dist in env.distributions if dist.active}
    found: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        replaced = {canonicalize_name(_requirement(text).name) for text in wanted if text not in found}
        for text in wanted:
            if text in found:
                continue
            req = _requirement(text)
            if _cannot_both_hold(req, req):  # (what several distributions want of one name)
                found[text] = f"no version meets {text}: the installed distributions want them all"
                changed = True
                continue
            for (who, extra), held in graph.requirements.get(canonicalize_name(req.name), ()):
                if who in replaced or not _cannot_both_hold(req, held):
                    continue
                shown = Requirement(str(held))
                shown.marker = None
                owner = f"{who} {versions.get(who, '')}".strip() + (f" [{extra}]" if extra else "")
                found[text] = f"{text} cannot hold beside {owner}'s {shown}"
                changed = True
                break
    return {text: found[text] for text in wanted if text in found}


def requirement_closure(env: Environment, requirements: Sequence[str]) -> set[str]:
    """The distributions (canonical names) that ``requirements`` (PEP 508 strings) need on this
    host, transitively: their requirements without an extra, and those of the extras a
    requirement asks for (``pkg[extra]``). A name that is not installed stays in the set: the
    job asked for it."""
    installed = {dist.key: dist for dist in env.distributions if dist.active}
    env_key = marker_key(env)
    wanted: set[str] = set()
    stack = [(canonicalize_name(req.name), frozenset(canonicalize_name(e) for e in req.extras))
             for req in map(_requirement, requirements)]
    seen: set[tuple[str, frozenset[str]]] = set()
    while stack:
        name, extras = stack.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        wanted.add(name)
        dist = installed.get(name)
        parsed = _parse(dist) if dist is not None else None
        if parsed is None or isinstance(parsed, ParseError):
            continue
        wants = _wants(parsed, env.markers, env_key)
        requirements = [req for _, req in wants.always]
        requirements += [req for extra, reqs in wants.by_extra if extra in extras for req in reqs]
        stack += [(canonicalize_name(req.name), frozenset(canonicalize_name(e) for e in req.extras))
                  for req in requirements]
    return wanted


def restricted_to(result: Consistency, names: set[str]) -> tuple[Consistency, Consistency]:
    """(what concerns ``names``, the rest): a finding concerns a distribution when it is that
    distribution's own requirement, metadata or duplicate folders."""
    def split(items: Sequence[Any], key: Any) -> tuple[list[Any], list[Any]]:
        return [i for i in items if key(i) in names], [i for i in items if key(i) not in names]

    missing = split(result.missing, lambda u: canonicalize_name(u.who))
    conflicts = split(result.conflicts, lambda u: canonicalize_name(u.who))
    parse_errors = split(result.parse_errors, lambda e: canonicalize_name(e.name))
    dups = split(result.duplicates, lambda d: canonicalize_name(d.name))
    extras = split(result.extras, lambda u: canonicalize_name(u.who))
    return (Consistency(missing[0], conflicts[0], parse_errors[0], dups[0], extras[0]),
            Consistency(missing[1], conflicts[1], parse_errors[1], dups[1], extras[1]))


def summary_lines(result: Consistency, count: int) -> list[str]:
    """pip check's verdict on the first line; envdoctor's own findings each on a line of their own."""
    if result.pip_ok:
        lines = [f"pip check: no broken requirements in {count} distributions"]
    else:  # one line per problem, under pip check's own verdict, as pip prints them
        lines = [f"pip check: {len(result.pip_lines())} problem(s):", *(f"  {line}" for line in result.pip_lines())]
    lines += [f"extras in use: {u.extra_line()}" for u in result.extras]
    lines += [f"duplicate metadata: {d.line()}" for d in result.duplicates]
    return lines


def wanted_requirements(items: Sequence[Unmet]) -> list[str]:
    """One requirement per name, the specifiers of everyone who wants it combined."""
    specs: dict[str, list[str]] = {}
    for item in items:
        specs.setdefault(item.name, [])
        if str(item.requirement.specifier):
            specs[item.name].append(str(item.requirement.specifier))
    return [name + ",".join(s) for name, s in specs.items()]
