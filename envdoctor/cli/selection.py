"""Which hosts a command works on, how to reach them, and the checks it may run.

A command passes the options it declares; one it does not declare (``audit`` has no
``--require``) reads as its default.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from envdoctor.cli.output import CONFIG_META
from envdoctor.engine.graph import CheckGraph, RemedySettings, load_checks
from envdoctor.errors import UsageError
from envdoctor.inventory import (
    HostSpec,
    Inventory,
    Overrides,
    load_inventory,
    parse_requirement,
    parse_waivers,
    resolve_hosts,
)
from envdoctor.operations.fleet import FleetSettings
from envdoctor.transport.target import SSHOptions


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
        from envdoctor.checks.patches import patch_checks  # (only with --patches: start-up)
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


def _note_config(inventory: Inventory) -> None:
    """Remember for this invocation which config was loaded: JSON reports name it."""
    context = click.get_current_context(silent=True)
    if context is not None:
        context.meta[CONFIG_META] = str(inventory.path.absolute()) if inventory.path else None


def one_host(selection: Selection, host: str) -> HostSpec:
    if len(selection.specs) != 1:
        raise UsageError(f"{host!r} names {len(selection.specs)} hosts; this command takes one")
    return selection.specs[0]
