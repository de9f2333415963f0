"""The ``envdoctor`` group: -v, --version, and the commands of the registry, each imported
only when it runs (``envdoctor --help`` lists them from their summaries alone)."""

from __future__ import annotations

import gc
import signal

import click

from envdoctor import __version__
from envdoctor.cli.commands import commands_dict, load_command
from envdoctor.cli.exits import VERBOSE_KEY, interrupted
from envdoctor.logsafe import configure_logging


class LazyGroup(click.Group):
    """A group whose commands come from :data:`commands_dict`, imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(commands_dict)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load_command(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, commands_dict[name].summary) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    # A fleet's probe answers are thousands of new (acyclic) containers per host; with the
    # default thresholds the cyclic collector would walk the whole heap again and again
    # (3-4 ms of CPU per host at 256 hosts). Start-up's objects are frozen out of its sight
    # and it runs after 50,000 allocations instead of 700: cycles are still collected.
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    # SIGTERM ends a run as Ctrl-C does: what it started on hosts is stopped on the way out
    # (their watchdogs would end it anyway once the connection closes).
    signal.signal(signal.SIGTERM, _terminated)
    try:
        cli(prog_name="envdoctor")
    except KeyboardInterrupt:  # Ctrl-C before a command's own handler was in place
        interrupted()
