"""The probe program kept on the host: sent once (compressed), then named by its sha256; a kept
copy or compiled code runs only when it matches what the controller sent, and only from a
folder and files only the user can write."""

from __future__ import annotations

import asyncio
import hashlib
import json
import marshal
import os
import sys
import zlib
from pathlib import Path

import pytest

from envdoctor.probe import held
from envdoctor.probe.program import build_program, encode_stdin, program_digest, run_probe
from envdoctor.transport.local import LocalTransport

SECTIONS = {"host": {}}
PROGRAM = build_program(SECTIONS)
DIGEST = program_digest(PROGRAM)


class Recording(LocalTransport):
    """The local transport, noting the stdin of every command it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.stdins: list[bytes] = []

    async def run(self, argv, *, stdin=None, **kwargs):  # type: ignore[override]
        self.stdins.append(stdin or b"")
        return await super().run(argv, stdin=stdin, **kwargs)


def probe() -> list[bytes]:
    """One probe run of this machine; the stdin of each command it ran."""
    transport = Recording()

    async def run() -> None:
        output = await run_probe(transport, SECTIONS, python_candidates=[sys.executable])
        assert "host" in output.sections and not output.errors, output.errors
        assert output.sections["host"]["home"] == os.path.expanduser("~"), output.sections["host"]

    asyncio.run(run())
    return transport.stdins


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A home of our own for the probe, and a controller memory of our own."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(held, "HELD", held.HeldPrograms(tmp_path / "controller" / "held-programs.json"))
    return tmp_path


def kept_program(home: Path) -> Path:
    return home / ".cache" / "envdoctor" / f"program-{DIGEST}"


def kept_code(home: Path) -> Path:
    name = "probe-" + hashlib.sha256((DIGEST + sys.version).encode()).hexdigest()[:40]
    return home / ".cache" / "envdoctor" / name


def carries_program(stdin: bytes) -> bool:
    line, _, rest = stdin.partition(b"\n")
    return "size" in json.loads(line) and zlib.decompress(rest) == PROGRAM.encode()


def planted_code(marker: Path) -> bytes:
    """Compiled code that only leaves a mark: whether it ran says whether it was used."""
    return marshal.dumps(compile(f"open({str(marker)!r}, 'w').close()\ndef main(request):\n    pass\n",
                                 "<planted>", "exec"))


def test_compressed_program_round_trips():
    """The program travels zlib-compressed after a line that names it by sha256 and gives its size."""
    stdin = encode_stdin({"sections": SECTIONS}, PROGRAM)
    line, _, rest = stdin.partition(b"\n")
    request = json.loads(line)
    assert request["size"] == len(rest) and len(rest) < len(PROGRAM) / 2
    assert zlib.decompress(rest).decode("utf-8") == PROGRAM
    assert request["program"] == hashlib.sha256(PROGRAM.encode()).hexdigest()
    only_line = encode_stdin({"sections": SECTIONS}, PROGRAM, send=False)
    assert b"\n" == only_line[-1:] and only_line.count(b"\n") == 1 and "size" not in json.loads(only_line)


def test_repeat_run_sends_only_the_request_line(home):
    """The first run sends the program once and the host keeps it owner-only; a repeat run sends
    a request line of a few hundred bytes, also from a controller that remembers nothing."""
    first = probe()
    assert any(carries_program(s) for s in first) and not carries_program(first[0])  # asked first
    for path in (kept_program(home), kept_code(home)):
        assert path.stat().st_mode & 0o777 == 0o600, path
    assert kept_program(home).parent.stat().st_mode & 0o077 == 0
    second = probe()
    assert len(second) == 1 and len(second[0]) < 1024 and second[0].count(b"\n") == 1
    assert json.loads(second[0])["program"] == DIGEST and "code" in json.loads(second[0])
    held.HELD = held.HeldPrograms(home / "other-controller.json")  # (the fixture restores it)
    third = probe()
    assert len(third) == 1 and len(third[0]) < 1024


def test_a_controller_that_knows_the_host_lacks_the_program_sends_it_at_once(home):
    """A destination the memory knows, without this program, gets it in the first command."""
    held.HELD.note(f"{Recording().destination}\0{sys.executable}", "0" * 64, held=True)
    stdins = probe()
    assert len(stdins) == 1 and carries_program(stdins[0])


def test_a_tampered_kept_program_is_never_run(home):
    """The user's kept copy rewritten (valid compressed Python that leaves a mark): it does not
    match the sha256 the controller names, so the program is sent again and the answer is right."""
    probe()
    marker = home / "ran"
    kept_program(home).write_bytes(zlib.compress(f"open({str(marker)!r}, 'w').close()\n".encode() + PROGRAM.encode()))
    kept_code(home).unlink()
    stdins = probe()
    assert not marker.exists()
    assert len(stdins) == 2 and carries_program(stdins[1])
    assert zlib.decompress(kept_program(home).read_bytes()) == PROGRAM.encode()  # kept again, as sent


def test_tampered_compiled_code_is_never_run(home):
    """The compiled copy rewritten: its sha256 is not the one the host reported and the
    controller sends, so the kept program is compiled again instead."""
    probe()
    marker = home / "ran"
    kept_code(home).write_bytes(planted_code(marker))
    stdins = probe()
    assert not marker.exists() and len(stdins) == 1 and not carries_program(stdins[0])


@pytest.mark.parametrize("how", ["group-writable folder", "group-writable files", "files of another user"])
def test_a_copy_others_could_write_is_not_used(home, how):
    """Even compiled code whose digest the controller sends, and a kept program that matches,
    are not used from a folder or files another user could write: the program is sent again."""
    if how == "files of another user" and os.getuid() != 0:
        pytest.skip("giving a file to another user needs root")
    probe()
    marker = home / "ran"
    code = planted_code(marker)
    kept_code(home).write_bytes(code)
    held.HELD.note(f"{Recording().destination}\0{sys.executable}", DIGEST, held=True,
                   code=hashlib.sha256(code).hexdigest())
    folder = kept_program(home).parent
    if how == "group-writable folder":
        folder.chmod(0o775)
    for path in (kept_program(home), kept_code(home)):
        if how == "group-writable files":
            path.chmod(0o664)
        elif how == "files of another user":
            os.chown(path, 65534, 65534)
    stdins = probe()
    assert not marker.exists()
    assert any(carries_program(s) for s in stdins)
    if how == "group-writable folder":  # nothing kept there: the next run sends it at once
        again = probe()
        assert len(again) == 1 and carries_program(again[0]) and not marker.exists()
