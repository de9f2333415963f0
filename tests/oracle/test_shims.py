"""Shims and wrappers on PATH followed to the interpreter they run, by reading them (probe/host/env/shims.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from envdoctor.probe.host.env.machine import describe_pip, describe_program
from envdoctor.probe.host.env.shims import follow_launcher, script_interpreter

REAL_PYENV = Path("/root/.pyenv")

PYENV_SHIM = """#!/usr/bin/env bash
set -e
[ -n "$PYENV_DEBUG" ] && set -x

program="${{0##*/}}"

export PYENV_ROOT="{root}"
exec "{root}/libexec/pyenv" exec "$program" "$@"
"""


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def pyenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A pyenv root with shims, two installed versions, a virtualenv and a global version file."""
    root = tmp_path / "pyenv"
    for version in ("3.10.13", "3.11.7", "3.11.9"):
        executable(root / "versions" / version / "bin" / "python3", "\x7fELF")
        executable(root / "versions" / version / "bin" / "pip",
                   f"#!{root}/versions/{version}/bin/python3\nimport sys\n")
    executable(root / "shims" / "python3", PYENV_SHIM.format(root=root))
    executable(root / "shims" / "pip", PYENV_SHIM.format(root=root))
    (root / "version").write_text("3.10.13\n")
    for name in ("PYENV_VERSION", "PYENV_DIR", "PYENV_ROOT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return root


def test_pyenv_global_version_file(pyenv: Path):
    """With no PYENV_VERSION and no .python-version, the global version file decides."""
    found = follow_launcher(str(pyenv / "shims" / "python3"))
    assert found["resolved"] == str(pyenv / "versions" / "3.10.13" / "bin" / "python3")
    assert "set by" in found["via"][0] and str(pyenv / "version") in found["via"][0]


def test_pyenv_local_file_up_the_tree_beats_global(pyenv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A .python-version in a parent folder of the working folder wins over the global file."""
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / ".python-version").write_text("# comment\n3.11.7\n")
    deep = tmp_path / "project" / "src" / "pkg"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert follow_launcher(str(pyenv / "shims" / "python3"))["resolved"] == str(pyenv / "versions" / "3.11.7" / "bin" / "python3")


def test_pyenv_version_variable_and_prefix(pyenv: Path, monkeypatch: pytest.MonkeyPatch):
    """PYENV_VERSION beats every file; a prefix such as 3.11 picks the newest installed 3.11.x."""
    monkeypatch.setenv("PYENV_VERSION", "3.11")
    assert follow_launcher(str(pyenv / "shims" / "python3"))["resolved"] == str(pyenv / "versions" / "3.11.9" / "bin" / "python3")
    monkeypatch.setenv("PYENV_VERSION", "9.9:3.11.7")  # the first version that has the program
    assert follow_launcher(str(pyenv / "shims" / "python3"))["resolved"] == str(pyenv / "versions" / "3.11.7" / "bin" / "python3")


def test_pyenv_missing_version_is_an_error_not_a_guess(pyenv: Path, monkeypatch: pytest.MonkeyPatch):
    """A version pyenv does not have: no interpreter is claimed, the reason is kept."""
    monkeypatch.setenv("PYENV_VERSION", "3.99.0")
    found = follow_launcher(str(pyenv / "shims" / "python3"))
    assert found["resolved"] is None and "3.99.0" in found["error"]


def test_pyenv_system_searches_path_without_the_shims(pyenv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`system` is the next python3 on PATH after the shims folder."""
    system = executable(tmp_path / "usr" / "bin" / "python3", "\x7fELF")
    monkeypatch.setenv("PYENV_VERSION", "system")
    monkeypatch.setenv("ENVDOCTOR_PATH", f"{pyenv / 'shims'}:{system.parent}")
    assert follow_launcher(str(pyenv / "shims" / "python3"))["resolved"] == str(system)


def test_pip_shim_names_the_interpreter_of_the_real_pip(pyenv: Path):
    """The pip shim is followed to versions/X/bin/pip, and that script's shebang is its interpreter."""
    info = describe_pip(str(pyenv / "shims" / "pip"))
    assert info["resolved"] == str(pyenv / "versions" / "3.10.13" / "bin" / "pip")
    assert info["interpreter"] == str(pyenv / "versions" / "3.10.13" / "bin" / "python3")


def test_asdf_shim_follows_tool_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An asdf shim runs the python of the nearest .tool-versions."""
    data = tmp_path / "asdf"
    real = executable(data / "installs" / "python" / "3.12.1" / "bin" / "python3", "\x7fELF")
    shim = executable(data / "shims" / "python3",
                      f"#!/usr/bin/env bash\n# asdf-plugin: python 3.12.1\nexec {data}/bin/asdf exec \"python3\" \"$@\"\n")
    (tmp_path / ".tool-versions").write_text("nodejs 20.1.0\npython 3.12.1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ASDF_PYTHON_VERSION", raising=False)
    monkeypatch.setenv("ASDF_DATA_DIR", str(data))
    assert follow_launcher(str(shim))["resolved"] == str(real)


def test_exec_wrapper_and_pip_trampoline(tmp_path: Path):
    """A conda-style `exec "/env/bin/python" "$@"` wrapper is followed; pip's sh trampoline names its interpreter."""
    env_python = executable(tmp_path / "conda env" / "bin" / "python", "\x7fELF")
    wrapper = executable(tmp_path / "wrappers" / "python3", f'#!/bin/sh\n. /dev/null\nexec "{env_python}" "$@"\n')
    assert follow_launcher(str(wrapper)) == {"resolved": str(env_python), "via": [f"wrapper {wrapper}"]}
    pip = executable(tmp_path / "conda env" / "bin" / "pip",
                     f"#!/bin/sh\n'''exec' \"{env_python}\" \"$0\" \"$@\"\n' '''\nimport sys\n")
    assert script_interpreter(str(pip)) == str(env_python)
    assert describe_pip(str(pip))["interpreter"] == str(env_python)


def test_venv_python_symlink_is_not_followed_to_its_base(tmp_path: Path):
    """A venv's bin/python links to the base interpreter; it is still reported as the venv's."""
    link = tmp_path / "venv" / "bin" / "python3"
    link.parent.mkdir(parents=True)
    # The interpreter binary itself: `python3` on PATH may be a pyenv shim (a script).
    link.symlink_to(os.path.realpath(sys.executable))
    assert describe_program(str(link))["resolved"] == str(link)


@pytest.mark.skipif(not (REAL_PYENV / "shims" / "python3").exists(), reason="needs this machine's pyenv in /root/.pyenv")
@pytest.mark.parametrize("version", [None, "3.12.1", "3.10", "system"])
def test_real_pyenv_agrees_with_pyenv_which(version: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """On this machine's real pyenv, the shim resolves to what `pyenv which python3` prints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYENV")}
    env["PATH"] = f"{REAL_PYENV / 'shims'}:/usr/local/bin:/usr/bin:/bin"
    if version:
        env["PYENV_VERSION"] = version
    oracle = subprocess.run([str(REAL_PYENV / "libexec" / "pyenv"), "which", "python3"], capture_output=True,
                            text=True, env=env, cwd=tmp_path)
    for key in [k for k in os.environ if k.startswith("PYENV")]:
        monkeypatch.delenv(key)
    if version:
        monkeypatch.setenv("PYENV_VERSION", version)
    monkeypatch.setenv("ENVDOCTOR_PATH", env["PATH"])
    monkeypatch.chdir(tmp_path)
    found = follow_launcher(str(REAL_PYENV / "shims" / "python3"))
    if oracle.returncode != 0:
        assert found["resolved"] is None
    else:
        assert found["resolved"] == oracle.stdout.strip()
