"""The options commands share, in groups, so that each command declares only those that
apply to it (``audit`` reads no ``--require``): which hosts and how to reach them
(connection), the environment on them, what the job needs of them (job), which checks run
(check selection), and where the report goes (output).

:func:`envdoctor.cli.selection.select_hosts` reads the values; an option a command does not
declare reads as its entry in :data:`DEFAULTS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from envdoctor.cli.output import validate_output
from envdoctor.errors import UsageError
from envdoctor.report import FORMATS
from envdoctor.transport.first_line import FIRST_LINE_SECONDS

F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[F], F]

#: Shared by every option that takes a file (a click type is only its settings; each new one
#: costs gettext look-ups at start-up).
FILE = click.Path(dir_okay=False)
#: --output: checked by validate_output alone, in its own words (click's checks would say
#: "is not readable" of a file we only write, and "is a directory" before ours could say more).
OUTPUT_FILE = click.Path(readable=False)

#: Each shared option's value when given nothing (click's: () for a repeatable one, False for a flag).
DEFAULTS: dict[str, Any] = {
    "config_path": None, "ssh_config": None, "connect_timeout": None, "timeout": 900.0, "parallel": 64,
    "accept_new": False, "insecure_no_host_key_check": False,
    "venv": None,
    "requires": (), "models": (), "trust_remote_code": False, "scan": (), "gpus": None, "draft": False,
    "check_files": (), "patch_files": (), "only": (), "skip": (),
}


def together(*options: Decorator[Any]) -> Decorator[F]:
    """One decorator applying ``options``, listed in ``--help`` in the order given."""

    def decorate(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


# Connection: which inventory, how to reach the hosts, how long and how many at once.
CONFIG = click.option("--config", "config_path", type=FILE,
                      help="Inventory file (default: ./envdoctor.toml when it exists).")
SSH_CONFIG = click.option("--ssh-config", "ssh_config", type=FILE,
                          help="OpenSSH client config to read instead of ~/.ssh/config (like ssh -F).")


def check_ssh_config(path: str) -> None:
    """--ssh-config names a file ssh -F can read: /dev/null too (`ssh -F /dev/null`: no config at all)."""
    if not Path(path).exists():
        raise UsageError(f"SSH config {path} does not exist")
    if Path(path).is_dir():
        raise UsageError(f"SSH config {path} is a folder", hint="give the config file itself, like ssh -F")


CONNECT_TIMEOUT = click.option(
    "--connect-timeout", type=click.FloatRange(min=0.1), default=DEFAULTS["connect_timeout"],
    help="Seconds to wait for each host to accept the SSH connection "
         "[default: the SSH config's ConnectTimeout, else 15].")
TIMEOUT = click.option(
    "--timeout", type=click.FloatRange(min=1), default=DEFAULTS["timeout"], show_default=True,
    help="Deadline in seconds for all the work on one host. An interpreter that does not start "
         f"envdoctor's program within {FIRST_LINE_SECONDS:g} s (or this deadline, if shorter) is "
         "that host's error then, not at the deadline.")
PARALLEL = click.option(
    "--parallel", type=click.IntRange(min=1), default=DEFAULTS["parallel"], show_default=True,
    help="Hosts worked on at the same time.")
ACCEPT_NEW = click.option(
    "--accept-new", is_flag=True,
    help="Record the key of a host not yet in known_hosts (OpenSSH's accept-new); "
         "a changed key is still refused.")
INSECURE_NO_HOST_KEY_CHECK = click.option(
    "--insecure-no-host-key-check", "insecure_no_host_key_check", is_flag=True,
    help="Honour 'StrictHostKeyChecking no' from the SSH config (unknown keys accepted, logged loudly); "
         "without it 'no' is treated as 'yes'. A changed key is still refused.")
connection_options = together(CONFIG, SSH_CONFIG, CONNECT_TIMEOUT, TIMEOUT, PARALLEL, ACCEPT_NEW,
                              INSECURE_NO_HOST_KEY_CHECK)

# Environment: the interpreter on each host.
VENV = click.option("--venv", metavar="PATH",
                    help="The job's virtualenv on every host: /abs/path, ~/path or ~user/path (~ resolved on the host).")
environment_options = together(VENV)

# Job: what the job will load and need.
REQUIRE = click.option("--require", "requires", multiple=True, metavar="REQ",
                       help="A PEP 508 requirement the venv must satisfy, e.g. 'tiktoken' (repeatable).")
MODEL = click.option("--model", "models", multiple=True, metavar="DIR",
                     help="A model directory on the host the job will load (repeatable).")
TRUST_REMOTE_CODE = click.option(
    "--trust-remote-code", is_flag=True,
    help="Consent that the models' own code may run and that loader calls may be patched "
         "to pass the flag.")
SCAN = click.option(
    "--scan", "scan", multiple=True, metavar="DIST",
    help="Also scan this installed distribution for loader calls without trust_remote_code "
         "(repeatable).")
GPUS = click.option("--gpus", "gpus", type=click.IntRange(min=0), metavar="N",
                    help="GPUs every host must have: host.gpu fails without a driver or with fewer.")
DRAFT = click.option(
    "--draft", is_flag=True,
    help="The job trains a drafter: drafter-only checks (model.mask-token) fail instead of inform.")
job_options = together(REQUIRE, MODEL, TRUST_REMOTE_CODE, SCAN, GPUS, DRAFT)
#: What `facts` reads of the job: the model, and consent to load its tokenizer's code.
model_options = together(MODEL, TRUST_REMOTE_CODE)

# Check selection: which checks run, and which are waived.
CHECKS = click.option("--checks", "check_files", multiple=True, type=FILE,
                      help="A Python file with checks of your own (repeatable).")
PATCHES = click.option("--patches", "patch_files", multiple=True, type=FILE,
                       help="A Python file with patches of your own (repeatable).")
ONLY = click.option("--only", "only", multiple=True, metavar="CHECK",
                    help="Run only this check and those it requires (repeatable).")
SKIP = click.option(
    "--skip", "skip", multiple=True, metavar="CHECK[=REASON]",
    help="Waive a check: it still runs and is reported as waived, never failing the run "
         "(repeatable).")
check_selection_options = together(CHECKS, PATCHES, ONLY, SKIP)

#: Everything a command that runs the check graph on hosts reads (check, fix, run).
checking_options = together(connection_options, environment_options, job_options, check_selection_options)

DRAFT_LAYERS = click.option("--draft-layers", type=click.IntRange(min=1), default=5, show_default=True,
                            help="Layers of the DFlash drafter; sets dflash.target_layer_ids.")


def output_options(formats: Sequence[str] = FORMATS,
                   format_help: str = "Report format: text for people, json for programs, junit for CI.",
                   ) -> Decorator[F]:
    """--format (one of ``formats``) and --output, which every command takes."""
    return together(
        click.option("--format", "-f", "fmt", type=click.Choice(formats), default="text", show_default=True,
                     help=format_help),
        click.option("--output", "-o", "output", type=OUTPUT_FILE, metavar="FILE", callback=validate_output,
                     help="Write the report to FILE instead of standard output "
                          "(its folder is created when missing)."),
    )
