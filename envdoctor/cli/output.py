"""Where a report goes: standard output or an --output file written atomically, and the
progress line on stderr while hosts run.

Every report passes through :func:`emit`, which keeps secrets and terminal escapes out of it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from envdoctor.errors import UsageError
from envdoctor.logsafe import redact_secret_values
from envdoctor.safe_text import terminal_safe


def validate_output(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """--output is checked before anything runs on a host: a report that cannot be written
    must not be found out after a fix changed the host."""
    if value is None or value == "-":
        return None  # `-o -`: standard output, as if no --output were given (not a file named "-")
    if not value.strip():
        raise click.BadParameter("names no file; give a file name, or - for standard output")
    path = Path(value).expanduser()
    try:
        if path.is_dir():
            raise click.BadParameter(f"{value} is a folder; give a file name inside it")
        if path.exists():  # a file, or /dev/stdout, a FIFO: written through
            if not os.access(path, os.W_OK):
                raise click.BadParameter(f"{value} is not writable")
            return value
        folder = path.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent  # the folders missing on the way are created when the report is written
    except PermissionError:  # a folder on the way that we may not look into
        raise click.BadParameter(f"cannot create {value}: a folder on its path cannot be searched") from None
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


def emit(text: str, output: str | None, summary: str = "", *, redacted: bool = False) -> None:
    """Print the report, or write it to ``output`` and say so on stderr with ``summary``."""
    # Every report, whatever the command: no URL userinfo, token or key material comes out.
    # (``redacted``: the renderer did it field by field, as `hosts` does to show each
    # destination as it was given.)
    text = text if redacted else redact_secret_values(text)
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


def wants_color(fmt: str, output: str | None) -> bool:
    """Colour only for a person: the text format, printed to a terminal."""
    return fmt == "text" and output is None and sys.stdout.isatty()


class ProgressLine:
    """A one-line progress display on stderr while hosts run (only on a terminal)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.finished = 0
        self.enabled = sys.stderr.isatty() and total > 1
        self._status: Any = None

    def __enter__(self) -> ProgressLine:
        if self.enabled:
            from rich.console import Console  # (only on a terminal: rich is 25 ms of start-up)

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
