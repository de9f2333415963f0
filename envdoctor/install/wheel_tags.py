"""Does every installed wheel fit the interpreter? ``packages.tags`` from the probe's
``wheel-tags`` section: each distribution's WHEEL ``Tag`` lines against the tags the
environment's interpreter supports, and its ``Requires-Python`` against the interpreter's
version (``uv pip check`` reports both; ``pip check`` neither).

The supported tags are packaging's (``packaging.tags.cpython_tags``/``generic_tags`` and
``compatible_tags``) for the *host's* interpreter: its version and ABI as it reported them,
and the Linux platforms its machine and C library allow, computed as packaging's
``_manylinux``/``_musllinux`` compute them for the running machine (``manylinux_2_N`` for
every N up to the host's glibc minor, down to 2.17, or 2.5 on x86; the legacy
``manylinux1``/``2010``/``2014`` aliases; ``linux_<arch>``; ``musllinux_1_N`` on musl).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from packaging import tags as pt
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

#: Legacy manylinux names and the glibc they stand for (PEP 600).
LEGACY_MANYLINUX = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}
_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_(.+)\Z")
_MUSLLINUX = re.compile(r"musllinux_(\d+)_(\d+)_(.+)\Z")
_LEGACY = {name: version for version, name in LEGACY_MANYLINUX.items()}
#: packaging's short names of interpreters (packaging.tags.INTERPRETER_SHORT_NAMES).
SHORT_NAMES = {"python": "py", "cpython": "cp", "pypy": "pp", "ironpython": "ip", "jython": "jy"}


class InterpreterUnknown(ValueError):
    """The host's interpreter did not report what the tags need."""


@dataclass(frozen=True)
class Interpreter:
    version: tuple[int, int, int]
    implementation: str
    abis: tuple[str, ...]
    platforms: tuple[str, ...]
    #: (major, minor) of glibc, None when the host has none (musl, macOS) or did not say.
    glibc: tuple[int, int] | None
    musl: bool
    arch: str

    @property
    def full_version(self) -> str:
        return ".".join(map(str, self.version))

    def describe(self) -> str:
        libc = f"glibc {self.glibc[0]}.{self.glibc[1]}" if self.glibc else ("musl" if self.musl else "no glibc")
        name = {"cpython": "CPython", "pypy": "PyPy"}.get(self.implementation, self.implementation)
        return f"{name} {self.full_version} ({'/'.join(self.abis) or 'no ABI tag'}, {self.arch}, {libc})"


