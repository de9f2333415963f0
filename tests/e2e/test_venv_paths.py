"""A venv given as `~/...` or `~user/...` means the host user's path.

An inventory's `venv = "~/venv"` is common; before, the checks compared it as text with the
host's expanded path and reported an existing venv as missing, and remedies would have
quoted `~/venv/bin/pip`. The sshd host is this machine (the test user's home is the
account's home); a link under that home points at a real venv and is removed after.
"""

from __future__ import annotations

import json
import os
import pwd
import venv as venv_module
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def linked_venv(tmp_path_factory):
    """A real venv, reachable as ~/.envdoctor-e2e-venv-<pid> from the host user's home."""
    real = tmp_path_factory.mktemp("venv paths") / "venv"
    venv_module.EnvBuilder(with_pip=False).create(real)
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    link = home / f".envdoctor-e2e-venv-{os.getpid()}"
    link.symlink_to(real)
    yield link
    link.unlink()


@pytest.mark.parametrize("form", ["~/{name}", "~{user}/{name}"])
def test_a_venv_relative_to_the_host_users_home_is_found(run_cli, sshd, linked_venv, form):
    """`--venv` as ~/x or ~user/x is checked as the host's absolute path (the CLI refuses other relative paths)."""
    given = form.format(name=linked_venv.name, user=pwd.getpwuid(os.getuid()).pw_name)
    res = run_cli("check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", given,
                  "--only", "python.venv", "--format", "json")
    assert res.stdout.startswith("{"), res.stderr
    host = json.loads(res.stdout)["hosts"][0]
    result = next(r for r in host["results"] if r["id"] == "python.venv")
    assert result["status"] == "pass", result["message"]
    assert host["venv"] == str(linked_venv)
    assert str(linked_venv / "bin" / "python") in result["message"]


def test_a_venv_under_an_unknown_user_is_reported_missing(run_cli, sshd):
    """`~nosuchuser/venv` cannot be resolved on the host: the check fails naming the path as given."""
    res = run_cli("check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", "~nosuchuser-envdoctor/venv",
                  "--only", "python.venv", "--format", "json")
    result = next(r for r in json.loads(res.stdout)["hosts"][0]["results"] if r["id"] == "python.venv")
    assert result["status"] == "fail" and "~nosuchuser-envdoctor/venv does not exist" in result["message"]
