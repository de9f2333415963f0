"""The probe's one reader of host files: regular files only, never waited on, within a budget."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from envdoctor.engine.graph import load_checks
from envdoctor.inventory import HostSpec
from envdoctor.probe.host import core
from envdoctor.probe.program import parse_lines
from tests.unit.fakes import facts

SPARSE_SIZE = 6 << 30


@pytest.fixture(autouse=True)
def fresh_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no skipped file noted."""
    monkeypatch.setattr(core, "SKIPS", [])
    monkeypatch.setattr(core, "_SKIP_STATE", {"section": "", "more": 0, "seen": set()})


def planted(folder: Path, name: str, form: str) -> Path:
    """A file that no reader should wait on or read whole: a FIFO, a symlink to /dev/zero, a
    sparse file of 6 GiB (no disk used), or one with no line break in its first 6 GiB."""
    path = folder / name
    if form == "fifo":
        os.mkfifo(path)
    elif form == "zero":
        path.symlink_to("/dev/zero")
    else:
        with open(path, "wb") as handle:
            handle.write(b"Name: x\nVersion: 1" if form == "sparse" else b"Name: x")
            handle.truncate(SPARSE_SIZE)
    return path


@pytest.mark.parametrize("form", ["fifo", "zero", "sparse"])
def test_a_hostile_file_is_skipped_at_once_and_named(tmp_path: Path, form: str) -> None:
    """read_regular refuses a FIFO, a device and a file over its budget without reading it, and notes it once."""
    path = planted(tmp_path, "METADATA", form)
    started = time.monotonic()
    for _ in range(2):
        with pytest.raises(core.Skipped) as caught:
            core.read_regular(str(path), core.MAX_METADATA_BYTES)
    assert time.monotonic() - started < 1
    expected = {"fifo": "a FIFO, not a regular file", "zero": "a character device, not a regular file",
                "sparse": "6.0 GiB, more than the 4.0 MiB read"}[form]
    assert expected in caught.value.strerror
    assert [s["path"] for s in core.SKIPS] == [str(path)] and expected in core.SKIPS[0]["why"]


def test_a_missing_file_is_not_a_skip(tmp_path: Path) -> None:
    """A file that is not there raises FileNotFoundError and is not reported as skipped."""
    with pytest.raises(FileNotFoundError):
        core.read_regular(str(tmp_path / "absent"), 10)
    with pytest.raises(FileNotFoundError):
        core.read_regular(str(tmp_path / "absent" / "below"), 10)
    assert core.SKIPS == []


def test_head_reads_only_the_budget_of_a_large_file(tmp_path: Path) -> None:
    """With head=True a large regular file gives its first bytes; without, it is skipped."""
    path = tmp_path / "big"
    path.write_bytes(b"#!/usr/bin/python3\n" + b"x" * 100_000)
    assert core.read_regular(str(path), 19, head=True) == b"#!/usr/bin/python3\n"
    with pytest.raises(core.Skipped, match="more than the 19 bytes"):
        core.read_regular(str(path), 19)


def test_a_proc_file_that_says_size_zero_is_read_within_its_budget() -> None:
    """A /proc file (size 0 in its stat) is read up to the budget, and one longer than it is skipped."""
    assert b"Name:" in core.read_regular("/proc/self/status", core.MAX_TEXT_BYTES)
    with pytest.raises(core.Skipped, match="grew past the 16 bytes"):
        core.read_regular("/proc/self/status", 16)


@pytest.mark.parametrize(("data", "headers"), [
    (b"Name: a\nVersion: 1\n\nName: body\n", {"Name": "a", "Version": "1"}),
    (b"Name: a\r\nVersion: 1\r\n\r\nbody\n\nName: later\n", {"Name": "a", "Version": "1"}),
    (b"\nName: body", {}),
    (b"Name: a", {"Name": "a"}),
])
def test_headers_end_at_the_first_empty_line(tmp_path: Path, data: bytes, headers: dict[str, str]) -> None:
    """METADATA's header block ends at its first empty line, LF or CRLF; the body is never parsed."""
    path = tmp_path / "METADATA"
    path.write_bytes(data)
    assert dict(core.read_headers(str(path))) == headers


def test_a_header_block_without_an_end_is_skipped(tmp_path: Path) -> None:
    """A METADATA of 6 GiB with no line break is refused after its budget, not read into memory."""
    path = planted(tmp_path, "METADATA", "no-newline")
    with pytest.raises(core.Skipped, match="header block runs past 4.0 MiB"):
        core.read_headers(str(path))


def test_a_large_metadata_body_does_not_matter(tmp_path: Path) -> None:
    """A METADATA with a real header block and a sparse 6 GiB body is read: only the headers count."""
    path = planted(tmp_path, "METADATA", "sparse")
    path.write_bytes(b"Name: big\nVersion: 2\n\n")
    with open(path, "r+b") as handle:
        handle.truncate(SPARSE_SIZE)
    assert core.read_headers(str(path))["Name"] == "big"


def test_the_end_record_carries_the_skipped_files_to_the_controller(tmp_path: Path) -> None:
    """Skips noted during a section travel in the end record and come out of parse_lines named."""
    core._SKIP_STATE["section"] = "venvs"
    with pytest.raises(OSError):
        core.read_regular(str(planted(tmp_path, "RECORD", "fifo")), 10)
    lines = [json.dumps({"section": "venvs", "data": {}}).encode(), json.dumps(core.end_record()).encode()]
    output = parse_lines(lines)
    assert [(s.section, s.path) for s in output.skipped] == [("venvs", str(tmp_path / "RECORD"))]
    assert output.skipped_more == 0


@pytest.mark.parametrize("skipped", [
    "nope", [1, None], [{"section": "a", "path": 3, "why": "x"}], [{"path": "/p", "why": "x"}],
])
def test_a_malformed_skipped_list_is_dropped(skipped: object) -> None:
    """An end record whose skipped entries are not {section, path, why} texts yields none of them."""
    output = parse_lines([json.dumps({"done": True, "skipped": skipped, "skipped_more": "9"}).encode()])
    assert output.skipped == [] and output.skipped_more == 0


def test_skips_beyond_the_list_are_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_SKIPS_LISTED files the probe counts the rest; the same path is noted once."""
    monkeypatch.setattr(core, "MAX_SKIPS_LISTED", 2)
    for index in range(4):
        path = planted(tmp_path, f"f{index}", "fifo")
        for _ in range(2):
            with pytest.raises(OSError):
                core.read_regular(str(path), 10)
    assert len(core.SKIPS) == 2 and core.end_record()["skipped_more"] == 2


def test_host_probe_warns_naming_the_skipped_file(tmp_path: Path) -> None:
    """host.probe passes when every file was read and warns with the file and the reason when one was not."""
    graph = load_checks()
    spec = HostSpec(name="local", ssh=None)
    clean = {r.id: r for r in graph.evaluate(spec, facts(), only=["host.probe"])}["host.probe"]
    assert clean.status == "pass"
    with pytest.raises(OSError):
        core.read_regular(str(planted(tmp_path, "tokenizer.json", "zero")), 10)
    output = parse_lines([json.dumps(core.end_record()).encode()])
    host = facts()
    host.probe.skipped[:] = output.skipped
    result = {r.id: r for r in graph.evaluate(spec, host, only=["host.probe"])}["host.probe"]
    assert result.status == "warn"
    assert str(tmp_path / "tokenizer.json") in result.message and "character device" in result.message
