"""What several checks need to agree on: which environment the job will use."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from envdoctor.engine.facts import Environment, ProgramOnPath
from envdoctor.engine.graph import CheckContext
from envdoctor.engine.host_paths import program_folder, runs_from
from envdoctor.engine.results import CheckResult, Remedy, Status

if TYPE_CHECKING:
    from envdoctor.gpu.verdicts import Finding
from envdoctor.transport.interface import shell_join

#: Why an install into the job's interpreter is only shown when the user named none.
NOT_CHOSEN = ("fix installs only into an interpreter you chose: pass --venv, set venv in envdoctor.toml, "
              "or run from an active virtualenv")


def chosen_venv(ctx: CheckContext) -> bool:
    """Whether the user named the job's environment (--venv, venv in envdoctor.toml, or the
    active $VIRTUAL_ENV of a local run): fix changes no other interpreter."""
    return bool(ctx.spec.venv)


def system_interpreter(ctx: CheckContext) -> Environment | None:
    """The default interpreter, when no environment was chosen and it is the operating
    system's own (PEP 668, or a distro install): it is described, not gated. Its packages
    serve the system's tools; only what the job needs of it is judged."""
    if ctx.spec.venv:
        return None
    default = ctx.facts.default_env
    return default if default is not None and default.is_system else None


def describe_system(env: Environment) -> str:
    """``/usr/bin/python3 (Python 3.11.2), the system's own interpreter (externally managed: PEP 668)``."""
    kind = "externally managed: PEP 668" if env.externally_managed else "a distro install"
    return f"{env.executable or env.python} (Python {env.version}), the system's own interpreter ({kind})"


def init_line(ctx: CheckContext) -> str:
    """The command that writes the job's environment (and models, GPUs) for this host to envdoctor.toml."""
    return shell_join(("envdoctor", "init", ctx.spec.name))


def target_env(ctx: CheckContext) -> Environment | None:
    """The configured venv, or else the interpreter a bare `python3` reaches."""
    if ctx.spec.venv:
        return ctx.facts.env_at(ctx.spec.venv)
    return ctx.facts.default_env


def target_python(ctx: CheckContext) -> str:
    """The absolute interpreter remedies use: never a bare `pip` or `python3`."""
    env = target_env(ctx)
    if env is None:
        return "python3"
    if ctx.spec.venv:
        return env.python
    return env.executable or env.python


def belongs_to(program: ProgramOnPath, env: Environment, *, interpreter: bool = False) -> bool:
    """Whether a program (or, with ``interpreter``, the interpreter a pip script runs under),
    shims followed, is the environment's: it runs from the environment's bin folder or its
    interpreter's, folders compared as the host resolved them (host_paths.py), the file itself
    not followed (a venv's bin/python links to its base)."""
    return runs_from(program_folder(program, interpreter=interpreter), env)


def findings_result(findings: Sequence[Finding], summary: str, details: dict[str, Any]) -> CheckResult:
    """One result from a check's findings: fail if any fails, else warn if any warns (their
    messages joined, their remedies shown by hand), else pass with `summary` and the notes."""
    fails = [f for f in findings if f.level == "fail"]
    warns = [f for f in findings if f.level == "warn"]
    details = {**details, "findings": [f.to_json() for f in findings]}
    fixes = list(dict.fromkeys(f.remedy for f in fails + warns if f.remedy))
    remedy = Remedy(summary="; ".join(fixes), automatic=False) if fixes else None
    if fails or warns:
        status = Status.FAIL if fails else Status.WARN
        return CheckResult("", status, "; ".join(f.message for f in fails + warns), remedy=remedy, details=details)
    notes = "".join(f"; {f.message}" for f in findings if f.level == "info")
    return CheckResult("", Status.PASS, summary + notes, details=details)
