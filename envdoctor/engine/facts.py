"""Typed views of what the probe found on a host. Parsing only; no I/O."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, TypeVar

from envdoctor.probe import shared_answers
from envdoctor.probe.program import ProbeOutput

T = TypeVar("T")

_NAME_SEPARATORS = re.compile(r"[-_.]+")


@lru_cache(maxsize=65536)  # a fleet asks for the same few hundred names on every host
def canonicalize_name(name: str) -> str:
    """A distribution name as PEP 503 normalizes it: each run of ``-``, ``_`` and ``.`` becomes
    ``-``, then lower case (packaging's canonicalize_name, whose module imports packaging.tags:
    20 ms of start-up)."""
    return _NAME_SEPARATORS.sub("-", name).lower()


@dataclass(frozen=True)
class Distribution:
    name: str
    version: str
    requires: tuple[str, ...]
    path: str
    site: str
    kind: str = "dist-info"
    active: bool = True
    error: str | None = None

    @cached_property
    def key(self) -> str:
        return canonicalize_name(self.name)

    @classmethod
    def from_probe(cls, raw: Mapping[str, Any]) -> Distribution:
        # The hosts of a fleet report the same distributions: one object per distinct record
        # (equal by value, so nothing can tell them apart), which also keeps the caches keyed
        # by distribution warm. A record that cannot be a key is built as it is.
        requires = raw.get("requires", ())
        try:
            key = (raw.get("name", ""), raw.get("version", ""), tuple(requires), raw.get("path", ""),
                   raw.get("site", ""), raw.get("kind", "dist-info"), raw.get("active", True), raw.get("error"))
            found = _DISTRIBUTIONS.get(key)
        except TypeError:
            key, found = None, None
        if found is not None:
            return found
        made = cls(
            name=str(raw.get("name", "")),
            version=str(raw.get("version", "")),
            requires=tuple(str(r) for r in requires),
            path=str(raw.get("path", "")),
            site=str(raw.get("site", "")),
            kind=str(raw.get("kind", "dist-info")),
            active=bool(raw.get("active", True)),
            error=raw.get("error"),
        )
        if key is not None and _plain_record(key):  # then a hit can only be an equal record
            if len(_DISTRIBUTIONS) >= _DISTRIBUTIONS_MAX:
                _DISTRIBUTIONS.clear()
            _DISTRIBUTIONS[key] = made
        return made


_DISTRIBUTIONS: dict[tuple[Any, ...], Distribution] = {}
_DISTRIBUTIONS_MAX = 200_000


def _plain_record(key: tuple[Any, ...]) -> bool:
    """Text where text goes, a real bool, text or None for the error: no other value (1 for
    True, say) can then equal this key and be handed the object built from it."""
    name, version, requires, path, site, kind, active, error = key
    return (all(x.__class__ is str for x in (name, version, path, site, kind, *requires))
            and active.__class__ is bool and (error is None or error.__class__ is str))


@dataclass(frozen=True)
class Environment:
    """A Python environment on the host: a venv, a conda env, or the default interpreter."""

    prefix: str
    python: str
    exists: bool
    runs: bool
    error: str | None = None
    version: str = ""
    executable: str = ""
    base_prefix: str = ""
    markers: Mapping[str, str] = field(default_factory=dict)
    site_packages: tuple[str, ...] = ()
    distributions: tuple[Distribution, ...] = ()
    #: Set when the path the user named is a file, or a folder that is not an environment.
    not_a_venv: str | None = None
    #: Discovered, not chosen: described from its files, its interpreter never started.
    static: bool = False
    #: A static environment owned by another user, or writable by everyone.
    foreign: bool = False
    #: The host's realpath of the prefix, its bin folder and the interpreter's folder, where
    #: links change them ("" otherwise, or from an older probe): see host_paths.py.
    real_prefix: str = ""
    real_bin: str = ""
    real_executable_dir: str = ""
    #: PEP 668: the interpreter's stdlib folder holds EXTERNALLY-MANAGED (never set for a
    #: venv, whose marker pip ignores): pip refuses to install into it, and so does envdoctor.
    externally_managed: bool = False

    @classmethod
    def from_probe(cls, raw: Mapping[str, Any]) -> Environment:
        return cls(
            prefix=str(raw.get("prefix", "")),
            python=str(raw.get("python", "")),
            exists=bool(raw.get("exists", False)),
            runs=bool(raw.get("runs", False)),
            error=raw.get("error"),
            version=str(raw.get("version", "")),
            executable=str(raw.get("executable", "")),
            base_prefix=str(raw.get("base_prefix", "")),
            markers=dict(raw.get("markers") or {}),
            site_packages=tuple(raw.get("site_packages") or ()),
            distributions=tuple(Distribution.from_probe(d) for d in raw.get("distributions") or ()),
            not_a_venv=raw.get("not_a_venv"),
            static=bool(raw.get("static", False)),
            foreign=bool(raw.get("foreign", False)),
            real_prefix=str(raw.get("real_prefix", "")),
            real_bin=str(raw.get("real_bin", "")),
            real_executable_dir=str(raw.get("real_executable_dir", "")),
            externally_managed=bool(raw.get("externally_managed", False)),
        )

    @cached_property
    def installed(self) -> dict[str, Distribution]:
        """The distribution Python would import for each name (the first on sys.path)."""
        return {d.key: d for d in self.distributions if d.active}

    @property
    def is_venv(self) -> bool:
        return bool(self.base_prefix) and os.path.normpath(self.prefix) != os.path.normpath(self.base_prefix)

    @property
    def is_system(self) -> bool:
        """The operating system's own interpreter: externally managed (PEP 668), or a distro
        install (prefix /usr, or Debian's dist-packages under /usr/lib: an older Debian or
        Ubuntu without the marker). Its packages serve the system's tools, not a job."""
        if self.static or self.is_venv:
            return False
        return (self.externally_managed or os.path.normpath(self.prefix) == "/usr"
                or any(p.startswith("/usr/lib/") and p.rstrip("/").endswith("/dist-packages")
                       for p in self.site_packages))


