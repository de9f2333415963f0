"""An install remedy runs only when pip's own plan breaks nothing that is installed.

Order of events for one ``<python> -m pip install ...`` remedy of a chosen environment:
its pip must be able to show a plan (>= 22.2, else the command is left to the user); pip
prints the plan (``--dry-run --report -``, same interpreter, same index options, run through
the same code path as the install); :func:`envdoctor.install.pip_plan.evaluate` judges it against
what is installed; only a plan that adds no ``pip check`` conflict is installed. What each
install changed is remembered, so the next remedy of the run is judged against the new state.

A venv without pip (``uv venv`` makes none) is installed into with the host's uv instead
(``<uv> pip install --python <python> ...``, :mod:`envdoctor.install.uv_remedy` rewrites the
remedy): uv's own plan (``--dry-run``, :mod:`envdoctor.install.uv_plan`) is judged the same way,
with the same consent, the same memory of what each install changed, and the same re-check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from envdoctor.install import uv_plan
from envdoctor.install.pip_plan import InstallPlan, PackageState, PlanError, dry_run_argv, evaluate, parse_report, supports_report
from envdoctor.engine.results import Remedy
from envdoctor.transport.interface import CommandResult, shell_join

#: The key of Remedy.payload that marks a pip install and says what it installs into.
PAYLOAD_KEY = "pip_install"

RunArgv = Callable[[Sequence[str]], Awaitable[CommandResult]]
#: Per environment prefix: what is installed there now, by canonical name.
InstalledState = MutableMapping[str, dict[str, PackageState]]


@dataclass(frozen=True)
class InstallOutcome:
    #: None when nothing ran (dry run, or refused).
    exit_status: int | None
    output: str = ""
    plan: tuple[str, ...] = ()
    refused: str = ""
    #: Set when the plan was read and judged to break installed requirements (one line each).
    breaks: tuple[str, ...] = ()


def install_payload(prefix: str, pip_version: str | None, installed: Sequence[PackageState],
                    markers: dict[str, str]) -> dict[str, Any]:
    """What a check puts in Remedy.payload so that fix can judge pip's plan."""
    return {PAYLOAD_KEY: {"prefix": prefix, "pip_version": pip_version or "", "installed": tuple(installed),
                          "markers": dict(markers)}}


def is_pip_install(remedy: Remedy) -> bool:
    return remedy.kind == "command" and PAYLOAD_KEY in remedy.payload


def _tail(result: CommandResult, lines: int = 5) -> str:
    return result.stderr_tail(lines) or result.stdout.decode("utf-8", "replace").strip()[-500:]


def no_installer(prefix: str, python: str) -> str:
    """What to do for a venv that has neither pip nor a uv on the host: both ways, named."""
    python = shell_join([python])
    return (f"{prefix} has no pip, and the host has no uv (none on PATH, ~/.local/bin or ~/.cargo/bin): "
            f"add pip ({python} -m ensurepip; on Debian and Ubuntu ensurepip comes with the python3-venv "
            "package) or install uv (https://docs.astral.sh/uv/: its installer puts it in ~/.local/bin), "
            "then run fix again: it installs with either after checking its plan")


async def apply_pip_install(run: RunArgv, remedy: Remedy, *, dry_run: bool, installed: InstalledState) -> InstallOutcome:
    info = remedy.payload[PAYLOAD_KEY]
    prefix = info["prefix"]
    pip_version = info.get("pip_version") or ""
    if uv_plan.is_uv_install(remedy.argv):
        installer, argv, read_plan = "uv", uv_plan.dry_run_argv(remedy.argv), _uv_plan
    elif not pip_version:
        return InstallOutcome(None, refused=no_installer(prefix, remedy.argv[0]))
    elif not supports_report(pip_version):
        return InstallOutcome(None, refused=(
            f"pip {pip_version} in {prefix} cannot show its install plan (pip install --dry-run --report needs "
            "pip >= 22.2), so fix cannot tell what else it would change: check the command and run it by hand"))
    else:
        installer, argv, read_plan = "pip", dry_run_argv(remedy.argv), _pip_plan
    current = installed.setdefault(prefix, {p.key: p for p in info["installed"]})
    asked = f"plan: {shell_join(argv)}"
    planned = await run(argv)
    if planned.exit_status != 0:
        return InstallOutcome(planned.exit_status, f"{asked}\n{_tail(planned)}", refused=(
            f"{installer} could not plan the install (exit status {planned.exit_status}): {_tail(planned, 1)}"))
    try:
        plan = read_plan(planned)
    except PlanError as exc:
        return InstallOutcome(None, f"{asked}\n{_tail(planned)}", refused=f"{installer}'s plan could not be read: {exc}")
    verdict = evaluate(plan, current.values(), info.get("markers"))
    lines = tuple(c.describe() for c in verdict.changes)
    if not verdict.safe:
        return InstallOutcome(None, asked, plan=lines, refused="it would break installed packages: " + "; ".join(verdict.breaks),
                              breaks=verdict.breaks)
    if dry_run:
        return InstallOutcome(None, asked, plan=lines)
    if not verdict.changes:
        return InstallOutcome(0, f"{installer} plans no change: the requirement is already met", plan=lines)
    result = await run(remedy.argv)
    if result.exit_status == 0:
        current.update({p.key: p for p in plan.installs})
    return InstallOutcome(result.exit_status, (result.stdout + result.stderr).decode("utf-8", "replace"), plan=lines)


#: In a pip install payload: the command a remedy stands for, shown only after pip's plan.
PLAN_FIRST = "plan_first"


def plan_first_payload(payload: dict[str, Any], argv: Sequence[str], summary: str) -> dict[str, Any]:
    """``payload`` (install_payload's) for a remedy whose command is shown only after its plan."""
    return {PAYLOAD_KEY: {**payload[PAYLOAD_KEY], PLAN_FIRST: {"argv": tuple(argv), "summary": summary}}}


def plan_first_install(remedy: Remedy | None) -> Remedy | None:
    """The pip install a plan-first remedy stands for (its command), else None."""
    if remedy is None or remedy.automatic or not is_pip_install(remedy):
        return None
    held = remedy.payload[PAYLOAD_KEY].get(PLAN_FIRST)
    if not held:
        return None
    return dataclasses.replace(remedy, argv=tuple(held["argv"]), summary=held["summary"])


async def judge_shown_install(run: RunArgv, remedy: Remedy, installed: InstalledState) -> tuple[Remedy | None, str]:
    """A remedy shown for a person to type is held to the standard of one fix runs: pip's plan
    first, and never shown when that plan breaks an installed requirement or cannot be made.
    ``remedy`` is a plan-first one (plan_first_install): returns the command to show (None for
    none) and the line that says what the plan showed."""
    command = plan_first_install(remedy)
    if command is None:
        raise ValueError("not a plan-first pip install remedy")
    outcome = await apply_pip_install(run, command, dry_run=True, installed=installed)
    plan = ", ".join(outcome.plan) or "nothing to install"
    if outcome.breaks:
        return None, f"no safe remedy: pip's plan for it ({plan}) would break {'; '.join(outcome.breaks)}"
    if outcome.refused:
        return None, f"no remedy shown: pip's plan could not be judged: {outcome.refused}"
    return command, f"pip's plan for the remedy: {plan}; it breaks nothing installed"


def _pip_plan(planned: CommandResult) -> InstallPlan:
    return parse_report(planned.stdout)


def _uv_plan(planned: CommandResult) -> InstallPlan:
    # (uv prints its plan on stderr)
    return uv_plan.parse_plan(planned.stderr + b"\n" + planned.stdout)
