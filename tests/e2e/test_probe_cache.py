"""The probe's compiled-program cache on the host: used when only its owner can write it, never otherwise."""

from __future__ import annotations

import asyncio
import hashlib
import marshal
import sys
from pathlib import Path

import pytest

from envdoctor.errors import ProbeError
from envdoctor.probe.program import build_program, run_probe
from envdoctor.transport.local import LocalTransport

SECTIONS = {"host": {}}


def probe(home: Path) -> None:
    async def run() -> None:
        async with LocalTransport() as transport:
            output = await run_probe(transport, SECTIONS, python_candidates=[sys.executable])
        assert "host" in output.sections, output.errors

    asyncio.run(run())


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def cache_file(home: Path) -> Path:
    program = build_program(SECTIONS).encode("utf-8")
    name = "probe-" + hashlib.sha1(program + sys.version.encode()).hexdigest()
    return home / ".cache" / "envdoctor" / name


def plant(home: Path, marker: Path) -> Path:
    """A cached 'program' that only leaves a mark: whether it ran says whether the cache was used."""
    planted = cache_file(home)
    code = compile(f"open({str(marker)!r}, 'w').close()\ndef main(request):\n    pass\n", "<planted>", "exec")
    planted.write_bytes(marshal.dumps(code))
    planted.chmod(0o600)
    return planted


def test_first_run_writes_an_owner_only_cache_that_the_next_run_uses(home):
    """The code object is cached owner-only, and a later run executes the cached one."""
    probe(home)
    cached = cache_file(home)
    assert cached.exists() and cached.stat().st_mode & 0o077 == 0
    assert cached.parent.stat().st_mode & 0o077 == 0
    marker = home / "ran"
    plant(home, marker)
    with pytest.raises(ProbeError):  # the planted main() prints nothing at all
        probe(home)
    assert marker.exists()


@pytest.mark.parametrize("target", ["folder", "file"])
def test_cache_that_others_can_write_is_not_trusted(home, target):
    """A group- or world-writable cache folder or file is ignored: the program is compiled afresh."""
    probe(home)
    marker = home / "ran"
    planted = plant(home, marker)
    (planted.parent if target == "folder" else planted).chmod(0o775 if target == "folder" else 0o664)
    probe(home)
    assert not marker.exists()
