"""Shared fixtures: a real sshd on 127.0.0.1, real virtualenvs, and the CLI as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import venv as venv_module
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sshd import SSHServer, find_sshd, start_sshd

ALIASES = ["ct200", "b300", "gpu-a", "gpu-b"]


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """A real OpenSSH server on 127.0.0.1 with aliases ct200, b300, gpu-a, gpu-b."""
    if find_sshd() is None:
        pytest.fail("openssh-server is not installed; .ci/run installs it (apt-get install openssh-server)")
    server = start_sshd(tmp_path_factory.mktemp("sshd"), ALIASES)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def test_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for every command the tests run: offline hub, private caches."""
    caches = tmp_path_factory.mktemp("caches")
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_HOME=str(caches / "hf"),
        TIKTOKEN_CACHE_DIR=str(caches / "tiktoken"),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("NO_COLOR", None)
    env.pop("VIRTUAL_ENV", None)  # an activated venv would be `local`'s chosen interpreter
    return env


@dataclass
class CLIResult:
    exit_status: int
    stdout: str
    stderr: str


@pytest.fixture(scope="session")
def run_cli(test_env: dict[str, str]):
    """Run `envdoctor ARGS...` as a separate process, the way a user or CI does."""

    def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 600) -> CLIResult:
        proc = subprocess.run(
            [sys.executable, "-m", "envdoctor", *args],
            capture_output=True,
            text=True,
            env={**test_env, **(env or {})},
            cwd=cwd,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return CLIResult(proc.returncode, proc.stdout, proc.stderr)

    return run


def make_venv(path: Path, packages: list[str] = (), *, pip_args: list[str] = ()) -> Path:  # type: ignore[assignment]  # tuple default
    """A real virtualenv made with the venv module, with real packages from PyPI."""
    venv_module.EnvBuilder(with_pip=True, clear=True).create(path)
    if packages:
        subprocess.run(
            [str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pip_args, *packages],
            check=True,
        )
    return path


@pytest.fixture(scope="session")
def venv_factory(tmp_path_factory: pytest.TempPathFactory):
    """make(name, packages) -> path of a fresh venv (names may hold spaces and metacharacters)."""
    root = tmp_path_factory.mktemp("venvs")

    def make(name: str, packages: list[str] = ()) -> Path:  # type: ignore[assignment]  # tuple default
        return make_venv(root / name, list(packages))

    return make


TIERS = ("unit", "oracle", "e2e")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test carries its tier's marker, from its folder: `pytest -m unit` runs the fast tier."""
    root = Path(__file__).parent
    for item in items:
        try:
            tier = item.path.relative_to(root).parts[0]
        except ValueError:
            continue
        if tier in TIERS:
            item.add_marker(tier)
