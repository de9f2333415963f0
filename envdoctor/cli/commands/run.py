"""``envdoctor run``: a stage of envdoctor.toml, once the checks it requires pass."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import click

from envdoctor.cli.exits import EXIT_OK, EXIT_PROBLEMS, handle_errors
from envdoctor.cli.options import DRAFT_LAYERS, checking_options, output_options
from envdoctor.cli.output import emit
from envdoctor.cli.selection import Selection, named_stage, one_host, select_hosts
from envdoctor.errors import TransportError, UsageError
from envdoctor.inventory import HostSpec, Stage, stage_trains_drafter
from envdoctor.operations.fleet import FleetReport, HostReport
from envdoctor.report import render
from envdoctor.report.envelope import dump_json
from envdoctor.stages.handoff import command_placeholders, run_stage_on_host


def stage_host(selection: Selection, host: str, stage: Stage) -> HostSpec:
    """HOST as the stage runs on it; a stage that cannot run there as written is exit 2."""
    spec = one_host(selection, host)
    # What this run starts is the stage's command (code.api-drift follows its entry).
    spec = replace(spec, skip=spec.skip + stage.skip, draft=spec.draft or stage_trains_drafter(stage),
                   stage_commands=(stage.command,))
    if stage.host and stage.host != host:
        raise UsageError(f"stage {stage.name!r} runs on {stage.host!r}, not {host!r}")
    selection.graph.closure(stage.requires)  # an unknown check id is the config's fault: exit 2
    command_placeholders(stage.command)
    return spec


def _write_through(stream: Any) -> Callable[[bytes], None]:
    def write(chunk: bytes) -> None:
        stream.buffer.write(chunk)
        stream.buffer.flush()

    return write


@click.command("run")
@click.argument("host", metavar="HOST")
@click.argument("stage_name", metavar="STAGE")
@checking_options
@DRAFT_LAYERS
@click.option("--detach", is_flag=True,
              help="Start the command in a session of its own, its output in a log in ~/.cache/envdoctor/logs/ on the "
              "host; print its pid and log path.")
@output_options()
@handle_errors
def run_command(host: str, stage_name: str, draft_layers: int, detach: bool, fmt: str, output: str | None,
                **opts: Any) -> None:
    """Run STAGE from envdoctor.toml on HOST once the checks it requires pass.

    The command runs with the venv's absolute interpreter ({python}) over the same SSH
    connection; its output streams here and its exit status is envdoctor's. Placeholders:
    {python} {venv} {model} and the facts of `envdoctor facts` ({mask_token_id},
    {dflash_target_layer_ids}, {eagle3_target_layer_ids}, {vocab_size}, ...).
    """
    selection = select_hosts([host], **opts)
    stage = named_stage(selection.inventory, stage_name)
    spec = stage_host(selection, host, stage)
    model = opts["models"][-1] if opts["models"] else None
    outcome = run_stage_on_host(
        spec, stage, selection.graph, selection.settings, model=model, draft_layers=draft_layers, detach=detach,
        on_stdout=_write_through(sys.stdout), on_stderr=_write_through(sys.stderr),
    )
    if outcome.problem is not None:  # nothing ran: the host could not be checked
        raise TransportError(outcome.problem.message, hint=outcome.problem.hint or None)
    if outcome.refused:
        report = FleetReport("run", [HostReport(spec, outcome.results)])
        emit(render(report, fmt, config=selection.config), output)
        failing = ", ".join(r.id for r in outcome.refused)
        click.echo(f"envdoctor: not running stage {stage_name!r} on {host}: failing checks: {failing}", err=True)
        sys.exit(EXIT_PROBLEMS)
    if detach:
        if fmt == "json":
            emit(dump_json("run", EXIT_OK, {"pid": outcome.pid, "log": outcome.log_path,
                                            "stage_command": outcome.command}, config=selection.config), output)
        else:
            emit(f"pid {outcome.pid}\nlog {outcome.log_path}\n", output)
        sys.exit(EXIT_OK)
    sys.exit(outcome.exit_status if outcome.exit_status is not None else EXIT_PROBLEMS)
