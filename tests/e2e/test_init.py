"""The daily story over a real sshd: one `envdoctor init`, then flagless `fix` and `check`; and a
stock Debian host (its own python3, python3-gi) as a green CI gate.

Each host is this machine seen through an sshd of its own whose sessions get a fresh HOME
(sshd_config `SetEnv HOME=...`): no ~/.bashrc puts pyenv first, so a non-interactive
`python3` is Debian's /usr/bin/python3 (externally managed, PEP 668) and `pip` is
/usr/bin/pip, as on a host nobody prepared; ~/venv_sglang211 and ~/models live in that HOME.
Tests in this module run in file order: the story's steps build on each other.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.conftest import make_venv
from tests.kimi_fixture import build_kimi
from tests.sshd import free_port, start_sshd

pytestmark = pytest.mark.e2e

DEBIAN_PYTHON = Path("/usr/bin/python3")
PYTHON3_GI = Path("/usr/lib/python3/dist-packages/gi")


def fresh_home_host(tmp_path_factory, alias: str):
    """An sshd on 127.0.0.1 answering to ``alias``, whose sessions have HOME set to a new folder."""
    home = tmp_path_factory.mktemp(f"home-{alias}")
    server = start_sshd(tmp_path_factory.mktemp(f"sshd-{alias}"), [alias], extra_config=[f"SetEnv HOME={home}"])
    return server, home


@pytest.fixture(scope="module")
def debian_host(tmp_path_factory):
    """A host with nothing of the job: Debian's own python3 and its packages."""
    if not (DEBIAN_PYTHON.is_file() and (DEBIAN_PYTHON.parent.parent / "lib/python3.11/EXTERNALLY-MANAGED").is_file()):
        pytest.skip("needs Debian 12's externally-managed /usr/bin/python3")
    server, home = fresh_home_host(tmp_path_factory, "deb12")
    yield server, home
    server.stop()


@pytest.fixture(scope="module")
def seed_host(tmp_path_factory):
    """The seed host: ~/venv_sglang211 with transformers and no tiktoken, ~/models/Kimi-K2.6."""
    server, home = fresh_home_host(tmp_path_factory, "ct200")
    venv = make_venv(home / "venv_sglang211", ["transformers"])
    mark = home / "MODEL-CODE-RAN"
    model = build_kimi(home / "models" / "Kimi-K2.6", mark=mark)
    yield {"server": server, "home": home, "venv": venv, "model": model, "mark": mark}
    server.stop()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """Where the user runs envdoctor: a folder only they can write, with a team's inventory in it."""
    folder = tmp_path_factory.mktemp("work")
    os.chmod(folder, 0o755)
    inventory = folder / "envdoctor.toml"
    inventory.write_text('# the team\'s fleet: keep this line\n[hosts.b300]\nssh = "b300.example"\n'
                         'venv = "/root/venv_dflash"   # b300 trains drafters\n')
    os.chmod(inventory, 0o644)
    return folder


def freeze(python: Path) -> str:
    return subprocess.run([str(python), "-m", "pip", "freeze", "--all", "--disable-pip-version-check"],
                          capture_output=True, text=True, check=True).stdout


def by_id(host: dict) -> dict[str, dict]:
    return {r["id"]: r for r in host["results"]}


def test_a_stock_debian_host_with_python3_gi_is_a_green_gate_with_no_flags(run_cli, debian_host):
    """No flags, no inventory: the system python3 is described, not gated; its distro inconsistencies are notes; exit 0."""
    server, _ = debian_host
    before = freeze(DEBIAN_PYTHON)
    res = run_cli("check", "deb12", "--ssh-config", str(server.ssh_config), "--format", "json")
    assert res.exit_status == 0, res.stdout + res.stderr
    results = by_id(json.loads(res.stdout)["hosts"][0])
    venv = results["python.venv"]
    assert venv["status"] == "pass"
    assert "/usr/bin/python3 (Python 3.11" in venv["message"]
    assert "the system's own interpreter (externally managed: PEP 668)" in venv["message"]
    assert "`envdoctor init deb12`" in venv["message"]
    consistent = results["packages.consistent"]
    assert consistent["status"] == "pass" and "fix" not in consistent
    if PYTHON3_GI.is_dir():
        assert any("pygobject" in line for line in consistent["details"]["not_gated"]), consistent
    fixed = run_cli("fix", "deb12", "--ssh-config", str(server.ssh_config), "--format", "json")
    assert fixed.exit_status == 0 and json.loads(fixed.stdout)["hosts"][0]["actions"] == []
    assert freeze(DEBIAN_PYTHON) == before


def test_nothing_is_installed_into_the_externally_managed_python(run_cli, debian_host):
    """What the job requires and the system python lacks fails, with a venv as the advice and no pip command run."""
    server, _ = debian_host
    before = freeze(DEBIAN_PYTHON)
    res = run_cli("fix", "deb12", "--ssh-config", str(server.ssh_config), "--require", "pycairo", "--format", "json")
    assert res.exit_status == 1
    host = json.loads(res.stdout)["hosts"][0]
    required = by_id(host)["packages.required"]
    assert required["status"] == "fail" and "argv" not in required["remedy"]
    assert "externally managed (PEP 668)" in required["remedy"]["summary"]
    assert "python3 -m venv" in required["remedy"]["summary"]
    assert host["actions"] == [] and freeze(DEBIAN_PYTHON) == before


