"""The options commands share: which hosts and how to reach them, what they should have,
which checks run, and where the report goes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from envdoctor.cli.output import validate_output
from envdoctor.report import FORMATS

F = TypeVar("F", bound=Callable[..., Any])

#: Shared by every option that takes a file (a click type is only its settings; each new one
#: costs gettext look-ups at start-up).
FILE = click.Path(dir_okay=False)
WRITABLE_FILE = click.Path(dir_okay=False, writable=True)

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



def draft_layers_option(func: F) -> F:
    return click.option("--draft-layers", type=click.IntRange(min=1), default=5, show_default=True,
                        help="Layers of the DFlash drafter; sets dflash.target_layer_ids.")(func)
