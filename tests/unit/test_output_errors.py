"""--output says what is wrong with the path, in its own words (never click's "is not readable"
or "is a directory"), before anything runs; a path that can be written is written."""

from __future__ import annotations

import array
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from envdoctor.cli.main import cli

FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_IMMUTABLE_FL = 0x80086601, 0x40086602, 0x10


def _immutable(path: Path, on: bool) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        flags = array.array("l", [0])
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, flags, True)
        flags[0] = flags[0] | FS_IMMUTABLE_FL if on else flags[0] & ~FS_IMMUTABLE_FL
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, flags, True)
    finally:
        os.close(fd)


@contextmanager
def unwritable(path: Path) -> Iterator[None]:
    """``path`` (a file or a folder) unwritable for this process: by its mode, or for root
    (whom modes do not stop) by the immutable flag, which stops root too."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    try:
        _immutable(path, True)
    except OSError as exc:
        pytest.skip(f"cannot make a file unwritable for root here: {exc}")
    try:
        assert not os.access(path, os.W_OK)
        yield
    finally:
        _immutable(path, False)


def output_error(value: str) -> str:
    """The error of `envdoctor checks --output VALUE` (exit 2, one Error line)."""
    result = CliRunner().invoke(cli, ["checks", "--output", value])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    return errors[0]


def test_an_existing_file_that_cannot_be_written_is_not_writable(tmp_path: Path) -> None:
    """Not "is not readable" (click's check of a file we never read): "is not writable"."""
    report = tmp_path / "report.txt"
    report.write_text("old report\n")
    with unwritable(report):
        error = output_error(str(report))
    assert error.endswith(f"{report} is not writable"), error
    assert "readable" not in error and report.read_text() == "old report\n"


def test_a_file_that_cannot_be_read_but_can_be_written_is_written(tmp_path: Path) -> None:
    """A report file we may write and not read (mode 0200) is fine: --output only writes."""
    report = tmp_path / "report.txt"
    report.write_text("")
    report.chmod(0o200)
    result = CliRunner().invoke(cli, ["checks", "--output", str(report)])
    report.chmod(0o600)
    assert result.exit_code == 0, result.output
    assert "host.reachable" in report.read_text()


def test_a_folder_is_named_a_folder(tmp_path: Path) -> None:
    """A folder given as the report: ours ("give a file name inside it"), not click's "is a directory"."""
    error = output_error(str(tmp_path))
    assert error.endswith(f"{tmp_path} is a folder; give a file name inside it"), error
    assert "directory" not in error


@pytest.mark.parametrize("below", ["report.json", "reports/today/report.json"])
def test_a_path_through_a_file_says_which_part_is_not_a_folder(tmp_path: Path, below: str) -> None:
    """`notes/report.json` where notes is a file: "cannot create ...: notes is not a folder"."""
    (tmp_path / "notes").write_text("")
    target = tmp_path / "notes" / below
    error = output_error(str(target))
    assert error.endswith(f"cannot create {target}: {tmp_path / 'notes'} is not a folder"), error


def test_a_folder_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    """A new file in a folder we may not write: "the folder F is not writable"."""
    folder = tmp_path / "locked"
    folder.mkdir()
    with unwritable(folder):
        error = output_error(str(folder / "new" / "report.json"))
    assert error.endswith(f"cannot create {folder / 'new' / 'report.json'}: the folder {folder} is not writable"), error


def test_an_empty_name_names_no_file() -> None:
    """`--output ''` is refused, saying what to give instead."""
    assert output_error("").endswith("names no file; give a file name, or - for standard output")


def test_missing_folders_are_created_and_dash_is_standard_output(tmp_path: Path) -> None:
    """A new path in new folders is written; `-` prints to standard output."""
    target = tmp_path / "a" / "b" / "report.txt"
    result = CliRunner().invoke(cli, ["checks", "--output", str(target)])
    assert result.exit_code == 0, result.output
    assert "host.reachable" in target.read_text()
    dashed = CliRunner().invoke(cli, ["checks", "--output", "-"])
    assert dashed.exit_code == 0 and "host.reachable" in dashed.output
