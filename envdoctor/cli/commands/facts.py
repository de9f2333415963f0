"""``envdoctor facts``: what the next stage needs to know about a model on a host."""

from __future__ import annotations

import asyncio
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
from envdoctor.cli.output import emit
from envdoctor.cli.selection import one_host, select_hosts
from envdoctor.errors import UsageError
from envdoctor.report.facts_report import render_facts
from envdoctor.stages.handoff import collect_facts_document


@click.command("facts")
@click.argument("host", metavar="HOST")
@connection_options
@environment_options
@model_options
@DRAFT_LAYERS
@output_options()
@handle_errors
def facts_command(host: str, draft_layers: int, fmt: str, output: str | None, **opts: Any) -> None:
    """Print what the next stage needs to know about a model on HOST, as JSON with -f json:
    the venv's absolute interpreter, tokenizer ids, architecture, DFlash and EAGLE-3 settings.

    Without --trust-remote-code the ids come from the tokenizer's files; with it, from
    loading the tokenizer in the venv (offline, stdin closed, with a timeout).

    \b
    Examples:
      envdoctor facts ct200 --venv /root/venv_sglang211 --model /root/models/Kimi-K2.6 -f json
      envdoctor facts ct200 --model /root/models/Kimi-K2.6 --draft-layers 6 --trust-remote-code
    """
    selection = select_hosts([host], runs_checks=False, **opts)
    spec = one_host(selection, host)
    model = opts["models"][-1] if opts["models"] else None
    if model is None and len(spec.models) != 1:
        raise UsageError("facts needs one model directory", hint="pass --model DIR")
    doc = asyncio.run(collect_facts_document(spec, selection.settings, model, draft_layers))
    emit(render_facts(doc, fmt, config=selection.config), output, "; ".join(doc["problems"]))
    sys.exit(EXIT_PROBLEMS if doc["problems"] else EXIT_OK)
