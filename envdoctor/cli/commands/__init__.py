"""One module per command, imported only when that command runs.

:data:`commands_dict` names each command's module, the click command in it, and the one-line
summary ``envdoctor --help`` shows, so the list of commands costs no import of them.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

import click


class CommandInfo(NamedTuple):
    module: str
    attribute: str
    summary: str


def _info(module: str, attribute: str, summary: str) -> CommandInfo:
    return CommandInfo(f"envdoctor.cli.commands.{module}", attribute, summary)


#: Name -> where the command lives and what it does (a summary fits one line of ``--help``).
commands_dict: dict[str, CommandInfo] = {
    "audit": _info("audit", "audit",
                   "Verify the venv's installed files against their RECORDs."),
    "check": _info("check", "check",
                   "Report what is wrong on each HOST, why, and the fix."),
    "checks": _info("checks", "list_checks",
                    "List the checks in the order they run, with what each requires."),
    "diff": _info("diff", "diff",
                  "Compare what the hosts of one job have, item by item."),
    "drift": _info("drift", "drift",
                   "Check installed libraries' calls against the APIs they import."),
    "facts": _info("facts", "facts_command",
                   "Print what the next stage needs to know about a model on HOST."),
    "fix": _info("check", "fix",
                 "Apply the safe remedies of failing checks, then check again."),
    "hosts": _info("hosts", "hosts_command",
                   "Show where envdoctor would connect for each DEST, as ssh -G does."),
    "init": _info("init", "init_command",
                  "Probe each HOST once and write what its job uses to envdoctor.toml."),
    "merge": _info("merge", "merge",
                   "Fold per-node JSON reports into one fleet report."),
    "patches": _info("patches", "patches_group",
                     "List and show the patches envdoctor can apply."),
    "revert": _info("revert", "revert",
                    "Restore the original files of PATCH on HOST from their backups."),
    "run": _info("run", "run_command",
                 "Run STAGE from envdoctor.toml on HOST once its checks pass."),
    "snapshot": _info("snapshot", "snapshot",
                      "Print what a bug report needs to know of each HOST."),
    "scan": _info("scan", "scan",
                  "Find model-loading calls without trust_remote_code in source."),
}


def load_command(name: str) -> click.Command | None:
    """The click command called ``name`` (its module imported now), or None for no such command."""
    info = commands_dict.get(name)
    if info is None:
        return None
    command: click.Command = getattr(importlib.import_module(info.module), info.attribute)
    return command
