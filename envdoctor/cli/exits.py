"""How a command ends: the exit statuses of the contract, and envdoctor's errors as one line.

0 nothing wrong, 1 something wrong on a host, 2 the command was wrong, 130 interrupted.
A command raises envdoctor's typed errors (envdoctor.errors); :func:`handle_errors` turns
them into ``envdoctor: error: ...`` (and a hint) on stderr and the status, never a traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from envdoctor.errors import EnvdoctorError, UsageError
from envdoctor.logsafe import get_logger

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: Where the group keeps -v for its commands (click's Context.meta is shared down the chain).
VERBOSE_KEY = "envdoctor.verbose"

log = get_logger("envdoctor.cli")


def fail(message: str, hint: str, status: int) -> NoReturn:
    click.echo(f"envdoctor: error: {message}", err=True)
    if hint:
        click.echo(f"  hint: {hint}", err=True)
    sys.exit(status)


def fail_usage(message: str, hint: str = "") -> NoReturn:
    fail(message, hint, EXIT_USAGE)


def interrupted() -> NoReturn:
    click.echo("envdoctor: interrupted", err=True)
    sys.exit(EXIT_INTERRUPTED)


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
            interrupted()
        except UsageError as exc:
            fail_usage(str(exc), exc.hint)
        except EnvdoctorError as exc:
            fail(str(exc), exc.hint, EXIT_PROBLEMS)

    return wrapper  # type: ignore[return-value]  # functools.wraps keeps the signature
