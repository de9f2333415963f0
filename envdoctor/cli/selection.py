"""Which hosts a command works on, how to reach them, and the checks it may run.

A command passes the options it declares; one it does not declare (``audit`` has no
``--require``) reads as its default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from envdoctor.cli.options import DEFAULTS, check_ssh_config
from envdoctor.engine.executor import FleetSettings
from envdoctor.engine.graph import CheckGraph, RemedySettings, load_checks
from envdoctor.engine.results import SUBJECT_SEPARATOR
from envdoctor.errors import UsageError
from envdoctor.inventory import (
    HostSpec,
    Inventory,
    Overrides,
    Stage,
    load_inventory,
    parse_requirement,
    parse_waivers,
    resolve_hosts,
)
from envdoctor.suggestions import did_you_mean
from envdoctor.transport.target import SSHOptions


@dataclass(frozen=True)
class Selection:
    """What one invocation works on: the hosts and how to reach them."""

    specs: list[HostSpec]
    inventory: Inventory
    settings: FleetSettings
    graph: CheckGraph
    #: The ``same = true`` groups named on the command line -> the hosts each stands for.
    same_groups: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def same_hosts(self) -> set[str]:
        """The hosts of those groups: probed for what they have, then compared."""
        return {name for names in self.same_groups.values() for name in names}

    @property
    def config(self) -> str | None:
        """The inventory file read (absolute), None without one: JSON reports name it."""
        return str(self.inventory.path.absolute()) if self.inventory.path else None


def select_hosts(hosts: Sequence[str], remedies: RemedySettings = RemedySettings(), *, runs_checks: bool = True,
                 **opts: Any) -> Selection:
    """The hosts, settings and check graph of a command, from the options it declares (see
    :func:`option`). A command that runs no checks (audit, revert, facts) loads the check
    modules only to validate what names them (--skip, skip = [...], --only, --checks): that
    saves their import at start-up."""
    inventory = load_inventory(option(opts, "config_path"))
    overrides = command_line_overrides(opts)
    settings = fleet_settings(opts, remedies)
    specs = resolve_hosts(hosts, inventory, overrides, ssh_config_files=settings.ssh.config_files)
    active = os.environ.get("VIRTUAL_ENV", "")
    if active.startswith("/"):  # the user's active virtualenv is their choice for this machine
        specs = [replace(s, venv=active) if s.is_local and not s.venv else s for s in specs]
    patch_files = tuple(option(opts, "patch_files"))
    if patch_files:
        specs = [replace(spec, patches=patch_files) for spec in specs]
    graph = check_graph(opts, inventory, overrides, runs_checks=runs_checks)
    targets = [spec.ssh for spec in specs if spec.ssh is not None]
    if targets:
        # ssh -G once per host, now: a bad SSH config is exit 2. (Imported only for SSH
        # hosts: it brings asyncio, a third of start-up.)
        from envdoctor.transport.openssh import resolve_all

        resolve_all(targets, settings.ssh)
    same = {name: inventory.group_hosts(name) for name in hosts if name in inventory.same_groups}
    return Selection(specs, inventory, settings, graph, same)


def fleet_settings(opts: Mapping[str, Any], remedies: RemedySettings) -> FleetSettings:
    """How to reach the hosts and how long and how many at once; a missing --ssh-config is exit 2."""
    ssh_config = option(opts, "ssh_config")
    if ssh_config:
        check_ssh_config(ssh_config)
    ssh = SSHOptions(config_files=(ssh_config,) if ssh_config else (),
                     connect_timeout=option(opts, "connect_timeout"), accept_new=option(opts, "accept_new"),
                     allow_no_host_key_check=option(opts, "insecure_no_host_key_check"))
    return FleetSettings(ssh=ssh, timeout=option(opts, "timeout"), parallel=option(opts, "parallel"),
                         remedies=remedies, only=tuple(option(opts, "only")) or None)


def option(opts: Mapping[str, Any], name: str) -> Any:
    """The value of an option, or its default when the command does not declare it."""
    return opts.get(name, DEFAULTS[name])


def command_line_overrides(opts: Mapping[str, Any]) -> Overrides:
    """--venv, --require, --model, ...: what every host of this run should have; bad values are exit 2."""
    venv = option(opts, "venv")
    if venv is not None and not venv.startswith("/") and not venv.startswith("~"):
        raise UsageError(f"--venv {venv!r} must be an absolute path on the host (or start with ~)",
                         hint="e.g. --venv /root/venv_sglang211 or --venv ~/venv_sglang211")
    models = tuple(option(opts, "models"))
    for model in models:
        if not model.strip():  # (the probe would look in the login folder)
            raise UsageError(f"--model {model!r} names no directory",
                             hint="e.g. --model /root/models/Kimi-K2.6")
    scan = tuple(option(opts, "scan"))
    if any(not name.strip() for name in scan):
        raise UsageError("--scan '' names no distribution", hint="e.g. --scan lm_eval")
    return Overrides(
        venv=venv,
        requires=tuple(parse_requirement(r, where="--require") for r in option(opts, "requires")),
        models=models,
        trust_remote_code=option(opts, "trust_remote_code"),
        scan=scan,
        skip=parse_waivers(option(opts, "skip"), where="--skip", default_reason="--skip on the command line"),
        gpus=option(opts, "gpus"),
        draft=bool(option(opts, "draft")),
    )


def check_graph(opts: Mapping[str, Any], inventory: Inventory, overrides: Overrides, *,
                runs_checks: bool) -> CheckGraph:
    """The checks this run may evaluate: the shipped ones, --checks files, --patches' checks;
    every name given (--only, waivers) must be one of them."""
    check_files = option(opts, "check_files")
    patch_files = tuple(option(opts, "patch_files"))
    only = tuple(option(opts, "only"))
    names_checks = bool(check_files or patch_files or only or overrides.skip or any(
        item.skip for item in (*inventory.hosts.values(), *inventory.stages.values())))
    graph = load_checks(Path(p) for p in check_files) if runs_checks or names_checks else CheckGraph(())
    if patch_files:
        # (Imported only with --patches: the patch engine is start-up that other runs skip.)
        from envdoctor.checks.patches import patch_checks
        from envdoctor.patching.engine import user_patches

        graph = CheckGraph([*graph.checks.values(), *patch_checks(user_patches(patch_files))])
    if only:
        graph.closure(only)  # unknown names are a usage error now, not a surprise per host
    check_waivers(graph, overrides.skip, inventory)
    return graph


def check_waivers(graph: CheckGraph, cli_skip: Sequence[tuple[str, str]], inventory: Inventory) -> None:
    """A waiver of a check that does not exist is a typo that would hide nothing: exit 2."""
    named = [(check_id, "--skip") for check_id, _ in cli_skip]
    named += [(check_id, f"{inventory.path}: hosts.{host.name}.skip") for host in inventory.hosts.values()
              for check_id, _ in host.skip]
    named += [(check_id, f"{inventory.path}: stages.{stage.name}.skip") for stage in inventory.stages.values()
              for check_id, _ in stage.skip]
    for waived, where in named:
        check_id = waived.partition(SUBJECT_SEPARATOR)[0]  # CHECK:SUBJECT waives one finding of CHECK
        if check_id not in graph.checks:
            raise UsageError(f"{where}: no check named {check_id!r} to waive{did_you_mean(check_id, graph.checks)}",
                             hint="`envdoctor checks` lists them")


def named_stage(inventory: Inventory, name: str) -> Stage:
    """The [stages] entry called ``name``; another name is exit 2, with the names there are."""
    stage = inventory.stages.get(name)
    if stage is None:
        known = ", ".join(sorted(inventory.stages)) or "none"
        raise UsageError(f"no stage named {name!r}{did_you_mean(name, inventory.stages)}",
                         hint=f"stages in the inventory: {known}")
    return stage


def one_host(selection: Selection, host: str) -> HostSpec:
    """The one host a single-host command (facts, run) was given; a group is exit 2."""
    if len(selection.specs) != 1:
        raise UsageError(f"{host!r} names {len(selection.specs)} hosts; this command takes one")
    return selection.specs[0]