def _glibc(raw: Mapping[str, Any]) -> tuple[int, int] | None:
    text = str(raw.get("glibc") or "")
    libc = raw.get("libc") or []
    if not text and isinstance(libc, list) and len(libc) == 2 and libc[0] == "glibc":
        text = f"glibc {libc[1]}"
    match = re.match(r"glibc (\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else None


def _abis(raw: Mapping[str, Any], version: tuple[int, int, int]) -> tuple[str, ...]:
    """The interpreter's own ABI tags, as packaging._cpython_abis names them."""
    impl = str(raw.get("implementation") or "")
    if impl != "cpython":
        soabi = str(raw.get("soabi") or "")
        return (re.sub(r"[^A-Za-z0-9]", "_", soabi.split("-")[0] + "_" + soabi.split("-")[1]).lower(),) \
            if soabi.count("-") >= 2 else ()
    nodot = f"{version[0]}{version[1]}"
    threading = "t" if raw.get("gil_disabled") and version >= (3, 13) else ""
    debug = "d" if raw.get("py_debug") else ""
    pymalloc = "m" if version < (3, 8) and str(raw.get("soabi") or "").split("-")[1:2] == [f"{nodot}{debug}m"] else ""
    abis = [f"cp{nodot}{threading}{debug}{pymalloc}"]
    if debug:
        abis.append(f"cp{nodot}{threading}")  # debug builds load normal extension modules too
    return tuple(abis)


def linux_platforms(arch: str, glibc: tuple[int, int] | None, musl: tuple[int, int] | None = None) -> list[str]:
    """Platform tags of a Linux machine of ``arch`` with this glibc (or musl), best first."""
    archs = {"armv8l": ["armv8l", "armv7l"]}.get(arch, [arch])
    found = [f"linux_{a}" for a in archs]
    if glibc is not None and glibc[0] == 2:
        oldest = 4 if set(archs) & {"x86_64", "i686"} else 16
        for a in archs:
            for minor in range(glibc[1], oldest, -1):
                found.append(f"manylinux_2_{minor}_{a}")
                legacy = LEGACY_MANYLINUX.get((2, minor))
                if legacy:
                    found.append(f"{legacy}_{a}")
    if musl is not None:
        found += [f"musllinux_{musl[0]}_{minor}_{a}" for a in archs for minor in range(musl[1], -1, -1)]
    return found


def interpreter_from_probe(raw: Mapping[str, Any]) -> Interpreter:
    if raw.get("error"):
        raise InterpreterUnknown(str(raw["error"]))
    try:
        version = tuple(int(v) for v in raw["version"][:3])
        assert len(version) == 3
    except (KeyError, TypeError, ValueError, AssertionError):
        raise InterpreterUnknown("the interpreter did not report its version") from None
    glibc = _glibc(raw)
    plat = re.sub(r"[^A-Za-z0-9]", "_", str(raw.get("platform") or "")).lower()
    bits = raw.get("bits")
    if plat.startswith("linux_"):
        if bits == 32:
            plat = {"linux_x86_64": "linux_i686", "linux_aarch64": "linux_armv8l"}.get(plat, plat)
        arch = plat.split("_", 1)[1]
        musl = glibc is None and str(raw.get("system") or "Linux") == "Linux"
        # A musl host's version comes from its loader, which the probe does not run: its
        # musllinux wheels are then not judged (see judge_wheels).
        platforms = tuple(linux_platforms(arch, glibc))
    else:
        arch, musl, platforms = plat, False, (plat,) if plat else ()
    return Interpreter(version, str(raw.get("implementation") or ""), _abis(raw, version), platforms,  # type: ignore[arg-type]
                       glibc, musl, arch)


@lru_cache(maxsize=64)
def supported_tags(interp: Interpreter) -> frozenset[pt.Tag]:
    """Every tag a wheel may carry to install on this interpreter, as pip would accept it."""
    major_minor = interp.version[:2]
    platforms = list(interp.platforms)
    if interp.implementation == "cpython":
        found = set(pt.cpython_tags(major_minor, interp.abis, platforms))
        interpreter = f"cp{major_minor[0]}{major_minor[1]}"
    else:
        short = SHORT_NAMES.get(interp.implementation, interp.implementation)
        interpreter = f"{short}{major_minor[0]}{major_minor[1]}"
        found = set(pt.generic_tags(interpreter, interp.abis, platforms))
    found.update(pt.compatible_tags(major_minor, interpreter, platforms))
    return frozenset(found)


@dataclass(frozen=True)
class WheelMismatch:
    name: str
    version: str
    #: The file that says so: the WHEEL file, or METADATA for Requires-Python.
    file: str
    #: The offending tag(s), or the Requires-Python specifier.
    what: str
    reason: str
    kind: str  # "tag" or "requires-python"

    def sentence(self) -> str:
        if self.kind == "requires-python":
            return f"{self.name} {self.version} requires Python {self.what} ({self.file}): {self.reason}"
        return f"{self.name} {self.version} is built for {self.what} ({self.file}): {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "file": self.file, "what": self.what,
                "reason": self.reason, "kind": self.kind}


@dataclass
class WheelsVerdict:
    interpreter: Interpreter
    mismatches: list[WheelMismatch] = field(default_factory=list)
    checked: int = 0
    #: Installed without a WHEEL file (egg-info, conda, a develop install): tags not judged.
    no_wheel: list[str] = field(default_factory=list)
    not_judged: list[str] = field(default_factory=list)


def why_not(tag: pt.Tag, interp: Interpreter) -> str:
    """Which part of a tag this interpreter rejects, in words."""
    supported = supported_tags(interp)
    platforms = set(interp.platforms) | {"any"}
    if tag.platform not in platforms:
        return _platform_reason(tag.platform, interp)
    if not any(t.interpreter == tag.interpreter for t in supported):
        return f"the interpreter is {interp.describe()}, not {tag.interpreter}"
    return f"the ABI {tag.abi} is not one {interp.describe()} loads with {tag.interpreter}"


