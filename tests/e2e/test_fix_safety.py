"""fix installs only what pip's own plan says breaks nothing: real venvs, real pip, pip check as the oracle."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def pip_check(venv: Path) -> set[str]:
    """What `pip check` reports for the venv, one problem a line (empty when consistent)."""
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "check", "--disable-pip-version-check"],
                          capture_output=True, text=True)
    return {line for line in proc.stdout.splitlines() if line and not line.startswith("No broken")}


def version_of(venv: Path, name: str) -> str | None:
    proc = subprocess.run([str(venv / "bin" / "python"), "-c",
                           f"import importlib.metadata as m; print(m.version({name!r}))"], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def fix(run_cli, venv: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    res = run_cli("fix", "local", "--venv", str(venv), "--only", "packages.required", "--format", "json", *args,
                  env=env)
    assert res.stdout.startswith("{"), res.stderr
    return res.exit_status, json.loads(res.stdout)["hosts"][0]


@pytest.fixture(scope="module")
def requests_venv(venv_factory) -> Path:
    """A venv with requests (and so urllib3 >= 1.21.1 by requests' own requirement)."""
    return venv_factory("requests venv", ["requests"])


def test_downgrade_that_breaks_requests_is_by_hand_and_nothing_changes(run_cli, requests_venv):
    """--require 'urllib3<1.21' beside requests: pip's plan is shown, nothing installed, pip check unchanged, exit 1."""
    before, urllib3 = pip_check(requests_venv), version_of(requests_venv, "urllib3")
    status, host = fix(run_cli, requests_venv, "--require", "urllib3<1.21")
    assert status == 1
    (action,) = host["actions"]
    assert action["by_hand"] is True and action["exit_status"] is None
    assert any(line.startswith(f"urllib3 {urllib3} -> 1.") and "downgrade" in line for line in action["plan"])
    assert "requests" in action["refused"] and "requires urllib3" in action["refused"] and "the plan installs 1." in action["refused"]
    assert version_of(requests_venv, "urllib3") == urllib3
    assert pip_check(requests_venv) == before


def test_safe_requirement_is_installed_and_pip_check_is_no_worse(run_cli, requests_venv):
    """A requirement whose plan breaks nothing is installed with the venv's pip: exit 0, pip check no worse."""
    before = pip_check(requests_venv)
    dry_status, dry = fix(run_cli, requests_venv, "--require", "six", "--dry-run")
    assert dry_status == 1 and dry["actions"][0]["dry_run"] is True
    assert any(line.startswith("six ") and line.endswith("(new)") for line in dry["actions"][0]["plan"])
    assert version_of(requests_venv, "six") is None
    status, host = fix(run_cli, requests_venv, "--require", "six")
    assert status == 0, host
    assert host["actions"][0]["exit_status"] == 0 and "by_hand" not in host["actions"][0]
    assert version_of(requests_venv, "six") is not None
    assert pip_check(requests_venv) <= before


def test_old_pip_cannot_show_a_plan_so_the_install_is_by_hand(run_cli, venv_factory):
    """pip older than 22.2 has no --dry-run --report: the command is shown, never run."""
    venv = venv_factory("old pip venv", ["pip==22.0.4"])
    status, host = fix(run_cli, venv, "--require", "six")
    assert status == 1
    (action,) = host["actions"]
    assert action["by_hand"] is True and "22.2" in action["refused"]
    assert version_of(venv, "six") is None


def test_venv_without_pip_is_told_how_to_get_it(run_cli, tmp_path):
    """A venv made --without-pip on a machine without uv (no uv on PATH, ~/.local/bin or
    ~/.cargo/bin): the remedy is by hand, names ensurepip for that interpreter and uv, and fix
    installs nothing (tests/e2e/test_uv_venvs.py installs with a uv that is there)."""
    import venv as venv_module

    venv = tmp_path / "no pip venv"
    venv_module.EnvBuilder(with_pip=False).create(venv)
    (tmp_path / "home").mkdir()
    status, host = fix(run_cli, venv, "--require", "six", env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")})
    assert status == 1
    assert host["actions"] == []
    remedy = {r["id"]: r for r in host["results"]}["packages.required"]["remedy"]
    assert remedy["automatic"] is False
    python = shlex.quote(f"{venv}/bin/python")  # pasted into a shell as shown, it runs that interpreter
    assert f"{venv} has no pip, and the host has no uv" in remedy["summary"]
    assert f"add pip ({python} -m ensurepip" in remedy["summary"]
    assert f"uv pip install --python {python} six" in remedy["summary"]
    assert version_of(venv, "six") is None


@pytest.fixture(scope="module")
def transformers_venv(tmp_path_factory) -> Path:
    """A venv with transformers and the tokenizers version it requires."""
    from tests.conftest import make_venv

    return make_venv(tmp_path_factory.mktemp("safety") / "tf venv", ["transformers"])


def test_tokenizers_below_what_transformers_needs_is_by_hand(run_cli, transformers_venv):
    """--require 'tokenizers<0.22' beside transformers: by hand with transformers named, dry run or not."""
    before, tokenizers = pip_check(transformers_venv), version_of(transformers_venv, "tokenizers")
    for extra in (["--dry-run"], []):
        status, host = fix(run_cli, transformers_venv, "--require", "tokenizers<0.22", *extra)
        assert status == 1
        (action,) = host["actions"]
        assert action["by_hand"] is True
        assert "transformers" in action["refused"] and "requires tokenizers" in action["refused"]
        assert any(line.startswith(f"tokenizers {tokenizers} -> 0.") for line in action["plan"])
    assert version_of(transformers_venv, "tokenizers") == tokenizers
    assert pip_check(transformers_venv) == before


def test_active_virtualenv_is_the_chosen_interpreter_of_local(run_cli, requests_venv):
    """On the local machine $VIRTUAL_ENV is the user's choice: fix installs there without --venv."""
    res = run_cli("fix", "local", "--require", "colorama", "--only", "packages.required", "--format", "json",
                  env={"VIRTUAL_ENV": str(requests_venv)})
    assert res.exit_status == 0, res.stdout + res.stderr
    host = json.loads(res.stdout)["hosts"][0]
    assert host["actions"][0]["command"].startswith(f"'{requests_venv / 'bin' / 'python'}' -m pip install")
    assert version_of(requests_venv, "colorama") is not None
