"""A venv copied by tests/venv_clones.py is the venv that building it there directly makes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import build_venv
from tests.venv_clones import built_once, clone_venv

PACKAGES = ["idna==3.10"]  # small, with a console script


def snapshot(venv: Path) -> dict[str, bytes]:
    """What a build writes for its own path: pyvenv.cfg, the activate and console scripts,
    and every other file's bytes except compiled bytecode (which names its source's path)."""
    files = {}
    for path in sorted(venv.rglob("*")):
        relative = str(path.relative_to(venv))
        if path.is_symlink():
            files[relative] = b"-> " + os.readlink(path).encode()
        elif path.is_file() and path.suffix != ".pyc":
            files[relative] = path.read_bytes()
    return files


@pytest.mark.parametrize("name", ["plain", "with space", "it's $HOME", "long-" + "x" * 120])
def test_a_clone_is_what_a_build_at_its_path_makes(tmp_path: Path, name: str) -> None:
    target = tmp_path / name / "venv"
    build_venv(target, PACKAGES, [], compile_bytecode=True)
    built = snapshot(target)
    pycs = sorted(str(p.relative_to(target)) for p in target.rglob("*.pyc"))
    shutil.rmtree(target)

    template = built_once(["clone test", PACKAGES],
                          lambda where: build_venv(where, PACKAGES, [], compile_bytecode=True))
    assert template is not None and template != target
    clone_venv(template, target)
    assert snapshot(target) == built
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*.pyc")) == pycs

    # The scripts run the clone's interpreter, and its compiled bytecode is used as it is.
    stamps = {p: p.stat().st_mtime_ns for p in target.rglob("*.pyc")}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    pip = subprocess.run([str(target / "bin" / "pip"), "--version"], capture_output=True, text=True, env=env,
                         check=True)
    assert str(target) in pip.stdout
    module = subprocess.run([str(target / "bin" / "python"), "-c", "import idna, idna.codec; print(idna.__file__)"],
                            capture_output=True, text=True, env=env, check=True)
    assert module.stdout.strip().startswith(str(target))
    assert {p: p.stat().st_mtime_ns for p in target.rglob("*.pyc")} == stamps
    assert not [p for p in target.rglob("*.pyc") if p not in stamps]
