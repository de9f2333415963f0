"""The command line: the only place that prints, exits, and configures logging."""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
import structlog

from envdoctor import __version__
from envdoctor.errors import EnvdoctorError, UsageError
from envdoctor.fleet import FleetReport, FleetSettings, run_fleet
from envdoctor.graph import CheckGraph, RemedySettings, load_checks
from envdoctor.inventory import HostSpec, Inventory, Overrides, load_inventory, parse_requirement, resolve_hosts
from envdoctor.logsafe import configure_logging
from envdoctor.report import FORMATS, render
from envdoctor.transport.ssh import SSHOptions

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def fail_usage(message: str, hint: str = "") -> None:
    click.echo(f"envdoctor: error: {message}", err=True)
    if hint:
        click.echo(f"  hint: {hint}", err=True)
    sys.exit(EXIT_USAGE)


def handle_errors(func: F) -> F:
    """Turn envdoctor's errors into one line and an exit status, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except KeyboardInterrupt:
            click.echo("envdoctor: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except UsageError as exc:
            fail_usage(str(exc), exc.hint)
        except EnvdoctorError as exc:
            click.echo(f"envdoctor: error: {exc}", err=True)
            if exc.hint:
                click.echo(f"  hint: {exc.hint}", err=True)
            sys.exit(EXIT_PROBLEMS)

    return wrapper  # type: ignore[return-value]  # functools.wraps keeps the signature


def output_options(func: F) -> F:
    """--format and --output, which every command takes."""
    func = click.option(
        "--output", "-o", "output", type=click.Path(dir_okay=False, writable=True),
        help="Write the report to FILE instead of standard output.",
    )(func)
    func = click.option(
        "--format", "-f", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
        help="Report format: text for people, json for programs, junit for CI.",
    )(func)
    return func


def host_options(func: F) -> F:
    """Options that say which hosts, how to reach them, and what they should have."""
    options = [
        click.option("--config", "config_path", type=click.Path(dir_okay=False),
                     help="Inventory file (default: ./envdoctor.toml when it exists)."),
        click.option("--ssh-config", "ssh_config", type=click.Path(dir_okay=False),
                     help="OpenSSH client config to read instead of ~/.ssh/config (like ssh -F)."),
        click.option("--venv", metavar="PATH", help="The job's virtualenv on every host (absolute path)."),
        click.option("--require", "requires", multiple=True, metavar="REQ",
                     help="A PEP 508 requirement the venv must satisfy, e.g. 'tiktoken' (repeatable)."),
        click.option("--model", "models", multiple=True, metavar="DIR",
                     help="A model directory on the host the job will load (repeatable)."),
        click.option("--trust-remote-code", is_flag=True,
                     help="Consent that the models' own code may run and that loader calls may be patched to pass the flag."),
        click.option("--connect-timeout", type=click.FloatRange(min=0.1), default=15.0, show_default=True,
                     help="Seconds to wait for each host to accept the SSH connection."),
        click.option("--timeout", type=click.FloatRange(min=1), default=900.0, show_default=True,
                     help="Deadline in seconds for all the work on one host."),
        click.option("--parallel", type=click.IntRange(min=1), default=64, show_default=True,
                     help="Hosts worked on at the same time."),
        click.option("--accept-new", is_flag=True,
                     help="Record the key of a host not yet in known_hosts (OpenSSH's accept-new); a changed key is still refused."),
        click.option("--checks", "check_files", multiple=True, type=click.Path(dir_okay=False),
                     help="A Python file with checks of your own (repeatable)."),
        click.option("--only", "only", multiple=True, metavar="CHECK",
                     help="Run only this check and those it requires (repeatable)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@dataclass(frozen=True)
class Selection:
    """What one invocation works on: the hosts and how to reach them."""

    specs: list[HostSpec]
    inventory: Inventory
    settings: FleetSettings
    graph: CheckGraph


def select_hosts(hosts: Sequence[str], remedies: RemedySettings = RemedySettings(), **opts: Any) -> Selection:
    inventory = load_inventory(opts["config_path"])
    venv = opts["venv"]
    if venv is not None and not venv.startswith("/") and not venv.startswith("~"):
        raise UsageError(f"--venv {venv!r} must be an absolute path on the host", hint="e.g. --venv /root/venv_sglang211")
    overrides = Overrides(
        venv=venv,
        requires=tuple(parse_requirement(r, where="--require") for r in opts["requires"]),
        models=tuple(opts["models"]),
        trust_remote_code=opts["trust_remote_code"],
    )
    ssh_config = (opts["ssh_config"],) if opts["ssh_config"] else ()
    if ssh_config and not Path(ssh_config[0]).is_file():
        raise UsageError(f"SSH config {ssh_config[0]} does not exist")
    specs = resolve_hosts(hosts, inventory, overrides, ssh_config_files=ssh_config)
    graph = load_checks(Path(p) for p in opts["check_files"])
    only = tuple(opts["only"]) or None
    if only:
        graph.closure(only)  # unknown names are a usage error now, not a surprise per host
    settings = FleetSettings(
        ssh=SSHOptions(config_files=ssh_config, connect_timeout=opts["connect_timeout"], accept_new=opts["accept_new"]),
        timeout=opts["timeout"],
        parallel=opts["parallel"],
        remedies=remedies,
        only=only,
    )
    return Selection(specs, inventory, settings, graph)


def emit(text: str, output: str | None, summary: str = "") -> None:
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc.strerror}") from None
        click.echo(f"envdoctor: report written to {output}" + (f" ({summary})" if summary else ""), err=True)
    else:
        click.echo(text, nl=False)


class ProgressLine:
    """A one-line progress display on stderr while hosts run (only on a terminal)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.finished = 0
        self.enabled = sys.stderr.isatty() and total > 1
        self._status: Any = None

    def __enter__(self) -> ProgressLine:
        if self.enabled:
            from rich.console import Console

            self._status = Console(stderr=True).status(f"0/{self.total} hosts")
            self._status.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.stop()

    def __call__(self, host: str, phase: str) -> None:
        if phase in ("done", "problems"):
            self.finished += 1
        if self._status is not None:
            self._status.update(f"{self.finished}/{self.total} hosts done (last: {host} {phase})")


