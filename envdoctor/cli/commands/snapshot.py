"""``envdoctor snapshot``: what a bug report needs to know of each host."""

from __future__ import annotations

import sys
from typing import Any

import click

from envdoctor.cli.exits import handle_errors
from envdoctor.cli.options import checking_options, output_options
from envdoctor.cli.output import ProgressLine, emit
from envdoctor.cli.selection import select_hosts


@click.command("snapshot")
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
@checking_options
@output_options()
@handle_errors
def snapshot(hosts: tuple[str, ...], fmt: str, output: str | None, **opts: Any) -> None:
    """Print what a bug report needs to know of each HOST, as one text block (or JSON).

    OS, kernel, glibc, CPU, memory and limits; Python and the relevant packages of the venv
    (torch, its CUDA build, NCCL, cuDNN, triton, flashinfer, sgl-kernel, vllm, sglang,
    transformers, tokenizers, speculators, ...); the CUDA toolkit, the driver, the GPUs and
    their topology; the job's environment variables with secrets masked; envdoctor's patch
    ledger; and envdoctor's own findings (the checks run as `check` runs them). Paste the text
    where vLLM's collect_env or SGLang's check_env output is asked for. The JSON is check's,
    each host with its snapshot and what it has: `envdoctor diff` reads it back.

    \b
    Examples:
      envdoctor snapshot ct200 --venv /root/venv_sglang211
      envdoctor snapshot local --format json --output /shared/snapshots/$(hostname).json
    """
    from envdoctor.operations.compare import snapshot_hosts
    from envdoctor.report.snapshot_report import fleet_of, render

    selection = select_hosts(hosts, **opts)
    with ProgressLine(len(selection.specs)) as progress:
        found = snapshot_hosts(selection.specs, selection.graph, selection.settings, progress=progress)
    report = fleet_of(found)
    bad = sum(1 for h in report.hosts if not h.ok)
    emit(render(found, fmt, config=selection.config), output,
         f"{bad} host(s) with problems" if bad else "all OK")
    sys.exit(report.exit_status)
