"""Gather a host's facts: connect, send the probe once with every section the checks need.

The table :data:`PROBE_SECTIONS` says, for each probe section, which module of
``envdoctor/probe`` implements it and what arguments a host's spec gives it. A new kind of
fact is a new stdlib module there and one row here.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from envdoctor.engine.executor import problem_from_error
from envdoctor.engine.facts import HostFacts, Problem
from envdoctor.errors import (
    ProbeError,
    TransportError,
)
from envdoctor.inventory import HostSpec
from envdoctor.logsafe import get_logger
from envdoctor.probe.program import register_section, run_probe, section_code_digest, venv_pythons
from envdoctor.probe.schema import section_problems
from envdoctor.transport.interface import Transport

log = get_logger(__name__)

SectionArgs = Callable[[HostSpec], Mapping[str, Any]]


@dataclass(frozen=True)
class ProbeSection:
    module: str
    args: SectionArgs
    #: Gathered only when a command names it (``diff``, ``snapshot``): never part of "every
    #: section" that a plain ``check`` asks for.
    on_demand: bool = False


#: Where `envdoctor init` looks for model folders ("hub": the Hugging Face cache, found as
#: huggingface_hub finds it: HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub), and its bounds.
MODEL_SEARCH = {"roots": ["~/models", "hub", "/data*", "/mnt*"], "max_depth": 4, "max_entries": 50_000,
                "max_seconds": 5.0, "max_models": 64}


def _host_args(spec: HostSpec) -> Mapping[str, Any]:
    return {"disk_paths": [p for p in (spec.venv, *spec.models) if p]}


def _venvs_args(spec: HostSpec) -> Mapping[str, Any]:
    return {"configured": [spec.venv] if spec.venv else [], "discover": True}


def _models_args(spec: HostSpec) -> Mapping[str, Any]:
    # The live tokenizer load runs only with consent, and in the venv's own interpreter.
    python = os.path.join(spec.venv, "bin", "python") if spec.venv else None
    # "code" keys the host's cache of the answers (probe/host/model/cache.py) to this code.
    return {"models": list(spec.models), "trust_remote_code": spec.trust_remote_code, "python": python,
            "code": section_code_digest("models")}


# The modules that build the larger sections' arguments are imported when a section is asked
# for: `check --only host.python` never pays for the patch engine, the scanner or drift.
def _patch_files_args(spec: HostSpec) -> Mapping[str, Any]:
    from envdoctor.patching.engine import files_request, load_patches

    return files_request(spec.venv, load_patches(spec.patches).patches)


def _patch_ledger_args(spec: HostSpec) -> Mapping[str, Any]:
    # For checks/audit.py: the ledger and the hashes of the files it names, not a full audit.
    return {"prefix": spec.venv or ""}


def _gpu_stack_args(spec: HostSpec) -> Mapping[str, Any]:
    # The venv whose torch and extensions are read; without one, the probe interpreter's.
    return {"prefix": spec.venv or ""}


def _node_args(spec: HostSpec) -> Mapping[str, Any]:
    # The tests' stand-in root goes only to this machine's probe, from this process's own
    # environment: no setting on a remote host can point the section at other files.
    test_root = os.environ.get("ENVDOCTOR_TEST_ROOT") if spec.is_local else None
    return {"prefix": spec.venv or "", **({"test_root": test_root} if test_root else {})}


def _architecture_args(spec: HostSpec) -> Mapping[str, Any]:
    # The registries of the engines in the chosen venv, cut to what the models' configs name.
    return {"prefix": spec.venv or "", "models": list(spec.models), "code": section_code_digest("architecture")}


def _wheel_tags_args(spec: HostSpec) -> Mapping[str, Any]:
    # The chosen venv's interpreter (or, with none, the default python3) reports its tags.
    return {"prefix": spec.venv or ""}


def _sources_args(spec: HostSpec) -> Mapping[str, Any]:
    from envdoctor.scan.scanner import sources_request

    return sources_request(spec.venv, spec.scan)


def _system_args(spec: HostSpec) -> Mapping[str, Any]:
    from envdoctor.compare.request import system_request

    return system_request(spec)


def _digests_args(spec: HostSpec) -> Mapping[str, Any]:
    from envdoctor.compare.request import digests_request

    return digests_request(spec)


def _drift_args(spec: HostSpec) -> Mapping[str, Any]:
    from envdoctor.drift.request import drift_request, stage_scope

    # Scoped to what the host's stages run (code.api-drift says which entries, or why not).
    return drift_request(spec.venv, spec.scan, entry=stage_scope(spec.stage_commands).entries or None)


def _imports_args(spec: HostSpec) -> Mapping[str, Any]:
    from envdoctor.drift.request import imports_request, stage_import_entries

    # code.imports walks from the host's stages, in the folders they `cd` to.
    return imports_request(spec.venv, spec.scan, import_entries=stage_import_entries(spec.stage_commands))


#: In the order the probe runs them: the host and its environments first, the sections that
#: read a few files next, and those that read whole libraries (the registries, the scan's
#: sources, drift) last, so that a probe that dies on a large venv (out of memory, killed)
#: has already sent every answer it could (see probe/program.py's _ended_early).
PROBE_SECTIONS: dict[str, ProbeSection] = {
    "host": ProbeSection("env.machine", _host_args),
    "venvs": ProbeSection("env.venvs", _venvs_args),
    "patch-ledger": ProbeSection("patch.ledger", _patch_ledger_args),
    "patch_files": ProbeSection("patch.files", _patch_files_args),
    "wheel-tags": ProbeSection("env.wheel_tags", _wheel_tags_args),
    "node": ProbeSection("node.section", _node_args),
    "gpu-stack": ProbeSection("gpu.stack", _gpu_stack_args),
    "models": ProbeSection("model.files", _models_args),
    "system": ProbeSection("env.system", _system_args, on_demand=True),
    "digests": ProbeSection("audit.digests", _digests_args, on_demand=True),
    "model-search": ProbeSection("model.search", lambda spec: MODEL_SEARCH, on_demand=True),
    "architecture": ProbeSection("scan.engine_registry", _architecture_args),
    "sources": ProbeSection("scan.sources", _sources_args),
    "imports": ProbeSection("drift.section", _imports_args),
    "drift": ProbeSection("drift.section", _drift_args),
}
for _name, _section in PROBE_SECTIONS.items():
    register_section(_name, _section.module)


def default_sections() -> list[str]:
    """What "every section" means: all but those gathered only on demand."""
    return [name for name, section in PROBE_SECTIONS.items() if not section.on_demand]


def build_request(spec: HostSpec, sections: Iterable[str] | None = None,
                  overrides: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Mapping[str, Any]]:
    """Each section's arguments for ``spec``; ``overrides`` adds to (or replaces) some of a
    section's arguments for this command (``diff`` reads the gpu-stack without its binaries)."""
    order = list(PROBE_SECTIONS)
    names = (sorted(sections, key=lambda n: order.index(n) if n in order else len(order))
             if sections is not None else default_sections())
    extra = overrides or {}
    return {name: {**PROBE_SECTIONS[name].args(spec), **extra.get(name, {})} for name in names}