def test_before_init_the_text_report_names_the_venv_and_the_init_line(run_cli, seed_host):
    """No venv chosen: the text report (not only JSON) names ~/venv_sglang211 and `envdoctor init ct200`."""
    server = seed_host["server"]
    res = run_cli("check", "ct200", "--ssh-config", str(server.ssh_config))
    assert f"pass --venv {seed_host['venv']} (it has transformers " in res.stdout, res.stdout
    assert "`envdoctor init ct200`" in res.stdout
    assert res.exit_status == 0, res.stdout


def test_init_writes_the_venv_models_gpus_and_consent_and_keeps_the_file(run_cli, seed_host, workdir):
    """init ct200 --trust-remote-code: the TOML is shown and added; b300 and the comment stay; no model code ran."""
    server = seed_host["server"]
    old = (workdir / "envdoctor.toml").read_text()
    res = run_cli("init", "ct200", "--ssh-config", str(server.ssh_config), "--trust-remote-code", cwd=workdir)
    assert res.exit_status == 0, res.stdout + res.stderr
    assert "[hosts.ct200]" in res.stdout and f'venv = "{seed_host["venv"]}"' in res.stdout
    text = (workdir / "envdoctor.toml").read_text()
    assert text.startswith(old), "the old lines stay as they were, first"
    table = tomllib.loads(text)["hosts"]["ct200"]
    assert table == {"venv": str(seed_host["venv"]), "models": [str(seed_host["model"])], "gpus": 0,
                     "trust_remote_code": True}
    assert tomllib.loads(text)["hosts"]["b300"]["ssh"] == "b300.example"
    assert stat.S_IMODE((workdir / "envdoctor.toml").stat().st_mode) & 0o022 == 0
    assert not seed_host["mark"].exists(), "init runs nothing of the model"


def test_init_never_overwrites_an_entry_without_force(run_cli, seed_host, workdir):
    """A second init keeps ct200's table byte for byte; --force --dry-run shows the new table and writes nothing."""
    server = seed_host["server"]
    before = (workdir / "envdoctor.toml").read_text()
    kept = run_cli("init", "ct200", "--ssh-config", str(server.ssh_config), cwd=workdir)
    assert kept.exit_status == 0 and "kept" in kept.stdout and "--force replaces it" in kept.stdout
    dry = run_cli("init", "ct200", "--ssh-config", str(server.ssh_config), "--force", "--dry-run", "--format", "json",
                  cwd=workdir)
    assert dry.exit_status == 0, dry.stderr
    [host] = json.loads(dry.stdout)["hosts"]
    assert host["state"] == "would-write" and "# trust_remote_code = true" in host["table"]
    assert (workdir / "envdoctor.toml").read_text() == before


def test_init_of_several_hosts_at_once_writes_each_reachable_one(run_cli, debian_host, seed_host, tmp_path):
    """init deb12 ct200 and a refused port in one run: two tables written to --config, the third reported, exit 1."""
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(debian_host[0].ssh_config.read_text() + "\n" + seed_host["server"].ssh_config.read_text())
    os.chmod(tmp_path, 0o755)
    inventory = tmp_path / "fleet.toml"
    refused = f"{seed_host['server'].user}@127.0.0.1:{free_port()}"
    res = run_cli("init", "deb12", "ct200", refused, "--ssh-config", str(ssh_config), "--config", str(inventory),
                  "--format", "json", "--connect-timeout", "5")
    assert res.exit_status == 1, res.stdout + res.stderr
    states = {h["host"]: h for h in json.loads(res.stdout)["hosts"]}
    assert (states["deb12"]["state"], states["ct200"]["state"], states[refused]["state"]) == (
        "written", "written", "not-written")
    assert states[refused]["problem"]["kind"] == "unreachable"
    hosts = tomllib.loads(inventory.read_text())["hosts"]
    assert set(hosts) == {"deb12", "ct200"}
    assert hosts["ct200"]["venv"] == str(seed_host["venv"]) and hosts["ct200"]["gpus"] == 0
    assert "venv" not in hosts["deb12"] and hosts["deb12"]["gpus"] == 0
    assert states["deb12"]["system_interpreter"] == "/usr/bin/python3"


def test_after_init_fix_needs_no_flags(run_cli, seed_host, workdir):
    """`envdoctor fix ct200`, no flags: tiktoken goes into ~/venv_sglang211 with its absolute pip, and the summary names the change."""
    server = seed_host["server"]
    res = run_cli("fix", "ct200", "--ssh-config", str(server.ssh_config), "--format", "json", cwd=workdir)
    host = json.loads(res.stdout)["hosts"][0]
    installs = [a for a in host["actions"] if "tiktoken" in a["command"]]
    assert installs and installs[0]["exit_status"] == 0, host["actions"]
    python = seed_host["venv"] / "bin" / "python"
    assert shlex.split(installs[0]["command"])[:4] == [str(python), "-m", "pip", "install"]
    assert {"id": "model.code-imports:tiktoken", "before": "fail", "after": "pass"} in host["changed"]
    assert "tiktoken==" in freeze(python)
    assert res.exit_status == 0, json.dumps([r for r in host["results"] if r["status"] in ("fail", "error")])


def test_after_init_check_needs_no_flags_and_is_green(run_cli, seed_host, workdir):
    """`envdoctor check ct200`, no flags: the inventory names the venv and the model; exit 0; fix again does nothing."""
    server = seed_host["server"]
    res = run_cli("check", "ct200", "--ssh-config", str(server.ssh_config), cwd=workdir)
    assert res.exit_status == 0, res.stdout
    assert f"venv {seed_host['venv']}" in res.stdout
    again = run_cli("fix", "ct200", "--ssh-config", str(server.ssh_config), cwd=workdir)
    assert again.exit_status == 0 and "fix: nothing to do" in again.stdout
