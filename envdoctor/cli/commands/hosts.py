"""``envdoctor hosts``: where envdoctor would connect, resolved as ``ssh -G`` resolves it."""

from __future__ import annotations

import sys

import click

from envdoctor.cli.exits import EXIT_OK, handle_errors
from envdoctor.cli.options import CONFIG, SSH_CONFIG, check_ssh_config, output_options
from envdoctor.cli.output import emit
from envdoctor.inventory import load_inventory
from envdoctor.report.hosts_plan import hosts_report
from envdoctor.transport.target import SSHOptions


@click.command("hosts")
@click.argument("hosts", nargs=-1, required=True, metavar="DEST...")
@CONFIG
@SSH_CONFIG
@output_options(("text", "json"),
                "Report format: text for people (with where each value came from), json for programs.")
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
    if ssh_config:
        check_ssh_config(ssh_config)
    options = SSHOptions(config_files=(ssh_config,) if ssh_config else ())
    text, status = hosts_report(hosts, load_inventory(config_path), options, fmt)
    emit(text, output, "all resolved" if status == EXIT_OK else "some destinations could not be resolved",
         redacted=True)
    sys.exit(status)
