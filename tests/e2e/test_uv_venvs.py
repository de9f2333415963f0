"""A venv made by `uv venv` has no pip: fix installs into it with the host's uv, after uv's plan.

Each server here is a real sshd whose sessions get their own HOME and PATH (sshd's SetEnv), so
where the probe looks for uv (the PATH of a non-interactive command, ~/.local/bin, ~/.cargo/bin)
holds exactly what the test put there: the real uv of the test extra in ~/.local/bin, or none.
The venvs are real `uv venv` venvs (no pip) with real packages from PyPI.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import uv_executable
from tests.sshd import SSHServer, start_sshd

pytestmark = pytest.mark.e2e

#: The sessions' PATH: the system's folders only (no uv there on this project's machines).
SESSION_PATH = "/usr/bin:/bin"


def server_with_home(root: Path, alias: str, *, uv: str | None) -> SSHServer:
    """An sshd whose sessions have HOME=root/home (with uv in ~/.local/bin when given)."""
    home = root / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    if uv is not None:
        (home / ".local" / "bin" / "uv").symlink_to(uv)
    # (the certificates this machine's TLS goes through, for uv's downloads, as the tests' own)
    certificates = [f"{name}={os.environ[name]}" for name in ("SSL_CERT_FILE", "SSL_CERT_DIR") if name in os.environ]
    return start_sshd(root / "sshd", [alias],
                      extra_config=[f"SetEnv HOME={home} PATH={SESSION_PATH} {' '.join(certificates)}".rstrip()])


def uv_venv(path: Path, *packages: str) -> Path:
    """A venv as `uv venv` makes it (no pip), with ``packages`` installed by uv."""
    uv = uv_executable()
    subprocess.run([uv, "venv", "-q", "-p", sys.executable, str(path)], check=True, timeout=300)
    if packages:
        subprocess.run([uv, "pip", "install", "-q", "--python", str(path / "bin" / "python"), *packages],
                       check=True, timeout=600)
    assert not (path / "bin" / "pip").exists()
    return path


def site_has(venv: Path, name: str) -> bool:
    return bool(list(venv.glob(f"lib/python3*/site-packages/{name}")))


def by_id(results: list[dict]) -> dict[str, dict]:
    return {r["id"]: r for r in results}


@pytest.fixture(scope="module")
def with_uv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    if any(Path(folder, "uv").exists() for folder in SESSION_PATH.split(":")):
        pytest.skip(f"a uv in {SESSION_PATH}: the probe would find it before ~/.local/bin")
    server = server_with_home(tmp_path_factory.mktemp("uv-home"), "uvhost", uv=os.path.realpath(uv_executable()))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def without_uv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    if any(Path(folder, "uv").exists() for folder in SESSION_PATH.split(":")):
        pytest.skip(f"a uv in {SESSION_PATH}: this host is not one without uv")
    server = server_with_home(tmp_path_factory.mktemp("bare-home"), "bare", uv=None)
    yield server
    server.stop()


def test_fix_installs_into_a_uv_venv_with_the_hosts_uv_after_its_plan(run_cli, with_uv, tmp_path):
    """check names `<uv> pip install --python <venv python>`; fix --dry-run shows uv's plan and
    installs nothing; fix installs tiktoken with uv; a second fix has nothing to do."""
    venv = uv_venv(tmp_path / "uv made")
    python = str(venv / "bin" / "python")
    uv = str(Path(with_uv.ssh_config).parent.parent / "home" / ".local" / "bin" / "uv")
    args = ["--ssh-config", str(with_uv.ssh_config), "--venv", str(venv), "--require", "tiktoken",
            "--format", "json"]

    check = run_cli("check", "uvhost", *args)
    assert check.exit_status == 1, check.stderr
    required = by_id(json.loads(check.stdout)["hosts"][0]["results"])["packages.required"]
    assert required["status"] == "fail"
    assert required["remedy"]["argv"] == [uv, "pip", "install", "--python", python, "tiktoken"], required
    assert required["remedy"]["automatic"] is True and "host's uv" in required["remedy"]["summary"]

    dry = run_cli("fix", "uvhost", "--dry-run", *args)
    assert dry.exit_status == 1, dry.stdout + dry.stderr
    action = json.loads(dry.stdout)["hosts"][0]["actions"][0]
    assert action["dry_run"] is True and not action.get("refused"), action
    assert any(line.startswith("tiktoken ") and line.endswith("(new)") for line in action["plan"]), action
    assert f"plan: {uv} pip install --dry-run" in action["output"], action
    assert not site_has(venv, "tiktoken")

    first = run_cli("fix", "uvhost", *args)
    assert first.exit_status == 0, first.stdout + first.stderr
    host = json.loads(first.stdout)["hosts"][0]
    assert by_id(host["before"])["packages.required"]["status"] == "fail"
    assert by_id(host["results"])["packages.required"]["status"] == "pass"  # checked again
    assert host["actions"][0]["exit_status"] == 0 and host["actions"][0]["command"].startswith(uv + " pip install")
    assert site_has(venv, "tiktoken") and not (venv / "bin" / "pip").exists()

    second = run_cli("fix", "uvhost", *args)
    assert second.exit_status == 0 and json.loads(second.stdout)["hosts"][0]["actions"] == []


def test_a_uv_plan_that_would_break_an_installed_package_is_not_run(run_cli, with_uv, tmp_path):
    """uv's plan to downgrade urllib3 below what requests needs is refused: nothing changes."""
    venv = uv_venv(tmp_path / "uv requests", "requests==2.32.3", "urllib3==2.2.3")
    res = run_cli("fix", "uvhost", "--ssh-config", str(with_uv.ssh_config), "--venv", str(venv),
                  "--require", "urllib3<1.21", "--format", "json")
    assert res.exit_status == 1, res.stdout + res.stderr
    action = json.loads(res.stdout)["hosts"][0]["actions"][0]
    assert action["by_hand"] is True and "requests 2.32.3 requires urllib3" in action["refused"], action
    assert "urllib3 2.2.3 -> 1.20 (downgrade)" in action["plan"], action
    assert list(venv.glob("lib/python3*/site-packages/urllib3-2.2.3.dist-info"))


def test_a_venv_without_pip_on_a_host_without_uv_names_both_ways(run_cli, without_uv, tmp_path):
    """No pip and no uv: the remedy is by hand and names ensurepip and uv; fix installs nothing."""
    venv = uv_venv(tmp_path / "uv made")
    python = shlex.quote(str(venv / "bin" / "python"))
    args = ["--ssh-config", str(without_uv.ssh_config), "--venv", str(venv), "--require", "tiktoken",
            "--format", "json"]
    res = run_cli("fix", "bare", *args)
    assert res.exit_status == 1, res.stdout + res.stderr
    host = json.loads(res.stdout)["hosts"][0]
    remedy = by_id(host["results"])["packages.required"]["remedy"]
    assert remedy["automatic"] is False and "argv" not in remedy, remedy
    summary = remedy["summary"]
    assert "has no pip, and the host has no uv" in summary, summary
    assert f"{python} -m ensurepip && {python} -m pip install tiktoken" in summary, summary
    assert f"uv pip install --python {python} tiktoken" in summary, summary
    assert host["actions"] == [] and not site_has(venv, "tiktoken")