def _platform_reason(platform: str, interp: Interpreter) -> str:
    wanted = _MANYLINUX.match(platform)
    legacy = next((v for name, v in _LEGACY.items() if platform.startswith(name + "_")), None)
    arch = wanted[3] if wanted else platform.split("_", 1)[1] if legacy or platform.startswith("linux_") else ""
    if (wanted or legacy) and arch == interp.arch:
        needs = (int(wanted[1]), int(wanted[2])) if wanted else legacy
        have = f"glibc {interp.glibc[0]}.{interp.glibc[1]}" if interp.glibc else "no glibc (musl)" if interp.musl else "no glibc"
        return f"it needs glibc {needs[0]}.{needs[1]} and the host has {have}"
    if _MUSLLINUX.match(platform):
        return "it is built for musl libc" + ("" if interp.musl else f"; the host has glibc {'.'.join(map(str, interp.glibc or ()))}")
    if arch and arch != interp.arch:
        return f"it is built for {arch}, the host is {interp.arch}"
    if platform.startswith(("macosx", "win")):
        return f"it is built for {'macOS' if platform.startswith('macosx') else 'Windows'}, the host is {interp.arch} Linux"
    return f"the platform {platform} is not one of this host's"


def _parse_tags(lines: Sequence[str]) -> list[pt.Tag]:
    parsed: list[pt.Tag] = []
    for line in lines:
        try:
            parsed.extend(pt.parse_tag(line))
        except ValueError:
            continue
    return parsed


def judge_distribution(dist: Mapping[str, Any], interp: Interpreter, verdict: WheelsVerdict) -> None:
    """At most one finding per distribution, as uv pip check gives: its tags, else its
    Requires-Python (a wheel built for another Python says it all)."""
    name, version = str(dist.get("name") or "?"), str(dist.get("version") or "")
    folder = str(dist.get("path") or "")
    lines = dist.get("tags")
    if lines is None:
        verdict.no_wheel.append(name)
    else:
        parsed = _parse_tags([str(t) for t in lines])
        if not parsed:
            verdict.not_judged.append(f"{name}: its WHEEL file has no readable Tag line")
        elif not any(t in supported_tags(interp) for t in parsed):
            if all(_MUSLLINUX.match(t.platform) for t in parsed) and interp.musl:
                verdict.not_judged.append(f"{name}: a musllinux wheel on a musl host (its musl version is not read)")
                return
            shown = ", ".join(sorted({str(t) for t in parsed})[:3])
            verdict.mismatches.append(WheelMismatch(name, version, f"{folder}/WHEEL", shown,
                                                    why_not(parsed[0], interp), "tag"))
            return
    requires = dist.get("requires_python")
    if not requires:
        return
    holds = _requires_python_holds(str(requires), interp.full_version)
    if holds is False:
        verdict.mismatches.append(WheelMismatch(name, version, f"{folder}/METADATA", str(requires),
                                                f"the interpreter is Python {interp.full_version}", "requires-python"))
    elif holds is None:
        verdict.not_judged.append(f"{name}: Requires-Python {requires!r} does not parse")


@lru_cache(maxsize=4096)
def _requires_python_holds(specifier: str, version: str) -> bool | None:
    try:
        return SpecifierSet(specifier).contains(Version(version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return None


#: Per interpreter, the (Tag lines, Requires-Python) of distributions already judged to fit:
#: the nodes of one image, or of a few, have the same wheels, and judging every tag of every
#: distribution of every host again was the largest share of the controller's work per host.
_FIT: dict[Interpreter, set[tuple[tuple[str, ...], Any]]] = {}
_FIT_KEEP = 16


def _fitting(interp: Interpreter) -> set[tuple[tuple[str, ...], Any]]:
    found = _FIT.get(interp)
    if found is None:
        if len(_FIT) >= _FIT_KEEP:
            _FIT.clear()
        found = _FIT[interp] = set()
    return found


def judge_wheels(data: Mapping[str, Any]) -> WheelsVerdict:
    """The verdict on a ``wheel-tags`` section (InterpreterUnknown when it cannot be judged)."""
    interp = interpreter_from_probe(data.get("interpreter") or {})
    verdict = WheelsVerdict(interp)
    fitting = _fitting(interp)
    for dist in data.get("distributions") or []:
        if isinstance(dist, Mapping):
            verdict.checked += 1
            try:
                key: tuple[tuple[str, ...], Any] | None = (tuple(dist["tags"]), dist.get("requires_python"))
                if key in fitting:
                    continue
            except (KeyError, TypeError):  # no WHEEL file, or something no fitting wheel has
                key = None
            findings = len(verdict.mismatches) + len(verdict.not_judged) + len(verdict.no_wheel)
            judge_distribution(dist, interp, verdict)
            if key is not None and findings == len(verdict.mismatches) + len(verdict.not_judged) + len(verdict.no_wheel):
                fitting.add(key)
    return verdict
