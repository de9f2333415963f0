"""The command line: the only place that prints, exits, and configures logging."""

from __future__ import annotations

import functools
import gc
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import click

from envdoctor import __version__
from envdoctor.errors import ConfigError, EnvdoctorError, UsageError
from envdoctor.operations.fleet import FleetReport, FleetSettings, check_here, run_fleet
from envdoctor.engine.graph import CheckGraph, RemedySettings, load_checks
from envdoctor.inventory import (
    HostSpec,
    Inventory,
    Overrides,
    load_inventory,
    parse_requirement,
    parse_waivers,
    resolve_hosts,
)
from envdoctor.logsafe import configure_logging, get_logger, redact_secret_values
from envdoctor.report import FORMATS, SCAN_FORMATS, render
from envdoctor.safe_text import terminal_safe
from envdoctor.transport.target import SSHOptions

F = TypeVar("F", bound=Callable[..., Any])

log = get_logger("envdoctor.cli.main")
#: Where the group keeps -v for its commands (click's Context.meta is shared down the chain).
VERBOSE_KEY = "envdoctor.verbose"

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: Shared by every option that takes a file (a click type is only its settings; each new one
#: costs gettext look-ups at start-up).
FILE = click.Path(dir_okay=False)
WRITABLE_FILE = click.Path(dir_okay=False, writable=True)


def fail_usage(message: str, hint: str = "") -> None:
    click.echo(f"envdoctor: error: {message}", err=True)
    if hint:
        click.echo(f"  hint: {hint}", err=True)
    sys.exit(EXIT_USAGE)


def handle_errors(func: F) -> F:
    """Turn envdoctor's errors into one line and an exit status, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        context = click.get_current_context(silent=True)
        # Every command logs at -v what it was asked, so that -v is never silent (and without
        # -v structlog is not even imported: start-up time).
        if context is not None and context.meta.get(VERBOSE_KEY):
            log.info("command", command=context.command_path,
                     options={k: v for k, v in kwargs.items() if v not in (None, (), False)})
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
        "--output", "-o", "output", type=WRITABLE_FILE, callback=validate_output,
        help="Write the report to FILE instead of standard output (its folder is created when missing).",
    )(func)
    func = click.option(
        "--format", "-f", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
        help="Report format: text for people, json for programs, junit for CI.",
    )(func)
    return func


PATCHES_OPTION = click.option(
    "--patches", "patch_files", multiple=True, type=FILE,
    help="A Python file with patches of your own (repeatable).",
)


def host_options(func: F) -> F:
    """Options that say which hosts, how to reach them, and what they should have."""
    options = [
        click.option("--config", "config_path", type=FILE,
                     help="Inventory file (default: ./envdoctor.toml when it exists)."),
        click.option("--ssh-config", "ssh_config", type=FILE,
                     help="OpenSSH client config to read instead of ~/.ssh/config (like ssh -F)."),
        click.option("--venv", metavar="PATH", help="The job's virtualenv on every host (absolute path)."),
        click.option("--require", "requires", multiple=True, metavar="REQ",
                     help="A PEP 508 requirement the venv must satisfy, e.g. 'tiktoken' (repeatable)."),
        click.option("--model", "models", multiple=True, metavar="DIR",
                     help="A model directory on the host the job will load (repeatable)."),
        click.option("--trust-remote-code", is_flag=True,
                     help="Consent that the models' own code may run and that loader calls may be patched to pass the flag."),
        click.option("--scan", "scan", multiple=True, metavar="DIST",
                     help="Also scan this installed distribution for loader calls without trust_remote_code (repeatable)."),
        click.option("--connect-timeout", type=click.FloatRange(min=0.1), default=None,
                     help="Seconds to wait for each host to accept the SSH connection "
                          "[default: the SSH config's ConnectTimeout, else 15]."),
        click.option("--timeout", type=click.FloatRange(min=1), default=900.0, show_default=True,
                     help="Deadline in seconds for all the work on one host."),
        click.option("--parallel", type=click.IntRange(min=1), default=64, show_default=True,
                     help="Hosts worked on at the same time."),
        click.option("--accept-new", is_flag=True,
                     help="Record the key of a host not yet in known_hosts (OpenSSH's accept-new); a changed key is still refused."),
        click.option("--insecure-no-host-key-check", "insecure_no_host_key_check", is_flag=True,
                     help="Honour 'StrictHostKeyChecking no' from the SSH config (unknown keys accepted, "
                          "logged loudly); without it 'no' is treated as 'yes'. A changed key is still refused."),
        click.option("--checks", "check_files", multiple=True, type=FILE,
                     help="A Python file with checks of your own (repeatable)."),
        PATCHES_OPTION,
        click.option("--only", "only", multiple=True, metavar="CHECK",
                     help="Run only this check and those it requires (repeatable)."),
        click.option("--skip", "skip", multiple=True, metavar="CHECK[=REASON]",
                     help="Waive a check: it still runs and is reported as waived, never failing the run (repeatable)."),
        click.option("--gpus", "gpus", type=click.IntRange(min=0), metavar="N",
                     help="GPUs every host must have: host.gpu fails without a driver or with fewer."),
        click.option("--draft", is_flag=True,
                     help="The job trains a drafter: drafter-only checks (model.mask-token) fail instead of inform."),
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


def check_ssh_config(path: str) -> None:
    """--ssh-config names a file ssh -F can read: /dev/null too (`ssh -F /dev/null`: no config at all)."""
    if not Path(path).exists():
        raise UsageError(f"SSH config {path} does not exist")
    if Path(path).is_dir():
        raise UsageError(f"SSH config {path} is a folder", hint="give the config file itself, like ssh -F")


def select_hosts(hosts: Sequence[str], remedies: RemedySettings = RemedySettings(), *, runs_checks: bool = True,
                 **opts: Any) -> Selection:
    """The hosts, settings and check graph of a command. A command that runs no checks
    (audit, revert, facts) loads the check modules only to validate what names them
    (--skip, skip = [...], --only, --checks): that saves their import at start-up."""
    inventory = load_inventory(opts["config_path"])
    _note_config(inventory)
    venv = opts["venv"]
    if venv is not None and not venv.startswith("/") and not venv.startswith("~"):
        raise UsageError(f"--venv {venv!r} must be an absolute path on the host", hint="e.g. --venv /root/venv_sglang211")
    for model in opts["models"]:
        if not model.strip():  # (the probe would look in the login folder)
            raise UsageError(f"--model {model!r} names no directory", hint="e.g. --model /root/models/Kimi-K2.6")
    if any(not name.strip() for name in opts.get("scan", ())):
        raise UsageError("--scan '' names no distribution", hint="e.g. --scan lm_eval")
    overrides = Overrides(
        venv=venv,
        requires=tuple(parse_requirement(r, where="--require") for r in opts["requires"]),
        models=tuple(opts["models"]),
        trust_remote_code=opts["trust_remote_code"],
        scan=tuple(opts.get("scan", ())),
        skip=parse_waivers(opts.get("skip", ()), where="--skip", default_reason="--skip on the command line"),
        gpus=opts.get("gpus"),
        draft=bool(opts.get("draft")),
    )
    ssh_config = (opts["ssh_config"],) if opts["ssh_config"] else ()
    if ssh_config:
        check_ssh_config(ssh_config[0])
    specs = resolve_hosts(hosts, inventory, overrides, ssh_config_files=ssh_config)
    active = os.environ.get("VIRTUAL_ENV", "")
    if active.startswith("/"):  # the user's active virtualenv is their choice for this machine
        specs = [replace(s, venv=active) if s.is_local and not s.venv else s for s in specs]
    patch_files = tuple(opts.get("patch_files", ()))
    only = tuple(opts["only"]) or None
    names_checks = bool(opts["check_files"] or patch_files or only or overrides.skip or any(
        item.skip for item in (*inventory.hosts.values(), *inventory.stages.values())))
    graph = load_checks(Path(p) for p in opts["check_files"]) if runs_checks or names_checks else CheckGraph(())
    if patch_files:
        from envdoctor.checks.patches import patch_checks  # content builds the checks of the user's patches
        from envdoctor.patching.engine import user_patches

        specs = [replace(spec, patches=patch_files) for spec in specs]
        graph = CheckGraph([*graph.checks.values(), *patch_checks(user_patches(patch_files))])
    if only:
        graph.closure(only)  # unknown names are a usage error now, not a surprise per host
    check_waivers(graph, overrides.skip, inventory)
    settings = FleetSettings(
        ssh=SSHOptions(config_files=ssh_config, connect_timeout=opts["connect_timeout"], accept_new=opts["accept_new"],
                       allow_no_host_key_check=opts.get("insecure_no_host_key_check", False)),
        timeout=opts["timeout"],
        parallel=opts["parallel"],
        remedies=remedies,
        only=only,
    )
    targets = [spec.ssh for spec in specs if spec.ssh is not None]
    if targets:
        from envdoctor.transport.openssh import resolve_all  # ssh -G once per host, now: a bad SSH config is exit 2

        resolve_all(targets, settings.ssh)
    return Selection(specs, inventory, settings, graph)


def check_waivers(graph: CheckGraph, cli_skip: Sequence[tuple[str, str]], inventory: Inventory) -> None:
    """A waiver of a check that does not exist is a typo that would hide nothing: exit 2."""
    named = [(check_id, "--skip") for check_id, _ in cli_skip]
    named += [(check_id, f"{inventory.path}: hosts.{host.name}.skip") for host in inventory.hosts.values()
              for check_id, _ in host.skip]
    named += [(check_id, f"{inventory.path}: stages.{stage.name}.skip") for stage in inventory.stages.values()
              for check_id, _ in stage.skip]
    for check_id, where in named:
        if check_id not in graph.checks:
            raise UsageError(f"{where}: no check named {check_id!r} to waive", hint="`envdoctor checks` lists them")


def validate_output(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """--output is checked before anything runs on a host: a report that cannot be written
    must not be found out after a fix changed the host."""
    if value is None or value == "-":
        return value
    path = Path(value).expanduser()
    if path.is_dir():
        raise click.BadParameter(f"{value} is a folder; give a file name inside it")
    if path.exists():
        if path.is_file() and not os.access(path, os.W_OK):
            raise click.BadParameter(f"{value} is not writable")
        return value
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the folders missing on the way are created when the report is written
    if not folder.is_dir():
        raise click.BadParameter(f"cannot create {value}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise click.BadParameter(f"cannot create {value}: the folder {folder} is not writable")
    return value


def write_report_atomically(path: Path, text: str) -> None:
    """A CI job or a prolog reads --output after we exit: Ctrl-C or a kill while writing must
    leave the previous report or the new one, never half of it."""
    if path.is_symlink() and path.lstat().st_uid not in (0, os.geteuid()):
        raise UsageError(f"{path} is a symlink another user owns; not writing through it")
    if path.exists() and not path.is_file():  # /dev/stdout, a FIFO: write through, never replace
        path.write_text(text, encoding="utf-8")
        return
    import tempfile  # (only when a report is written to a file: start-up)

    # mkstemp: O_EXCL with a random name, so a symlink planted in a shared folder is never followed.
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


CONFIG_META = "envdoctor.config"


_EXIT_STATUS_LINE = re.compile(r'\n  "exit_status": -?\d+,\n')


def _note_config(inventory: Inventory) -> None:
    """Remember for this invocation which config was loaded: JSON reports name it."""
    context = click.get_current_context(silent=True)
    if context is not None:
        context.meta[CONFIG_META] = str(inventory.path.absolute()) if inventory.path else None


def _with_config(text: str) -> str:
    """A JSON report gains ``"config": PATH`` (null without one) after its envelope keys."""
    context = click.get_current_context(silent=True)
    if context is None or CONFIG_META not in context.meta or not text.startswith("{"):
        return text
    # Every report is indented by dump_json, envelope first: the line goes in after
    # "exit_status" without decoding and encoding a fleet's report again. (A top-level key is
    # the only text at two spaces after a newline: newlines inside strings are escaped.)
    if '\n  "config": ' in text:
        return text
    envelope_end = _EXIT_STATUS_LINE.search(text, 0, 1000)
    if envelope_end is not None:
        at = envelope_end.end()
        return f'{text[:at]}  "config": {json.dumps(context.meta[CONFIG_META])},\n{text[at:]}'
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if not isinstance(data, dict) or "config" in data:
        return text
    keys = list(data)
    at = next((i + 1 for i, key in enumerate(keys) if key == "exit_status"), 0)
    items = list(data.items())
    items.insert(at, ("config", context.meta[CONFIG_META]))
    return json.dumps(dict(items), indent=2) + "\n"


def emit(text: str, output: str | None, summary: str = "", *, redacted: bool = False) -> None:
    # Every report, whatever the command: no URL userinfo, token or key material comes out.
    # (``redacted``: the renderer did it field by field, as `hosts` does to show each
    # destination as it was given.)
    text = _with_config(text) if redacted else redact_secret_values(_with_config(text))
    if not text.startswith(("{", "<?xml")):  # JSON and XML escape for themselves
        text = terminal_safe(text)  # a host's or a model's ESC sequence never reaches the terminal
    if output:
        try:
            Path(output).parent.mkdir(parents=True, exist_ok=True)  # validate_output found it creatable
            write_report_atomically(Path(output), text)
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
        if command == "check" and all(spec.ssh is None for spec in selection.specs):
            # This machine only: one probe command, no event loop (asyncio is a third of start-up).
            report = check_here(selection.specs, selection.graph, selection.settings, progress=progress)
        else:
            import asyncio

            report = asyncio.run(run_fleet(selection.specs, selection.graph, selection.settings,
                                           command=command, fix=fix, dry_run=dry_run, progress=progress))
    from envdoctor.checks.remote_code import scan_names_not_installed

    if unknown := scan_names_not_installed(h.results for h in report.hosts):
        raise UsageError(f"--scan {', '.join(unknown)}: not installed on any host checked",
                         hint="name an installed distribution (`<venv>/bin/python -m pip list` shows them)")
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
    ~/.ssh/config, user@host[:port] ([v6addr]:port for IPv6), or ssh://[user@]host[:port].

    \b
    Exit status: 0 nothing wrong, 1 something wrong on a host, 2 the command was wrong.
    """
    configure_logging(verbose)
    click.get_current_context().meta[VERBOSE_KEY] = verbose


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

    Installs always use the venv's absolute interpreter (`<venv>/bin/python -m pip`), and
    only into an interpreter you chose (--venv, venv in envdoctor.toml, or locally the active
    $VIRTUAL_ENV). Each runs only when the venv's own pip shows a plan (pip install --dry-run
    --report) that breaks no installed package; otherwise the plan and who breaks are shown.
    Packages a model's own code imports are installed only with --trust-remote-code.
    Remedies marked 'by hand' (downgrades, creating a venv) are shown, never run.
    A second fix on a healthy host does nothing.
    """
    remedies = RemedySettings(index_url, extra_index_urls, find_links)
    run_and_report(select_hosts(hosts, remedies, **opts), command="fix", fmt=fmt, output=output,
                   fix=True, dry_run=dry_run)


@cli.command("hosts")
@click.argument("hosts", nargs=-1, required=True, metavar="DEST...")
@click.option("--config", "config_path", type=FILE,
              help="Inventory file (default: ./envdoctor.toml when it exists).")
@click.option("--ssh-config", "ssh_config", type=FILE,
              help="OpenSSH client config to read instead of ~/.ssh/config (like ssh -F).")
@click.option("--format", "-f", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Report format: text for people (with where each value came from), json for programs.")
@click.option("--output", "-o", "output", type=WRITABLE_FILE,
              help="Write the report to FILE instead of standard output.")
@handle_errors
def hosts_command(hosts: tuple[str, ...], config_path: str | None, ssh_config: str | None, fmt: str,
                  output: str | None) -> None:
    """Print where envdoctor would connect for each DEST, resolved as OpenSSH resolves it
    (`ssh -G`), without connecting: hostname, port, user, identity files, ProxyJump hops,
    known_hosts files, StrictHostKeyChecking, ConnectTimeout. Exit status 2 when a
    destination cannot be resolved.

    \b
    Examples:
      envdoctor hosts ct200 b300
      envdoctor hosts fleet --ssh-config ./ssh_config --format json
    """
    from envdoctor.report.hosts_plan import hosts_report

    if ssh_config:
        check_ssh_config(ssh_config)
    options = SSHOptions(config_files=(ssh_config,) if ssh_config else ())
    text, status = hosts_report(hosts, load_inventory(config_path), options, fmt)
    emit(text, output, "all resolved" if status == EXIT_OK else "some destinations could not be resolved",
         redacted=True)
    sys.exit(status)


@cli.command("checks")
@click.option("--checks", "check_files", multiple=True, type=FILE,
              help="Also list the checks in this file (repeatable).")
@output_options
@handle_errors
def list_checks(check_files: tuple[str, ...], fmt: str, output: str | None) -> None:
    """List the checks, in the order they run, with what each requires."""
    from envdoctor.report.listing import render_checks

    emit(render_checks(load_checks(Path(p) for p in check_files), fmt), output)


@cli.command("scan")
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--format", "-f", "fmt", type=click.Choice(SCAN_FORMATS), default="text", show_default=True,
              help="Report format: text for people, json for programs, sarif for code-scanning tools.")
@click.option("--output", "-o", "output", type=WRITABLE_FILE, callback=validate_output,
              help="Write the report to FILE instead of standard output.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes that parse files.")
@handle_errors
def scan(paths: tuple[str, ...], fmt: str, output: str | None, jobs: int) -> None:
    """Find model-loading calls without trust_remote_code in Python source.

    PATH is a file or a folder (a site-packages folder, a package, a repository).
    Exit status 1 when a call is missing the flag or passes False; 2 when a file named
    as PATH cannot be read as Python reads it (UTF-8, or the codec its coding declaration
    names) or does not parse (in a folder such files are listed as errors).

    \b
    Examples:
      envdoctor scan /root/venv/lib/python3.11/site-packages/speculators
      envdoctor scan . --format sarif --output trust-remote-code.sarif
    """
    from envdoctor.report.scan_report import render as render_scan
    from envdoctor.scan.scanner import TrustRemoteCodeScanner

    for path in paths:
        if not Path(path).exists():
            raise UsageError(f"{path} does not exist", hint="give a Python file or a folder to scan")
        if not (Path(path).is_file() or Path(path).is_dir()):
            raise UsageError(f"{path} is neither a file nor a folder", hint="give a Python file or a folder to scan")
    scanner = TrustRemoteCodeScanner(jobs=jobs)
    scans = [(Path(p), scanner.scan([p])) for p in paths]
    for root, report in scans:
        # A file named on the command line that cannot be read as Python is bad input; inside a
        # folder such a file is listed with the rest (site-packages holds test data that does not parse).
        if root.is_file() and report.errors:
            raise UsageError(f"{root}: {report.errors[0].message}",
                             hint="scan reads a file as Python does (UTF-8 unless a coding declaration on its first "
                                  "two lines names another codec): fix the file, or scan its folder "
                                  "to list it among the files that could not be scanned")
    gaps = sum(len(r.gaps) for _, r in scans)
    emit(render_scan(scans, fmt), output, f"{gaps} call(s) without trust_remote_code" if gaps else "no gaps")
    sys.exit(EXIT_PROBLEMS if gaps else EXIT_OK)


@cli.command("merge")
@click.argument("reports", nargs=-1, required=True, metavar="REPORT.json...",
                type=click.Path(dir_okay=False, path_type=Path))
@output_options
@handle_errors
def merge(reports: tuple[Path, ...], fmt: str, output: str | None) -> None:
    """Fold per-node JSON reports into one fleet report, hosts grouped by what differs.

    For clusters where every node runs its own gate (`envdoctor check local --format json
    --output /shared/preflight/$(hostname).json` in a Slurm prolog or an init container):
    a report of host `local` is named after its file. Exit 1 when any host has a problem.

    \b
    Example:
      envdoctor merge /shared/preflight/*.json --format junit --output fleet.xml
    """
    from envdoctor.report.merge import common_outcomes, group_hosts, merge_reports, render_groups_text

    report = merge_reports(reports)
    groups = group_hosts(report.hosts)
    if fmt == "json":
        import json

        data = json.loads(render(report, "json"))
        data["schema"] = 1
        data["groups"] = [g.to_json() for g in groups]
        data["common"] = [{"id": o.check_id, "status": o.status} for o in common_outcomes(report.hosts)]
        text = json.dumps(data, indent=2) + "\n"
    elif fmt == "text":
        text = render_groups_text(groups, common_outcomes(report.hosts)) + "\n" + render(report, "text")
    else:
        text = render(report, fmt)
    bad = sum(1 for h in report.hosts if not h.ok)
    emit(text, output, f"{bad} of {len(report.hosts)} host(s) with problems" if bad else "all OK")
    sys.exit(report.exit_status)


@cli.group("patches")
def patches_group() -> None:
    """The patches envdoctor can apply (shipped in patches/, or your own with --patches)."""


@patches_group.command("list")
@PATCHES_OPTION
@output_options
@handle_errors
def list_patches(patch_files: tuple[str, ...], fmt: str, output: str | None) -> None:
    """List every patch fix can apply: id, distribution and versions, summary (the generic
    trust-remote-code patch too, whose files check finds on each host)."""
    from envdoctor.patching.engine import generic_patches, load_patches
    from envdoctor.report.listing import render_patch_list

    emit(render_patch_list([*load_patches(patch_files).patches, *generic_patches()], fmt), output)


@patches_group.command("show")
@click.argument("patch_id", metavar="ID")
@PATCHES_OPTION
@output_options
@handle_errors
def show_patch(patch_id: str, patch_files: tuple[str, ...], fmt: str, output: str | None) -> None:
    """Show what patch ID changes, where, for which versions, and why."""
    from envdoctor.report.listing import render_patch

    emit(render_patch(known_patch(patch_id, patch_files), fmt), output)


def known_patch(patch_id: str, patch_files: tuple[str, ...]) -> Any:
    """The patch named ``patch_id`` (shipped, generic or the user's); an unknown id is exit 2."""
    from envdoctor.patching.engine import generic_patches, load_patches

    for generic in generic_patches():
        if generic.id == patch_id:
            return generic
    try:
        return load_patches(patch_files).get(patch_id)
    except ConfigError:
        known = [p.id for p in load_patches(patch_files).patches] + [g.id for g in generic_patches()]
        raise UsageError(f"no patch named {patch_id!r}", hint=f"known patches: {', '.join(known)} "
                         "(`envdoctor patches list`; a patch of your own needs --patches FILE)") from None


@cli.command()
@click.argument("hosts", nargs=-1, required=True, metavar="HOST...")
@click.argument("patch_id", metavar="PATCH")
@host_options
@output_options
@handle_errors
def revert(hosts: tuple[str, ...], patch_id: str, fmt: str, output: str | None, **opts: Any) -> None:
    """Restore the original files of PATCH on HOST from envdoctor's backups.

    Only a file that is still exactly what envdoctor wrote is restored; the revert is
    recorded in the environment's ledger.

    \b
    Example:
      envdoctor revert ct200 speculators-tokenizer-trust-remote-code --venv /root/venv_sglang211
    """
    import asyncio

    from envdoctor.report.revert_report import render_revert
    from envdoctor.operations.revert import revert_on_host

    known_patch(patch_id, tuple(opts.get("patch_files", ())))  # a typo is a usage error, not a host's
    selection = select_hosts(hosts, runs_checks=False, **opts)

    async def run_all() -> list[Any]:
        return list(await asyncio.gather(
            *(revert_on_host(spec, selection.settings, patch_id) for spec in selection.specs)
        ))

    results = asyncio.run(run_all())
    bad = sum(1 for r in results if not r.ok)
    emit(render_revert(results, fmt), output, f"{bad} host(s) not reverted" if bad else "reverted")
    sys.exit(EXIT_PROBLEMS if bad else EXIT_OK)


@cli.command()
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
@host_options
@click.option("--full", is_flag=True, help="Hash every file again; ignore the stat cache kept on the host.")
@output_options
@handle_errors
def audit(hosts: tuple[str, ...], full: bool, fmt: str, output: str | None, **opts: Any) -> None:
    """Verify every installed file of the venv against its distribution's RECORD.

    Tells apart envdoctor's recorded patches (patched), foreign changes (modified),
    missing files, patches a reinstall took away (reverted) and code that no RECORD
    lists (extra). Without --venv, audits the default interpreter's site-packages.
    Exit status 1 when anything other than `patched` is found.

    \b
    Examples:
      envdoctor audit ct200 --venv /root/venv_sglang211
      envdoctor audit gpu-fleet --format json --output audit.json
    """
    from envdoctor.audit.records import RecordAuditor, audit_here, run_audit
    from envdoctor.report.audit_report import render as render_audit

    selection = select_hosts(hosts, runs_checks=False, **opts)
    with ProgressLine(len(selection.specs)) as progress:
        if all(spec.ssh is None for spec in selection.specs):  # this machine: no event loop (start-up)
            report = audit_here(selection.specs, selection.settings, RecordAuditor(full=full), progress)
        else:
            import asyncio

            report = asyncio.run(run_audit(selection.specs, selection.settings, RecordAuditor(full=full), progress))
    color = fmt == "text" and output is None and sys.stdout.isatty()
    bad = sum(1 for h in report.hosts if not h.ok)
    emit(render_audit(report, fmt, color=color), output, f"{bad} host(s) with differences" if bad else "all OK")
    sys.exit(report.exit_status)


def _draft_layers_option(func: F) -> F:
    return click.option("--draft-layers", type=click.IntRange(min=1), default=5, show_default=True,
                        help="Layers of the DFlash drafter; sets dflash.target_layer_ids.")(func)


def _one_host(selection: Selection, host: str) -> HostSpec:
    if len(selection.specs) != 1:
        raise UsageError(f"{host!r} names {len(selection.specs)} hosts; this command takes one")
    return selection.specs[0]


@cli.command("facts")
@click.argument("host", metavar="HOST")
@host_options
@_draft_layers_option
@output_options
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
    from envdoctor.report.facts_report import render_facts
    import asyncio

    from envdoctor.stages.handoff import collect_facts_document

    selection = select_hosts([host], runs_checks=False, **opts)
    spec = _one_host(selection, host)
    model = opts["models"][-1] if opts["models"] else None
    if model is None and len(spec.models) != 1:
        raise UsageError("facts needs one model directory", hint="pass --model DIR")
    doc = asyncio.run(collect_facts_document(spec, selection.settings, model, draft_layers))
    emit(render_facts(doc, fmt), output, "; ".join(doc["problems"]))
    sys.exit(EXIT_PROBLEMS if doc["problems"] else EXIT_OK)


def _write_through(stream: Any) -> Callable[[bytes], None]:
    def write(chunk: bytes) -> None:
        stream.buffer.write(chunk)
        stream.buffer.flush()

    return write


@cli.command("run")
@click.argument("host", metavar="HOST")
@click.argument("stage_name", metavar="STAGE")
@host_options
@_draft_layers_option
@click.option("--detach", is_flag=True, help="Start the command under nohup with a log file; print its pid and log path.")
@output_options
@handle_errors
def run_command(host: str, stage_name: str, draft_layers: int, detach: bool, fmt: str, output: str | None,
                **opts: Any) -> None:
    """Run STAGE from envdoctor.toml on HOST once the checks it requires pass.

    The command runs with the venv's absolute interpreter ({python}) over the same SSH
    connection; its output streams here and its exit status is envdoctor's. Placeholders:
    {python} {venv} {model} and the facts of `envdoctor facts` ({mask_token_id},
    {dflash_target_layer_ids}, {eagle3_target_layer_ids}, {vocab_size}, ...).
    """
    from envdoctor.operations.fleet import HostReport
    from envdoctor.inventory import stage_trains_drafter
    from envdoctor.stages.handoff import command_placeholders, run_stage_on_host

    selection = select_hosts([host], **opts)
    stage = selection.inventory.stages.get(stage_name)
    if stage is None:
        known = ", ".join(sorted(selection.inventory.stages)) or "none"
        raise UsageError(f"no stage named {stage_name!r}", hint=f"stages in the inventory: {known}")
    spec = _one_host(selection, host)
    # What this run starts is the stage's command (code.api-drift follows its entry).
    spec = replace(spec, skip=spec.skip + stage.skip, draft=spec.draft or stage_trains_drafter(stage),
                   stage_commands=(stage.command,))
    if stage.host and stage.host != host:
        raise UsageError(f"stage {stage_name!r} runs on {stage.host!r}, not {host!r}")
    selection.graph.closure(stage.requires)  # an unknown check id is the config's fault: exit 2
    command_placeholders(stage.command)
    model = opts["models"][-1] if opts["models"] else None
    import asyncio

    outcome = asyncio.run(run_stage_on_host(
        spec, stage, selection.graph, selection.settings, model=model, draft_layers=draft_layers, detach=detach,
        on_stdout=_write_through(sys.stdout), on_stderr=_write_through(sys.stderr),
    ))
    if outcome.refused:
        report = FleetReport("run", [HostReport(spec, outcome.results)])
        emit(render(report, fmt), output)
        failing = ", ".join(r.id for r in outcome.refused)
        click.echo(f"envdoctor: not running stage {stage_name!r} on {host}: failing checks: {failing}", err=True)
        sys.exit(EXIT_PROBLEMS)
    if detach:
        if fmt == "json":
            from envdoctor.report.envelope import dump_json

            emit(dump_json("run", EXIT_OK, {"pid": outcome.pid, "log": outcome.log_path,
                                            "stage_command": outcome.command}), output)
        else:
            emit(f"pid {outcome.pid}\nlog {outcome.log_path}\n", output)
        sys.exit(EXIT_OK)
    sys.exit(outcome.exit_status if outcome.exit_status is not None else EXIT_PROBLEMS)

from envdoctor.cli.commands.drift import register as _register_drift  # noqa: E402  (after the helpers it takes)

_register_drift(cli, host_options=host_options, output_options=output_options, handle_errors=handle_errors,
                select_hosts=select_hosts, emit=emit)


def main() -> None:
    # A fleet's probe answers are thousands of new (acyclic) containers per host; with the
    # default thresholds the cyclic collector would walk the whole heap again and again
    # (3-4 ms of CPU per host at 256 hosts). Start-up's objects are frozen out of its sight
    # and it runs after 50,000 allocations instead of 700: cycles are still collected.
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        cli(prog_name="envdoctor")
    except KeyboardInterrupt:  # Ctrl-C before a command's own handler was in place
        click.echo("envdoctor: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
