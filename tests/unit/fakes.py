"""In-memory facts for unit tests of pure check logic."""

from __future__ import annotations

from envdoctor.engine.facts import Distribution, Environment, HostFacts, ProgramOnPath
from envdoctor.probe.program import ProbeOutput

MARKERS = {
    "implementation_name": "cpython",
    "implementation_version": "3.11.7",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "platform_python_implementation": "CPython",
    "platform_release": "6.1",
    "platform_system": "Linux",
    "platform_version": "#1",
    "python_full_version": "3.11.7",
    "python_version": "3.11",
    "sys_platform": "linux",
}


def dist(name: str, version: str, *requires: str, site: str = "/v/lib/python3.11/site-packages") -> Distribution:
    return Distribution(name, version, tuple(requires), f"{site}/{name}-{version}.dist-info", site)


def env(prefix: str, *dists: Distribution, runs: bool = True, exists: bool = True, executable: str = "") -> Environment:
    return Environment(
        prefix=prefix,
        python=f"{prefix}/bin/python",
        exists=exists,
        runs=runs,
        version="3.11.7",
        executable=executable or f"{prefix}/bin/python",
        base_prefix="/usr",
        markers=MARKERS,
        distributions=dists,
    )


def facts(*envs: Environment, default: Environment | None = None, on_path: dict[str, ProgramOnPath | None] | None = None) -> HostFacts:
    return HostFacts(
        probe=ProbeOutput(),
        envs=envs,
        configured_envs=tuple(e.prefix for e in envs[:1]),
        default_env=default,
        on_path=on_path or {},
        disk={"/root": {"free": 100 * 1024**3, "total": 200 * 1024**3}},
    )
