"""An install into a venv that has no pip goes through the host's uv, or says what to add.

The checks write an install remedy as ``<python> -m pip install REQS`` (the venv's own pip).
A venv made by ``uv venv`` has no pip, and a growing share of venvs are made so. When the probe
found a uv on the host (``facts.uv``: on the PATH of a non-interactive command, else where its
installer puts it, ``~/.local/bin`` or ``~/.cargo/bin``), that remedy becomes
``<uv> pip install --python <python> REQS``, uv run by the absolute path of the file that
really runs (shims followed), with the same consent (``automatic``, ``unlocked_by``) and the
same payload: fix judges uv's own plan before it installs (:mod:`pip_remedy`). When the host
has no uv either, the remedy is by hand and names both ways: pip added to the venv, or uv.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from envdoctor.engine.facts import ProgramOnPath
from envdoctor.engine.results import CheckResult, Remedy
from envdoctor.install.pip_remedy import PAYLOAD_KEY, is_pip_install, no_installer
from envdoctor.install.uv_plan import is_uv_install, uv_install_argv
from envdoctor.transport.interface import shell_join


def needs_installer(remedy: Remedy | None) -> bool:
    """An install remedy of a venv without pip, still written for pip."""
    return (remedy is not None and is_pip_install(remedy) and not remedy.payload[PAYLOAD_KEY].get("pip_version")
            and not is_uv_install(remedy.argv) and len(remedy.argv) >= 4)


def with_host_installer(results: Sequence[CheckResult], uv: ProgramOnPath | None) -> list[CheckResult]:
    """``results`` with each install remedy of a venv without pip given to the host's uv (or,
    with no uv there, made by hand with both ways named)."""
    return [dataclasses.replace(r, remedy=for_venv_without_pip(r.remedy, uv)) if needs_installer(r.remedy) else r
            for r in results]


#: How the checks' install remedies say which installer runs.
OWN_PIP = " with the environment's own pip"


def for_venv_without_pip(remedy: Remedy, uv: ProgramOnPath | None) -> Remedy:
    python = remedy.argv[0]
    what = remedy.summary.split(" (shown only", 1)[0].replace(OWN_PIP, "")
    if uv is None:
        prefix = remedy.payload[PAYLOAD_KEY]["prefix"]
        by_uv = shell_join(("uv", *uv_install_argv("uv", remedy.argv)[1:]))
        return dataclasses.replace(remedy, automatic=False, unlocked_by="", argv=(), summary=(
            f"{what}: {no_installer(prefix, python)}; by hand: {shell_join((python, '-m', 'ensurepip'))} && "
            f"{shell_join(remedy.argv)}, or {by_uv}"))
    with_uv = f" with the host's uv ({uv.runs}; the environment has no pip)"
    summary = remedy.summary.replace(OWN_PIP, with_uv) if OWN_PIP in remedy.summary else remedy.summary + with_uv
    return dataclasses.replace(remedy, argv=uv_install_argv(uv.runs, remedy.argv), summary=summary)
