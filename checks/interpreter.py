"""Is the job's interpreter the one we think, and does `pip` on PATH belong to it?"""

from __future__ import annotations

import shlex

from envdoctor.checks._common import belongs_to, describe_system, init_line, target_env, target_python

from envdoctor.engine.facts import ProgramOnPath
from envdoctor.engine.graph import CheckContext, check
from envdoctor.engine.results import CheckResult, Remedy, failed, passed, warned


@check(
    "python.venv",
    facts=(),
    title="The job's Python environment exists and runs",
    requires=["host.python"],
    why="a job started with the wrong interpreter fails on its first import",
)
def venv_runs(ctx: CheckContext) -> CheckResult:
    facts = ctx.facts
    # A venvs section the probe did not finish (its deadline, a probe that died) says nothing
    # about the venv: an error (could not look), never "does not exist" (a gate drains on that).
    if unread := ctx.section_failed("venvs", "the probe could not read the Python environments"):
        return unread
    if ctx.spec.venv:
        env = facts.env_at(ctx.spec.venv)
        found = [e.prefix for e in facts.envs if e.prefix not in facts.configured_envs]
        if env is not None and env.not_a_venv:  # a file, or a folder that is no environment: say exactly that
            return failed(f"the venv {env.not_a_venv}", remedy=Remedy(
                summary="pass --venv the folder of the job's virtualenv (the one holding pyvenv.cfg and bin/python)",
                automatic=False), discovered=found)
        if env is None or not env.exists:
            hint = f"; environments found on the host: {', '.join(found)}" if found else ""
            return failed(
                f"venv {ctx.spec.venv} does not exist{hint}",
                remedy=Remedy(
                    summary=f"create it (python3 -m venv {shlex.quote(ctx.spec.venv)}) or pass the right --venv",
                    automatic=False,
                ),
                discovered=found,
            )
        if not env.runs:
            return failed(
                f"{env.python} does not run: {env.error}",
                remedy=Remedy(summary=f"recreate the venv at {env.prefix} (its base interpreter may have moved)", automatic=False),
            )
        return passed(f"{env.python} runs (Python {env.version})", python=env.python, version=env.version)

    from envdoctor.install.env_choice import (  # (ranks the discovered envs)
        job_needs,
        meets,
        others_than,
        rank,
    )

    default = facts.default_env
    needs = job_needs(ctx.spec, facts, ctx.spec.stage_commands)
    others = others_than(default, facts.envs)
    ranked = rank(others, needs)
    best = ranked[0] if ranked and (ranked[0].met or ranked[0].stack) else None
    useful = [c for c in ranked if c.met or c.stack][:5]
    advice: dict[str, object] = {"discovered": [e.prefix for e in others]} if others else {}
    if useful:
        advice["candidates"] = [c.describe() for c in useful]
    # Named in the text too, not only in details: the exact line that makes the choice.
    choose = (f"{best.describe()}, or run `{init_line(ctx)}` to write it to envdoctor.toml" if best
              else f"make a venv (python3 -m venv ~/venv-job) and run `{init_line(ctx)}`")
    if default is None:
        return failed(
            "no `python3` on PATH for a non-interactive SSH command, and no --venv given"
            + (f"; {best.describe()}" if best else ""),
            remedy=Remedy(summary=choose if best else "pass --venv with the job's virtualenv", automatic=False),
            **advice,
        )
    if not default.runs:
        return failed(f"`python3` on PATH ({default.python}) does not run: {default.error}"
                      + (f"; {best.describe()}" if best else ""), remedy=Remedy(summary=choose, automatic=False),
                      **advice)
    lacking = [n for n in needs if not meets(default, n)]
    if lacking and best is not None and len(best.met) > len(needs) - len(lacking):
        names = ", ".join(dict.fromkeys(n.name for n in lacking))
        return failed(
            f"no venv chosen, and `python3` on PATH ({default.executable}) lacks {names}; {best.describe()}",
            why="a non-interactive SSH command runs the default interpreter, not the venv you use interactively; "
                "fix installs nothing into an interpreter you did not choose",
            remedy=Remedy(summary=choose, automatic=False),
            **advice,
        )
    if default.is_system:
        # Described, not gated: the system's own packages are not the job's (packages.consistent
        # judges only what the job needs of them).
        return passed(f"no venv chosen; `python3` on PATH is {describe_system(default)}: its own packages are "
                      f"described, not gated; for the job, {choose}",
                      python=default.executable, system=True, externally_managed=default.externally_managed,
                      **advice)
    note = f"; also found: {choose}" if best is not None else ""
    return passed(
        f"no venv given; using `python3` on PATH: {default.executable} (Python {default.version}){note}",
        python=default.executable, **advice,
    )


@check(
    "python.pip-path",
    facts=(),
    title="`python3` and `pip` in a non-interactive command are the job's",
    requires=["python.venv"],
    why="`pip install` over SSH installs into whatever interpreter `pip` on PATH belongs to",
)
def pip_path(ctx: CheckContext) -> CheckResult:
    env = target_env(ctx)
    assert env is not None  # python.venv passed
    python = target_python(ctx)
    remedy = Remedy(summary=f"call {shlex.quote(python)} -m pip, never a bare `pip` (envdoctor's remedies do)", automatic=False)
    if "pip" not in env.installed:  # a venv made by uv, or with --without-pip
        remedy = Remedy(summary=f"{env.prefix} has no pip of its own: add it ({shlex.quote(python)} -m ensurepip) and "
                                f"call {shlex.quote(python)} -m pip, or install with `uv pip install --python "
                                f"{shlex.quote(python)}`; never a bare `pip`", automatic=False)
    on_path = ctx.facts.on_path
    pip = on_path.get("pip") or on_path.get("pip3")
    python3 = on_path.get("python3")
    problems = []
    if python3 is not None and not belongs_to(python3, env):
        problems.append(f"`python3` is {_shown(python3)}, not {python}")
    if pip is None:
        problems.append("there is no `pip` on PATH")
    elif not belongs_to(pip, env, interpreter=True):
        problems.append(f"`pip` is {_shown(pip)}, which installs for {pip.interpreter or 'another interpreter'}")
    if problems:
        return warned("in a non-interactive SSH command " + "; ".join(problems), remedy=remedy)
    shims = [p for p in (python3, pip) if p is not None and p.via]
    through = f" (through {'; '.join(f'{p.path} -> {p.runs}' for p in shims)})" if shims else ""
    return passed(f"`python3` and `pip` on PATH are {env.prefix}'s{through}",
                  python3=python3.runs if python3 else None, pip_interpreter=pip.interpreter if pip else None)


def _shown(program: ProgramOnPath) -> str:
    """A program on PATH and, when a shim or wrapper stands in between, what it really runs."""
    if program.error:
        return f"{program.path} ({program.error})"
    if program.resolved and program.resolved != program.path:
        return f"{program.path} (runs {program.resolved}: {'; '.join(program.via)})"
    return program.path
