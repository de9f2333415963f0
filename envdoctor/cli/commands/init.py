"""``envdoctor init``: probe each HOST once and write what its job will use to the inventory."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Any

import click

from envdoctor.cli.exits import handle_errors
from envdoctor.cli.inventory_file import InventoryFile, open_inventory, write_inventory
from envdoctor.cli.options import (
    ACCEPT_NEW,
    CONNECT_TIMEOUT,
    FILE,
    INSECURE_NO_HOST_KEY_CHECK,
    PARALLEL,
    REQUIRE,
    SSH_CONFIG,
    TIMEOUT,
    TRUST_REMOTE_CODE,
    output_options,
    together,
)
from envdoctor.cli.output import ProgressLine, emit
from envdoctor.cli.selection import fleet_settings
from envdoctor.engine.graph import RemedySettings
from envdoctor.errors import ConfigError, UsageError
from envdoctor.inventory import (
    DEFAULT_INVENTORY,
    HostSpec,
    Overrides,
    parse_requirement,
    resolve_hosts,
)
from envdoctor.operations.init import init_hosts
from envdoctor.report.init_report import (
    KEPT,
    NOT_WRITTEN,
    WOULD_WRITE,
    WRITTEN,
    InitOutcome,
    exit_status,
    render,
)
from envdoctor.report.init_toml import (
    TableOptions,
    defined_elsewhere,
    host_table,
    old_table,
    splice,
)

#: Keys of an old table that init does not decide: kept when --force replaces it.
KEPT_KEYS = ("ssh", "requires", "scan", "skip")

INIT_CONFIG = click.option("--config", "config_path", type=FILE,
                           help="Inventory file to write or extend [default: ./envdoctor.toml].")
init_connection = together(INIT_CONFIG, SSH_CONFIG, CONNECT_TIMEOUT, TIMEOUT, PARALLEL, ACCEPT_NEW,
                           INSECURE_NO_HOST_KEY_CHECK)


@click.command("init")
@click.argument("hosts", nargs=-1, required=True, metavar="HOST...")
@init_connection
@REQUIRE
@TRUST_REMOTE_CODE
@click.option("--force", is_flag=True, help="Replace the entry of a host the inventory already has.")
@click.option("--dry-run", is_flag=True, help="Show the TOML that would be written; write nothing.")
@output_options(("text", "json"), "Report format: text for people (the TOML written, shown whole), json for programs.")
@handle_errors
def init_command(hosts: tuple[str, ...], force: bool, dry_run: bool, fmt: str, output: str | None,
                 **opts: Any) -> None:
    """Probe each HOST once and write what its job will use to envdoctor.toml.

    For each host: the environment that ranks first for the job (what --require and the
    stages ask for, then the stack it has: sglang, vllm, speculators, transformers, torch) as
    venv, the model folders found in ~/models, the Hugging Face cache, /data* and /mnt* (a
    bounded search; no model code runs) as models, the GPUs nvidia-smi counts as gpus (0
    without a driver), and the other candidates as comments. With --trust-remote-code it
    writes trust_remote_code = true; otherwise a comment says what that would allow.

    An existing file keeps every other line, comments included; a host it already has is
    kept unless --force replaces its table. The file is written atomically, with a mode
    envdoctor accepts for a config file. Afterwards `envdoctor check HOST` and `envdoctor
    fix HOST` need no flags.

    \b
    Examples:
      envdoctor init ct200
      envdoctor init ct200 b300 --require tiktoken --trust-remote-code
      envdoctor init ct200 --force --dry-run
    """
    path = Path(opts.get("config_path") or DEFAULT_INVENTORY)
    target = open_inventory(path, writing=not dry_run)
    requires = tuple(parse_requirement(r, where="--require") for r in opts.get("requires", ()))
    settings = fleet_settings(opts, RemedySettings())
    specs = resolve_hosts(hosts, target.inventory, Overrides(requires=requires),
                          ssh_config_files=settings.ssh.config_files)
    existing = {s.name for s in specs if s.name in target.inventory.hosts}
    for name in existing if force else ():
        if defined_elsewhere(target.text, name):
            raise ConfigError(f"{path}: hosts.{name} is not a [hosts.{name}] table (an inline table or dotted keys): "
                              "init cannot replace it", hint="remove it by hand, then run envdoctor init again")
    probed = [s for s in specs if force or s.name not in existing]
    if any(s.ssh is not None for s in probed):
        from envdoctor.transport.openssh import resolve_all  # (asyncio: only for SSH hosts)

        resolve_all([s.ssh for s in probed if s.ssh is not None], settings.ssh)
    entries = {}
    if probed:
        with ProgressLine(len(probed)) as progress:
            entries = {e.spec.name: e for e in init_hosts(probed, settings, progress=progress)}
    table_options = TableOptions(trust_remote_code=bool(opts.get("trust_remote_code")), requires=requires,
                                 date=datetime.date.today().isoformat())
    outcomes, tables = [], {}
    for spec in specs:
        entry = entries.get(spec.name)
        if entry is None:
            outcomes.append(InitOutcome(spec.name, spec.destination, KEPT))
        elif not entry.ok:
            outcomes.append(InitOutcome(spec.name, spec.destination, NOT_WRITTEN, entry=entry))
        else:
            options = TableOptions(table_options.trust_remote_code, requires, _kept(target, spec), table_options.date)
            tables[spec.name] = host_table(entry, options)
            outcomes.append(InitOutcome(spec.name, spec.destination, WOULD_WRITE if dry_run else WRITTEN,
                                        tables[spec.name], entry))
    if tables:
        text = splice(target.text, tables)
        if not dry_run:
            try:
                write_inventory(target, text)
            except OSError as exc:
                raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    status = exit_status(outcomes)
    emit(render(outcomes, fmt, config=str(path.absolute())), output,
         "written" if tables and not dry_run else "nothing written")
    sys.exit(status)


def _kept(target: InventoryFile, spec: HostSpec) -> dict[str, Any]:
    """What the old table (replaced with --force) says that init does not decide."""
    return {k: v for k, v in old_table(target.text, spec.name).items() if k in KEPT_KEYS}
