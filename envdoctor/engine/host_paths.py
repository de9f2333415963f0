"""Paths of a host compared as the host resolves them, never as the controller would.

Whether two paths on a host are one environment, or an interpreter is an environment's, is a
question about the host's file system. The controller's ``os.path.realpath`` answers it
about another machine: a link that exists here and not there (or the reverse: the host's
``/bin -> usr/bin``, a venv reached through a linked folder, a linked home) gives a wrong
verdict. So the probe reports its own ``realpath`` of each path the checks compare
(``real_prefix``, ``real_bin``, ``real_executable_dir`` of an environment; ``real_dir`` and
``interpreter_real_dir`` of a program on PATH), only where links change it. Where the answer
has none (no link changes the path, or a probe older than these fields) the path itself,
lexically normalised, is the host's answer. The same for ``local``: one code path. Pure.
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envdoctor.engine.facts import Environment, ProgramOnPath


def lexical(path: str) -> str:
    """``posixpath.normpath``, and "" for no path (normpath would make it ".")."""
    return posixpath.normpath(path) if path else ""


def env_prefix(env: Environment) -> str:
    """The environment's prefix, resolved on the host."""
    return env.real_prefix or lexical(env.prefix)


def env_bin(env: Environment) -> str:
    """The environment's bin folder, resolved on the host (the probe leaves it out when it is
    the resolved prefix's bin)."""
    if env.real_bin:
        return env.real_bin
    prefix = env_prefix(env)
    return posixpath.join(prefix, "bin") if prefix else ""


def env_executable_dir(env: Environment) -> str:
    """The folder of the interpreter that reported on the environment, resolved on the host."""
    if not env.executable:
        return ""
    return env.real_executable_dir or lexical(posixpath.dirname(env.executable))


def interpreter_folders(env: Environment) -> set[str]:
    """The folders an interpreter of this environment runs from (its own file not followed:
    a venv's bin/python is a link to its base interpreter)."""
    return {f for f in (env_bin(env), env_executable_dir(env)) if f}


def same_environment(a: Environment, b: Environment) -> bool:
    """One environment of the host: the prefixes resolve alike, or one's interpreter runs from
    the other's bin folder (a venv's python3 first on PATH reports its base install as its
    prefix, since the probe runs it without site)."""
    if not a.prefix or not b.prefix:
        return False
    return env_prefix(a) == env_prefix(b) or bool(interpreter_folders(a) & interpreter_folders(b))


def program_folder(program: ProgramOnPath, *, interpreter: bool = False) -> str:
    """The folder of what a program on PATH runs (shims followed), or with ``interpreter`` of
    the interpreter a pip script runs under (what runs, when that is unknown), resolved on the
    host."""
    if interpreter and program.interpreter:
        return program.interpreter_real_dir or lexical(posixpath.dirname(program.interpreter))
    return program.real_dir or lexical(posixpath.dirname(program.runs))


def runs_from(folder: str, env: Environment) -> bool:
    """Whether an interpreter in ``folder`` (resolved on the host) is the environment's."""
    return bool(folder) and folder in interpreter_folders(env)
