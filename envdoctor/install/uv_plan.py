"""uv's own install plan, for a venv that has no pip (``uv venv`` makes none).

The command is ``<uv> pip install --python <venv>/bin/python ...`` with the host's uv by its
absolute path; its plan is the same command with ``--dry-run``. uv prints the plan as text on
stderr, one line per distribution it would change: `` + name==version`` installed, `` - name==version``
removed (the version it replaces), `` ~ name==version`` reinstalled; ``Would make no changes``
when the requirement is met. Nothing else of it is read.

uv does not print the metadata of what it would install, so the plan is judged (by
:func:`envdoctor.install.pip_plan.evaluate`, as pip's is) on what the installed distributions
require of the versions the plan changes. The planned distributions' own requirements need no
judging: uv resolves them together with what stays installed, so they hold after the install.

Pure: parsing and argv only. The commands run in :mod:`envdoctor.install.pip_remedy`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

from envdoctor.install.pip_plan import InstallPlan, PackageState, PlanError

#: uv's plan-only flag, and plain text (no colours) whatever the host's terminal settings.
DRY_RUN_FLAGS = ("--dry-run", "--color", "never")
#: A plan is a line per distribution; a host that answers more is not answering a plan.
MAX_PLAN_BYTES = 4 * 1024 * 1024
#: `` + tiktoken==0.9.0``, `` - urllib3==2.2.3``, `` ~ pkg==1.0``, `` + pkg @ file:///...``.
_CHANGE = re.compile(r"^ ([+~-]) ([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?(?:==(\S+)| @ (\S+))\s*$")
_NO_CHANGE = "Would make no changes"
_WOULD = re.compile(r"^Would (install|uninstall|download|make no changes)\b", re.MULTILINE)


def is_uv_install(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is ``<uv> pip install ...``."""
    return len(argv) >= 3 and posixpath.basename(argv[0]) == "uv" and list(argv[1:3]) == ["pip", "install"]


def uv_install_argv(uv: str, pip_argv: Sequence[str]) -> tuple[str, ...]:
    """``<python> -m pip install ARGS`` as ``<uv> pip install --python <python> ARGS``."""
    if len(pip_argv) < 4 or list(pip_argv[1:4]) != ["-m", "pip", "install"]:
        raise PlanError(f"not a pip install command: {' '.join(pip_argv)}")
    return (uv, "pip", "install", "--python", pip_argv[0], *pip_argv[4:])


def uv_target_python(argv: Sequence[str]) -> str | None:
    """The interpreter a ``uv pip install`` installs for (its ``--python``)."""
    for i, word in enumerate(argv):
        if word == "--python" and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith("--python="):
            return word.partition("=")[2]
    return None


def dry_run_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """The install command with uv's plan-only flags after ``install``, every other option kept."""
    if not is_uv_install(argv):
        raise PlanError(f"not a uv pip install command: {' '.join(argv)}")
    return (*argv[:3], *DRY_RUN_FLAGS, *argv[3:])


def parse_plan(text: bytes | str) -> InstallPlan:
    """uv's ``--dry-run`` text: what it would install (a reinstall included), by name and version."""
    if len(text) > MAX_PLAN_BYTES:
        raise PlanError(f"uv's plan is larger than {MAX_PLAN_BYTES // (1024 * 1024)} MB")
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not _WOULD.search(text):
        raise PlanError("uv's answer has no plan (no \"Would install\" or \"Would make no changes\" line)")
    installs = []
    for line in text.splitlines():
        match = _CHANGE.match(line)
        if match is None or match.group(1) == "-":
            continue  # (a removed version: the `+` line of the same name says what replaces it)
        name, version, url = match.group(2), match.group(3), match.group(4)
        installs.append(PackageState(name, version if version is not None else url))
    if not installs and _NO_CHANGE not in text:
        raise PlanError("uv's plan names no distribution it would install")
    return InstallPlan(tuple(installs), {})
