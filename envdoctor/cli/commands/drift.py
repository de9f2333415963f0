"""``envdoctor drift``: the installed libraries' calls checked against the APIs they reach."""

from __future__ import annotations

import sys
from typing import Any

import click

from envdoctor.cli.exits import handle_errors
from envdoctor.cli.options import connection_options, environment_options, output_options
from envdoctor.cli.output import emit
from envdoctor.cli.selection import named_stage, select_hosts
from envdoctor.drift.request import entry_of_command
from envdoctor.errors import UsageError
from envdoctor.inventory import Stage
from envdoctor.operations.drift import DriftOptions, run_drift
from envdoctor.report.drift_report import render


def stage_entry(stage: Stage) -> str:
    """The module or script the stage's command runs; a command that runs neither is exit 2."""
    entry = entry_of_command(stage.command)
    if entry is None:
        raise UsageError(f"stage {stage.name!r} runs neither `-m module` nor a .py script",
                         hint="use --entry MODULE|SCRIPT, or no entry to check every consumer file")
    return entry


def drift_options(consumers: tuple[str, ...], providers: tuple[str, ...], entry: str | None,
                  baselines: tuple[str, ...], *, cache: bool) -> DriftOptions:
    """What to check, from the command line; an empty name or a relative baseline is exit 2."""
    for option, names in (("--drift", consumers), ("--provider", providers)):
        if any(not name.strip() for name in names):
            raise UsageError(f"{option} '' names no distribution", hint=f"e.g. {option} vllm")
    relative = [b for b in baselines if not b.startswith("/")]
    if relative:
        raise UsageError(f"--baseline {relative[0]!r} is not an absolute path",
                         hint="give the environment's folder on the host, e.g. /root/venv_vllm011")
    return DriftOptions(consumers=consumers, providers=providers, entry=entry, cache=cache, baselines=baselines)


@click.command("drift")
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
@connection_options
@environment_options
@click.option("--drift", "consumers", multiple=True, metavar="DIST",
              help="Also check this installed distribution's calls into the others (repeatable).")
@click.option("--provider", "providers", multiple=True, metavar="DIST",
              help="Check only the calls into this distribution (repeatable; default: every one imported).")
@click.option("--entry", metavar="MODULE|SCRIPT",
              help="Check only the consumer files this module (pkg.mod) or script on the host imports.")
@click.option("--stage", "stage_name", metavar="STAGE",
              help="Like --entry, with the -m module or script of this [stages] command (on its host by default).")
@click.option("--baseline", "baselines", multiple=True, metavar="PREFIX",
              help="An environment on the host holding the provider version a consumer pins, to check the "
              "same uses against (repeatable; default: the environments discovered on the host).")
@click.option("--no-cache", is_flag=True, help="Parse again; ignore the parse cache kept on the host in ~/.cache/envdoctor/drift-<digest>/.")
@click.option("--verbose", "-v", "show_all", is_flag=True, help="Also show the uses that could not be resolved.")
@output_options()
@handle_errors
def drift(hosts: tuple[str, ...], consumers: tuple[str, ...], providers: tuple[str, ...], entry: str | None,
          stage_name: str | None, baselines: tuple[str, ...], no_cache: bool, show_all: bool, fmt: str,
          output: str | None, **opts: Any) -> None:
    """Check the installed libraries' calls against the APIs of the libraries they import.

    Static: the host's own Python parses the code (nothing is imported or run). Checks
    the libraries that depend on transformers, vllm or sglang, plus --drift DIST: every
    import, attribute and call into another installed distribution, against the
    definition it reaches. Exit status 1 when a use is an error.

    \b
    Examples:
      envdoctor drift ct200 --venv /root/venv_sglang211
      envdoctor drift ct200 --venv /root/venv --drift speculators --provider vllm -f json
      envdoctor drift ct200 --stage gen
    """
    selection = select_hosts(hosts, runs_checks=False, **opts)
    if stage_name is not None:
        if entry is not None:
            raise UsageError("--entry and --stage both name an entry", hint="give one of them")
        stage = named_stage(selection.inventory, stage_name)
        if not hosts and stage.host:
            # The stage's own host by default.
            selection = select_hosts((stage.host,), runs_checks=False, **opts)
        entry = stage_entry(stage)
    options = drift_options(consumers, providers, entry, baselines, cache=not no_cache)
    report = run_drift(selection.specs, selection.settings, options)
    errors = sum(p.count("error") for h in report.hosts for p in h.pairs)
    bad = sum(1 for h in report.hosts if not h.ok)
    emit(render(report, fmt, verbose=show_all, config=selection.config), output,
         f"{errors} error(s) on {bad} host(s)" if bad else "no API drift found")
    sys.exit(report.exit_status)
