"""The command line's registry and options: each command lists what applies to it, in-process."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from envdoctor.cli.commands import commands_dict, load_command
from envdoctor.cli.main import cli
from envdoctor.cli.options import DEFAULTS

#: The commands that reach hosts (`hosts` only resolves destinations; it connects to none).
HOST_COMMANDS = ("audit", "check", "drift", "facts", "fix", "init", "revert", "run", "snapshot")
JOB_ONLY = ("--require", "--gpus", "--draft", "--scan", "--only", "--skip", "--checks")


def help_of(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


def option_names(command: click.Command) -> set[str]:
    return {name for param in command.params for name in param.opts if name.startswith("--")}


def every_command() -> dict[str, click.Command]:
    """Each leaf command by its path ("patches list"), loaded from the registry."""
    found = {}
    for name in commands_dict:
        command = load_command(name)
        assert command is not None
        subcommands = getattr(command, "commands", {})
        found.update({f"{name} {sub}": c for sub, c in subcommands.items()} if subcommands else {name: command})
    return found


def test_every_registry_entry_loads_the_command_of_that_name():
    """commands_dict names a module and attribute holding the click command of that very name."""
    for name in commands_dict:
        command = load_command(name)
        assert isinstance(command, click.Command) and command.name == name
    assert load_command("no-such-command") is None


def test_group_help_lists_every_command_with_its_summary_on_one_line():
    """`envdoctor --help` shows each command's registry summary whole, one line each at 80 columns."""
    lines = help_of().splitlines()
    for name, info in commands_dict.items():
        assert any(line.split() == [name, *info.summary.split()] for line in lines), (name, lines)


@pytest.mark.parametrize("command", ["audit", "revert", "facts", "drift"])
def test_commands_that_run_no_checks_do_not_offer_the_job_options(command):
    """audit, revert, facts and drift do not list --require, --gpus, --draft, --scan, --only, --skip, --checks."""
    text = help_of(command)
    assert not [option for option in JOB_ONLY if f"{option} " in text]
    assert "--venv" in text


def test_only_the_commands_that_use_them_take_models_and_patches():
    """--model: check, fix, run, facts, snapshot, diff; --trust-remote-code: those but diff (which
    loads no tokenizer), and init (which writes the consent); --patches: those that check, revert, patches."""
    commands = every_command()
    with_model = {name for name, c in commands.items() if "--model" in option_names(c)}
    with_patches = {name for name, c in commands.items() if "--patches" in option_names(c)}
    assert with_model == {"check", "fix", "run", "facts", "snapshot", "diff"}
    assert {name for name, c in commands.items() if "--trust-remote-code" in option_names(c)} == \
        (with_model - {"diff"}) | {"init"}
    assert with_patches == {"check", "fix", "run", "revert", "snapshot", "patches list", "patches show"}


def test_every_command_that_takes_hosts_shows_the_connection_options():
    """Each command that reaches hosts lists --parallel, --timeout and the rest of the connection options."""
    commands = every_command()
    takes_hosts = {name for name, c in commands.items()
                   if any(p.name in ("host", "hosts") for p in c.params if isinstance(p, click.Argument))}
    assert takes_hosts - {"hosts"} == set(HOST_COMMANDS)
    for name in (*HOST_COMMANDS, "diff"):  # diff's GROUP|HOST...|REPORT.json... are hosts too
        text = help_of(*name.split())
        for option in ("--parallel", "--timeout", "--connect-timeout", "--config", "--ssh-config", "--accept-new",
                       "--insecure-no-host-key-check", "--format", "--output"):
            assert f"{option} " in text, (name, option)


def test_an_undeclared_option_reads_as_the_default_of_the_declared_one():
    """DEFAULTS, which selection reads for an option a command lacks, equal the options' own defaults."""
    seen = set()
    for name, command in every_command().items():
        arguments = ["x" for p in command.params if isinstance(p, click.Argument) and p.required]
        given = command.make_context(name, arguments).params  # nothing but the arguments: the defaults
        for option in DEFAULTS.keys() & given.keys():
            seen.add(option)
            assert given[option] == DEFAULTS[option], (name, option)
    assert seen == set(DEFAULTS)
