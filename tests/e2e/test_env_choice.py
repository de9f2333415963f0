"""fix installs only into an interpreter the user chose; discovery reads files and runs nothing.

The sshd host is this machine: its non-interactive `python3` (a pyenv shim here) lacks
transformers, and a venv with transformers sits where envdoctor discovers environments
(/opt/<name>/venv, a link made by the test and removed after). Tests in this module run in
file order: the last one lets fix change the venv.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import host_roots
from tests.conftest import make_venv
from tests.kimi_fixture import build_kimi

pytestmark = pytest.mark.e2e


def freeze(python: str) -> str:
    """Every installed distribution of an interpreter, as pip sees it."""
    return subprocess.run([python, "-m", "pip", "freeze", "--all", "--disable-pip-version-check"],
                          capture_output=True, text=True, check=True).stdout


def default_python3(sshd) -> str:
    """The interpreter a non-interactive `python3` over SSH really runs (a pyenv shim, followed)."""
    ssh = ["ssh", "-F", str(sshd.ssh_config), "ct200"]
    out = subprocess.run([*ssh, "python3 -c 'import sys; print(sys.executable)'"], capture_output=True, text=True,
                         check=True, timeout=60, stdin=subprocess.DEVNULL)
    return out.stdout.strip()


@pytest.fixture(scope="module")
def stack_venv(tmp_path_factory, speculators_wheel_path) -> Path:
    """A venv with transformers and speculators 0.3.0 (no deps), without tiktoken."""
    path = make_venv(tmp_path_factory.mktemp("choice venvs") / "sglang venv", ["transformers"])
    subprocess.run([str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--no-deps", "--no-index", str(speculators_wheel_path)], check=True)
    return path


@pytest.fixture(scope="module")
def speculators_wheel_path(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("choice wheels")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check",
                    "speculators==0.3.0", "-d", str(folder)], check=True)
    return next(folder.glob("speculators-0.3.0-*.whl"))


@pytest.fixture(scope="module")
def discovered(stack_venv) -> Path:
    """/opt/<unique>/venv: a discovery root, pointing at the stack venv."""
    with host_roots.exclusive():
        root = host_roots.plant_folder("choice")
        root.mkdir()
        (root / "venv").symlink_to(stack_venv)
        yield root / "venv"
        shutil.rmtree(root)


@pytest.fixture(scope="module")
def planted() -> Path:
    """/opt/<unique>/venv whose `python` writes a marker when anything starts it."""
    with host_roots.exclusive():
        root = host_roots.plant_folder("planted")
        venv = root / "venv"
        (venv / "bin").mkdir(parents=True)
        (venv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
        (venv / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n")
        marker = root / "RAN"
        for name in ("python", "python3"):
            script = venv / "bin" / name
            script.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {marker}\nexec /usr/bin/python3 \"$@\"\n")
            script.chmod(0o755)
        yield venv
        shutil.rmtree(root)


@pytest.fixture(scope="module")
def kimi(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("choice models")
    mark = root / "MARK"
    return {"model": build_kimi(root / "Kimi-K2.6", mark=mark), "mark": mark}


def results_of(host: dict) -> dict[str, dict]:
    return {r["id"]: r for r in host["results"]}


def test_discovered_interpreter_is_never_started(run_cli, sshd, planted, stack_venv):
    """A planted python in a discovered venv never runs: no venv chosen, a venv chosen, local and over SSH."""
    marker = planted.parent / "RAN"
    runs = [
        run_cli("check", "ct200", "--ssh-config", str(sshd.ssh_config), "--format", "json"),
        run_cli("check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(stack_venv), "--format", "json"),
        run_cli("check", "local", "--format", "json"),
        run_cli("audit", "ct200", "--ssh-config", str(sshd.ssh_config), "--format", "json"),
    ]
    for res in runs:
        assert res.stdout.startswith("{"), res.stderr
    assert not marker.exists(), marker.read_text()
    # It was found all the same: read from its files.
    assert str(planted) in runs[0].stdout


def test_fix_without_a_chosen_venv_changes_nothing_and_names_the_venv(run_cli, sshd, discovered, stack_venv, kimi):
    """fix HOST --model M, no venv: nothing installed anywhere, the report says which --venv to pass and why."""
    python3 = default_python3(sshd)
    before = {python3: freeze(python3), str(stack_venv): freeze(str(stack_venv / "bin" / "python"))}
    res = run_cli("fix", "ct200", "--ssh-config", str(sshd.ssh_config), "--model", str(kimi["model"]),
                  "--format", "json")
    assert res.exit_status == 1, res.stderr
    host = json.loads(res.stdout)["hosts"][0]
    venv = results_of(host)["python.venv"]
    assert venv["status"] == "fail"
    assert f"pass --venv {discovered} (it has transformers " in venv["message"]
    assert "lacks tiktoken" in venv["message"]
    assert all(a["exit_status"] is None for a in host["actions"])
    assert freeze(python3) == before[python3]
    assert freeze(str(stack_venv / "bin" / "python")) == before[str(stack_venv)]
    assert not kimi["mark"].exists()


def test_install_remedy_into_an_unchosen_interpreter_is_shown_only(run_cli, sshd):
    """No venv chosen and the default python3 lacks a requirement: the install is shown, never run."""
    python3 = default_python3(sshd)
    before = freeze(python3)
    res = run_cli("fix", "ct200", "--ssh-config", str(sshd.ssh_config), "--require", "six==1.10.0",
                  "--only", "packages.required", "--format", "json")
    host = json.loads(res.stdout)["hosts"][0]
    required = results_of(host)["packages.required"]
    if required["status"] == "pass":
        pytest.skip(f"{python3} already has six 1.10.0")
    assert required["remedy"]["automatic"] is False and "--venv" in required["remedy"]["summary"]
    assert required["remedy"]["argv"][0] == python3 or os.path.realpath(required["remedy"]["argv"][0]) == os.path.realpath(python3)
    assert host["actions"] == [] and res.exit_status == 1
    assert freeze(python3) == before


def test_model_code_imports_are_not_installed_without_consent(run_cli, sshd, stack_venv, kimi):
    """With a chosen venv but no --trust-remote-code, tiktoken (named by the model's code) is shown, not installed."""
    res = run_cli("fix", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(stack_venv),
                  "--model", str(kimi["model"]), "--only", "model.code-imports", "--format", "json")
    host = json.loads(res.stdout)["hosts"][0]
    imports = results_of(host)["model.code-imports:tiktoken"]
    assert imports["status"] == "fail" and imports["remedy"]["automatic"] is False
    assert "--trust-remote-code" in imports["remedy"]["summary"]
    assert imports["remedy"]["unlocked_by"] == "--trust-remote-code"
    assert host["actions"] == []
    assert not list(stack_venv.glob("lib/python3*/site-packages/tiktoken"))


def test_venv_in_inventory_runs_the_whole_story(run_cli, sshd, discovered, stack_venv, kimi, tmp_path):
    """venv in envdoctor.toml: tiktoken installed with the venv's absolute pip, patches applied, code imports pass."""
    (tmp_path / "envdoctor.toml").write_text(
        f"[hosts.ct200]\nvenv = {json.dumps(str(stack_venv))}\nmodels = [{json.dumps(str(kimi['model']))}]\n"
        "trust_remote_code = true\n"
    )
    os.chmod(tmp_path, 0o755)
    res = run_cli("fix", "ct200", "--ssh-config", str(sshd.ssh_config), "--format", "json", cwd=tmp_path)
    assert res.stdout.startswith("{"), res.stderr
    host = json.loads(res.stdout)["hosts"][0]
    commands = [a["command"] for a in host["actions"]]
    installs = [a for a in host["actions"] if "tiktoken" in a["command"]]
    assert installs and installs[0]["exit_status"] == 0, commands
    assert shlex.split(installs[0]["command"])[:4] == [str(stack_venv / "bin" / "python"), "-m", "pip", "install"]
    assert any(line.startswith("tiktoken ") for line in installs[0]["plan"])
    patches = [a for a in host["actions"] if a["check"].startswith("patch.")]
    assert patches and all(a["exit_status"] == 0 for a in patches), patches
    assert list(stack_venv.glob("lib/python3*/site-packages/tiktoken"))
    after = results_of(host)
    assert after["model.code-imports"]["status"] == "pass"
    assert after["python.venv"]["status"] == "pass"
