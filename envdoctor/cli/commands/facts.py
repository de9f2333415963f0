"""``envdoctor facts``: what the next stage needs to know about a model on a host."""

from __future__ import annotations

import sys
from typing import Any

import click

from envdoctor.cli.exits import EXIT_OK, EXIT_PROBLEMS, handle_errors
from envdoctor.cli.options import (
    DRAFT_LAYERS,
    connection_options,
    environment_options,
    model_options,
    output_options,
)
from envdoctor.cli.output import ProgressLine, emit
from envdoctor.cli.selection import select_hosts
from envdoctor.errors import UsageError
from envdoctor.report.facts_report import render_facts_of_hosts
from envdoctor.stages.handoff import collect_facts


@click.command("facts")
@click.argument("hosts", nargs=-1, required=True, metavar="HOST...")
@connection_options
@environment_options
@model_options
@DRAFT_LAYERS
@output_options()
@handle_errors
def facts_command(hosts: tuple[str, ...], draft_layers: int, fmt: str, output: str | None, **opts: Any) -> None:
    """Print what the next stage needs to know about a model on each HOST, as JSON with -f json:
    the venv's absolute interpreter, tokenizer ids, architecture, DFlash and EAGLE-3 settings.

    Without --trust-remote-code the ids come from the tokenizer's files; with it, from
    loading the tokenizer in the venv (offline, stdin closed, with a timeout). One host prints
    its document; several print {"hosts": [document, ...]}.

    \b
    Examples:
      envdoctor facts ct200 --venv /root/venv_sglang211 --model /root/models/Kimi-K2.6 -f json
      envdoctor facts ct200 --model /root/models/Kimi-K2.6 --draft-layers 6 --trust-remote-code
    """
    selection = select_hosts(hosts, runs_checks=False, **opts)
    model = opts["models"][-1] if opts["models"] else None
    if model is None:
        for spec in selection.specs:
            if len(spec.models) != 1:
                raise UsageError(f"facts needs one model directory for {spec.name}", hint="pass --model DIR")
    with ProgressLine(len(selection.specs)) as progress:
        docs = collect_facts(selection.specs, selection.settings, model, draft_layers, progress)
    problems = [f"{doc.get('host')}: {p}" if len(docs) > 1 else p for doc in docs for p in doc.get("problems", [])]
    emit(render_facts_of_hosts(docs, fmt, config=selection.config), output, "; ".join(problems))
    sys.exit(EXIT_PROBLEMS if problems else EXIT_OK)
