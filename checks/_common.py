"""What several checks need to agree on: which environment the job will use."""

from __future__ import annotations

import os

from envdoctor.facts import Environment, ProgramOnPath
from envdoctor.graph import CheckContext


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


def belongs_to(program: ProgramOnPath, env: Environment, path: str | None = None) -> bool:
    """Whether a program (or the interpreter it names) lives in the environment's bin folder."""
    bin_dir = os.path.normpath(os.path.join(env.prefix, "bin"))
    candidates = [path] if path else [program.path, program.realpath]
    return any(c and os.path.normpath(os.path.dirname(c)) == bin_dir for c in candidates) or (
        bool(env.executable) and any(c == env.executable for c in candidates)
    )