def run_and_report(selection: Selection, *, command: str, fmt: str, output: str | None,
                   fix: bool = False, dry_run: bool = False) -> None:
    with ProgressLine(len(selection.specs)) as progress:
        report: FleetReport = asyncio.run(
            run_fleet(selection.specs, selection.graph, selection.settings,
                      command=command, fix=fix, dry_run=dry_run, progress=progress)
        )
    color = fmt == "text" and output is None and sys.stdout.isatty()
    bad = sum(1 for h in report.hosts if not h.ok)
    emit(render(report, fmt, color=color), output, f"{bad} host(s) with problems" if bad else "all OK")
    sys.exit(report.exit_status)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="envdoctor")
@click.option("-v", "--verbose", count=True, help="Log what happens to stderr (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """Diagnose and repair the environments of GPU hosts before LLM jobs run on them.

    HOST is `local` (the default), a host or group from envdoctor.toml, an alias from
    ~/.ssh/config, or user@host[:port].

    \b
    Exit status: 0 nothing wrong, 1 something wrong on a host, 2 the command was wrong.
    """
    configure_logging(verbose)


@cli.command()
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
@host_options
@output_options
@handle_errors
def check(hosts: tuple[str, ...], fmt: str, output: str | None, **opts: Any) -> None:
    """Run the check graph on each HOST and report what is wrong, why, and the fix.

    \b
    Examples:
      envdoctor check
      envdoctor check ct200 b300 --venv /root/venv_sglang211 --require tiktoken
      envdoctor check gpu-fleet --format junit --output preflight.xml
    """
    run_and_report(select_hosts(hosts, **opts), command="check", fmt=fmt, output=output)


@cli.command()
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
@host_options
@click.option("--dry-run", is_flag=True, help="Show the commands (and diffs) that would run; change nothing.")
@click.option("--index-url", metavar="URL", help="Passed to pip for installs (hosts without internet).")
@click.option("--extra-index-url", "extra_index_urls", multiple=True, metavar="URL", help="Passed to pip (repeatable).")
@click.option("--find-links", "find_links", multiple=True, metavar="DIR|URL", help="Passed to pip (repeatable).")
@output_options
@handle_errors
def fix(hosts: tuple[str, ...], dry_run: bool, index_url: str | None, extra_index_urls: tuple[str, ...],
        find_links: tuple[str, ...], fmt: str, output: str | None, **opts: Any) -> None:
    """Apply the safe remedies of failing checks on each HOST, then check again.

    Installs always use the venv's absolute interpreter (`<venv>/bin/python -m pip`).
    Remedies marked 'by hand' (downgrades, creating a venv) are shown, never run.
    A second fix on a healthy host does nothing.
    """
    remedies = RemedySettings(index_url, extra_index_urls, find_links)
    run_and_report(select_hosts(hosts, remedies, **opts), command="fix", fmt=fmt, output=output,
                   fix=True, dry_run=dry_run)


@cli.command("checks")
@click.option("--checks", "check_files", multiple=True, type=click.Path(dir_okay=False),
              help="Also list the checks in this file (repeatable).")
@handle_errors
def list_checks(check_files: tuple[str, ...]) -> None:
    """List the checks, in the order they run, with what each requires."""
    graph = load_checks(Path(p) for p in check_files)
    width = max(len(c) for c in graph.order)
    for check_id in graph.order:
        item = graph.checks[check_id]
        needs = f"  (after {', '.join(item.requires)})" if item.requires else ""
        click.echo(f"{check_id:<{width}}  {item.title}{needs}")


def main() -> None:
    cli(prog_name="envdoctor")