@dataclass(frozen=True)
class ProgramOnPath:
    """What a bare program name resolves to in a non-interactive command on the host."""

    path: str
    realpath: str
    #: For pip scripts: the interpreter it runs under (shebang or trampoline, shims followed).
    interpreter: str | None = None
    #: The file that really runs once pyenv/asdf shims and exec wrappers are followed.
    resolved: str | None = None
    #: How it was resolved ("pyenv 3.11.7 (set by /root/.pyenv/version)", "wrapper ...").
    via: tuple[str, ...] = ()
    #: Why a shim could not be followed (pyenv names a version that lacks the program).
    error: str | None = None
    #: The host's realpath of the folder of what runs, and of the interpreter's (pip), where
    #: links change them ("" otherwise, or from an older probe): see host_paths.py.
    real_dir: str = ""
    interpreter_real_dir: str = ""
    #: For uv: where it was found ("PATH", or its installer's "~/.local/bin", "~/.cargo/bin").
    found_in: str = ""

    @classmethod
    def from_probe(cls, raw: Mapping[str, Any] | None) -> ProgramOnPath | None:
        if not raw:
            return None
        via = raw.get("via") or ()
        return cls(str(raw["path"]), str(raw.get("realpath", raw["path"])), raw.get("interpreter"),
                   raw.get("resolved"), tuple(str(v) for v in via) if isinstance(via, list) else (), raw.get("error"),
                   str(raw.get("real_dir", "")), str(raw.get("interpreter_real_dir", "")),
                   str(raw.get("found_in", "")))

    @property
    def runs(self) -> str:
        """The program that really runs: the resolved shim, else the path itself."""
        return self.resolved or self.path


@dataclass(frozen=True)
class Problem:
    """Why facts could not be gathered: ``kind`` is unreachable, auth, host-key (unknown or
    refused), host-key-changed, timeout or probe."""

    kind: str
    message: str
    hint: str = ""


@dataclass(frozen=True)
class HostFacts:
    """Everything one probe run found; checks are pure functions of this and the host's spec."""

    probe: ProbeOutput
    #: Set when the host could not be reached or the probe could not run; then nothing else is.
    problem: Problem | None = None
    hostname: str = ""
    path_env: str = ""
    on_path: Mapping[str, ProgramOnPath | None] = field(default_factory=dict)
    #: The uv an install into a venv without pip runs (on PATH, or where its installer puts it).
    uv: ProgramOnPath | None = None
    gpus: tuple[str, ...] = ()
    gpu_error: str | None = None
    nvidia_smi: str | None = None
    disk: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    configured_envs: tuple[str, ...] = ()
    envs: tuple[Environment, ...] = ()
    default_env: Environment | None = None

    @classmethod
    def from_probe(cls, probe: ProbeOutput) -> HostFacts:
        host = probe.sections.get("host") or {}
        venvs = probe.sections.get("venvs") or {}
        gpu = host.get("gpu") or {}
        default_raw = venvs.get("default")
        return cls(
            probe=probe,
            hostname=str(host.get("hostname", "")),
            path_env=str(host.get("path_env", "")),
            on_path={k: ProgramOnPath.from_probe(v) for k, v in (host.get("on_path") or {}).items()},
            uv=ProgramOnPath.from_probe(host.get("uv")),
            gpus=tuple(gpu.get("gpus") or ()),
            gpu_error=gpu.get("error"),
            nvidia_smi=gpu.get("nvidia_smi"),
            disk=dict(host.get("disk") or {}),
            configured_envs=tuple(venvs.get("configured") or ()),
            envs=tuple(shared_answers.memo("env", e, Environment.from_probe) for e in venvs.get("envs") or ()),
            default_env=shared_answers.memo("env", default_raw, Environment.from_probe) if default_raw else None,
        )

    @classmethod
    def unavailable(cls, problem: Problem) -> HostFacts:
        return cls(probe=ProbeOutput(), problem=problem)

    def env_at(self, prefix: str) -> Environment | None:
        wanted = os.path.normpath(prefix)
        for env in self.envs:
            if os.path.normpath(env.prefix) == wanted:
                return env
        return None

    def section(self, name: str) -> Any:
        """The raw data of a probe section that has no typed view yet."""
        return self.probe.sections.get(name)

    @staticmethod
    def judged_once(kind: str, data: Any, judge: Callable[[Any], T]) -> T:
        """``judge(data)`` for a section's raw data, computed once for the hosts that sent the
        same bytes (envdoctor.probe.shared_answers); ``judge`` must be pure and its value is
        only read."""
        return shared_answers.memo(kind, data, judge)