#: Requests already built this run, by what they depend on: the hosts of a fleet mostly share
#: their venv, models and options, and building one (the scan's and drift's arguments) cost a
#: fifth of a millisecond per host.
_REQUESTS: dict[Any, dict[str, Mapping[str, Any]]] = {}
_REQUESTS_KEEP = 64


def _request_for(spec: HostSpec, sections: Iterable[str] | None,
                 overrides: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    """build_request, once per set of hosts that ask alike. Only for a remote host without
    overrides: a local one's arguments read this process's environment (the node section's)."""
    if spec.ssh is None or overrides:
        return build_request(spec, sections, overrides)
    key = (replace(spec, name="", ssh=None), None if sections is None else tuple(sections))
    found = _REQUESTS.get(key)
    if found is None:
        if len(_REQUESTS) >= _REQUESTS_KEEP:
            _REQUESTS.clear()
        found = _REQUESTS[key] = build_request(spec, sections)
    return found


#: Prints the host user's home, the login folder (where a relative path starts) and, for
#: ``~user/...``, that user's home: what a remote shell and the probe read those paths as.
_WHERE = 'printf "%s\\n" "$HOME"; pwd; if [ -n "$1" ]; then getent passwd -- "$1" | cut -d: -f6; fi'


async def resolve_venv(transport: Transport, spec: HostSpec) -> HostSpec:
    """``spec`` with its venv as an absolute path on the host. ``~``, ``~user`` and relative
    paths (an inventory's ``venv = "~/venv"``) mean what they mean to the host's user, as
    the probe reads them; checks, remedies and the report then name one absolute path (a
    remedy quoting ``~/venv/bin/pip`` would name a file nobody has). An absolute path costs
    nothing; another costs one short command on a remote host. If the host cannot say, the
    path is left as given (the checks then report that it does not exist)."""
    venv = spec.venv
    if not venv or venv.startswith("/"):
        return spec
    from dataclasses import replace

    if spec.is_local:
        return replace(spec, venv=os.path.abspath(os.path.expanduser(venv)))
    head, _, rest = venv.partition("/")
    other_user = head[1:] if head.startswith("~") and head != "~" else ""
    try:
        result = await transport.run(["sh", "-c", _WHERE, "sh", other_user], timeout=30)
    except (TransportError, ProbeError) as exc:
        log.info("venv_not_resolved", host=spec.name, venv=venv, error=str(exc))
        return spec
    lines = result.stdout.decode("utf-8", "surrogateescape").splitlines()
    if result.exit_status != 0 or len(lines) < 2 or not lines[0].startswith("/") or not lines[1].startswith("/"):
        log.info("venv_not_resolved", host=spec.name, venv=venv, error=result.stderr_tail(1))
        return spec
    home, cwd = lines[0], lines[1]
    if head == "~":
        absolute = posixpath.join(home, rest)
    elif other_user:
        if len(lines) < 3 or not lines[2].startswith("/"):
            log.info("venv_not_resolved", host=spec.name, venv=venv, error=f"no user {other_user!r} on the host")
            return spec
        absolute = posixpath.join(lines[2], rest)
    else:
        absolute = posixpath.join(cwd, venv)
    return replace(spec, venv=posixpath.normpath(absolute))


async def gather_facts(
    transport: Transport, spec: HostSpec, *, sections: Iterable[str] | None = None, timeout: float | None = 300,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    until: float | None = None,
) -> HostFacts:
    """Probe a connected host once; failures become a :class:`Problem`, not an exception.
    ``until``: the host's whole budget ends then (time.monotonic), so the probe's does too."""
    request = _request_for(spec, sections, overrides)
    try:
        output = await run_probe(transport, request, python_candidates=venv_pythons(spec.venv), timeout=timeout,
                                 until=until)
    except (TransportError, ProbeError) as exc:
        log.info("probe_failed", host=spec.name, error=str(exc))
        return HostFacts.unavailable(problem_from_error(exc))
    # The answer is untrusted: a section of the wrong shape is this host's error, not a crash.
    malformed = section_problems(output.sections, output.items, output.errors)
    if malformed:
        more = f" (and {len(malformed) - 1} more)" if len(malformed) > 1 else ""
        log.info("probe_malformed", host=spec.name, problems=malformed[:5])
        return HostFacts.unavailable(Problem("probe", f"the host's probe answer is malformed: {malformed[0]}{more}"))
    for name, error in output.errors.items():
        log.warning("probe_section_failed", host=spec.name, section=name, error=error.strip().splitlines()[-1:])
    try:
        return HostFacts.from_probe(output)
    except Exception as exc:  # a shape the schema let through: still only this host's problem
        log.info("probe_unusable", host=spec.name, error=repr(exc))
        return HostFacts.unavailable(Problem("probe", f"the host's probe answer could not be used: "
                                                      f"{type(exc).__name__}: {exc}"))
