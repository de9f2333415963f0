"""Is the job's interpreter the one we think, and does `pip` on PATH belong to it?"""

from __future__ import annotations

from envdoctor.graph import CheckContext, check
from envdoctor.results import CheckResult, Remedy, failed, passed, warned

from envdoctor.checks._common import belongs_to, target_env, target_python
from envdoctor.checks.packages import unmet_requirements


@check(
    "python.venv",
    facts=(),
    title="The job's Python environment exists and runs",
    requires=["host.python"],
    why="a job started with the wrong interpreter fails on its first import",
)
def venv_runs(ctx: CheckContext) -> CheckResult:
    facts = ctx.facts
    if ctx.spec.venv:
        env = facts.env_at(ctx.spec.venv)
        found = [e.prefix for e in facts.envs if e.prefix not in facts.configured_envs]
        if env is None or not env.exists:
            hint = f"; environments found on the host: {', '.join(found)}" if found else ""
            return failed(
                f"venv {ctx.spec.venv} does not exist{hint}",
                remedy=Remedy(
                    summary=f"create it (python3 -m venv {ctx.spec.venv}) or pass the right --venv",
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

    default = facts.default_env
    if default is None:
        return failed(
            "no `python3` on PATH for a non-interactive SSH command, and no --venv given",
            remedy=Remedy(summary="pass --venv with the job's virtualenv", automatic=False),
        )
    if not default.runs:
        return failed(f"`python3` on PATH ({default.python}) does not run: {default.error}")
    missing = unmet_requirements(default, ctx.spec.requires)
    if missing:
        better = [e.prefix for e in facts.envs if e.runs and not unmet_requirements(e, ctx.spec.requires)]
        if better:
            names = ", ".join(sorted(m.name for m, _ in missing))
            return failed(
                f"`python3` on PATH ({default.executable}) lacks {names}; "
                f"{better[0]} has everything required",
                why="a non-interactive SSH command runs the default interpreter, not the venv you use interactively",
                remedy=Remedy(summary=f"pass --venv {better[0]} (or set venv in envdoctor.toml)", automatic=False),
                candidates=better,
            )
    return passed(
        f"no venv given; using `python3` on PATH: {default.executable} (Python {default.version})",
        python=default.executable,
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
    remedy = Remedy(summary=f"call {python} -m pip, never a bare `pip` (envdoctor's remedies do)", automatic=False)
    on_path = ctx.facts.on_path
    pip = on_path.get("pip") or on_path.get("pip3")
    python3 = on_path.get("python3")
    problems = []
    if python3 is not None and not belongs_to(python3, env):
        problems.append(f"`python3` is {python3.path}, not {python}")
    if pip is None:
        problems.append("there is no `pip` on PATH")
    elif not belongs_to(pip, env, pip.interpreter):
        problems.append(f"`pip` is {pip.path}, which installs for {pip.interpreter or 'another interpreter'}")
    if problems:
        return warned("in a non-interactive SSH command " + "; ".join(problems), remedy=remedy)
    return passed(f"`python3` and `pip` on PATH are {env.prefix}'s")
