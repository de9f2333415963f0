"""What several checks need to agree on: which environment the job will use."""

from __future__ import annotations

import os

from envdoctor.facts import Environment, ProgramOnPath
from envdoctor.graph import CheckContext


#: Why an install into the job's interpreter is only shown when the user named none.
NOT_CHOSEN = ("fix installs only into an interpreter you chose: pass --venv, set venv in envdoctor.toml, "
              "or run from an active virtualenv")


def chosen_venv(ctx: CheckContext) -> bool:
    """Whether the user named the job's environment (--venv, venv in envdoctor.toml, or the
    active $VIRTUAL_ENV of a local run): fix changes no other interpreter."""
    return bool(ctx.spec.venv)


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


def same_interpreter(path: str, env: Environment) -> bool:
    """Whether an interpreter path is the environment's: in its bin folder (folders compared
    with symlinks resolved, the file itself not: a venv's bin/python links to its base)."""
    if not path:
        return False
    from envdoctor.env_choice import real_path

    folder = real_path(os.path.dirname(path))
    if folder == real_path(os.path.join(env.prefix, "bin")):
        return True
    return bool(env.executable) and folder == real_path(os.path.dirname(env.executable))


def belongs_to(program: ProgramOnPath, env: Environment, path: str | None = None) -> bool:
    """Whether a program (or the interpreter it names), shims followed, is the environment's."""
    return same_interpreter(path or program.runs, env)
