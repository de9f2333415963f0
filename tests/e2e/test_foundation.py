"""check and fix over a real sshd, with real venvs and real packages from PyPI."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.sshd import keygen

pytestmark = pytest.mark.e2e


def results_by_id(host: dict) -> dict[str, dict]:
    return {r["id"]: r for r in host["results"]}


@pytest.fixture(scope="module")
def bare_venv(venv_factory) -> Path:
    """A venv whose path has spaces and shell metacharacters, without tiktoken."""
    return venv_factory("bare venv $(touch PWNED); `id` 'q'")


def test_check_two_hosts_reports_missing_package_with_absolute_pip(run_cli, sshd, bare_venv):
    """check on two aliases at once reports the missing package and the venv's absolute pip as the fix."""
    res = run_cli("check", "ct200", "b300", "--ssh-config", str(sshd.ssh_config),
                  "--venv", str(bare_venv), "--require", "tiktoken", "--format", "json")
    assert res.exit_status == 1, res.stderr
    data = json.loads(res.stdout)
    assert [h["host"] for h in data["hosts"]] == ["ct200", "b300"]
    for host in data["hosts"]:
        results = results_by_id(host)
        assert results["host.reachable"]["status"] == "pass"
        assert results["python.venv"]["status"] == "pass"
        required = results["packages.required"]
        assert required["status"] == "fail"
        assert "tiktoken" in required["message"]
        assert required["remedy"]["argv"][:4] == [str(bare_venv / "bin" / "python"), "-m", "pip", "install"]
        assert results["python.pip-path"]["status"] == "warn"
    assert not (Path("/") / "PWNED").exists() and not Path("PWNED").exists()


def test_fix_installs_then_second_fix_does_nothing(run_cli, sshd, venv_factory):
    """fix installs the missing package with the venv's pip; a second fix has nothing to do."""
    target = venv_factory("fix me")
    args = ["--ssh-config", str(sshd.ssh_config), "--venv", str(target), "--require", "tiktoken", "--format", "json"]
    dry = run_cli("fix", "ct200", "--dry-run", *args)
    assert dry.exit_status == 1
    dry_host = json.loads(dry.stdout)["hosts"][0]
    assert dry_host["actions"] and dry_host["actions"][0]["dry_run"] is True
    assert not list((target / "lib").glob("python3*/site-packages/tiktoken"))

    first = run_cli("fix", "ct200", *args)
    assert first.exit_status == 0, first.stdout + first.stderr
    host = json.loads(first.stdout)["hosts"][0]
    assert results_by_id({"results": host["before"]})["packages.required"]["status"] == "fail"
    assert results_by_id(host)["packages.required"]["status"] == "pass"
    assert host["actions"][0]["exit_status"] == 0
    assert list((target / "lib").glob("python3*/site-packages/tiktoken"))

    second = run_cli("fix", "ct200", *args)
    assert second.exit_status == 0
    assert json.loads(second.stdout)["hosts"][0]["actions"] == []


def test_wrong_host_key_is_refused_distinctly(run_cli, sshd, tmp_path):
    """A host key that differs from known_hosts ends the host as an error naming the key, not auth."""
    other = tmp_path / "other_host_key"
    pub = keygen(other)
    bad_known = tmp_path / "known_hosts"
    bad_known.write_text(f"[127.0.0.1]:{sshd.port} {pub}\n")
    config = sshd.write_alias_config(["impostor"], known_hosts=bad_known, path=tmp_path / "ssh_config")
    res = run_cli("check", "impostor", "--ssh-config", str(config), "--format", "json")
    assert res.exit_status == 1
    reachable = results_by_id(json.loads(res.stdout)["hosts"][0])["host.reachable"]
    assert reachable["status"] == "error"
    assert reachable["details"]["kind"] == "host-key-changed"
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in reachable["message"]


def test_unknown_host_key_needs_accept_new(run_cli, sshd, tmp_path):
    """An unknown host key is refused; --accept-new records it and the next run trusts it."""
    known = tmp_path / "known_hosts"
    config = sshd.write_alias_config(["fresh"], known_hosts=known, path=tmp_path / "ssh_config")
    refused = run_cli("check", "fresh", "--ssh-config", str(config), "--format", "json", "--only", "host.reachable")
    assert results_by_id(json.loads(refused.stdout)["hosts"][0])["host.reachable"]["details"]["kind"] == "host-key"
    accepted = run_cli("check", "fresh", "--ssh-config", str(config), "--accept-new", "--only", "host.reachable")
    assert accepted.exit_status == 0, accepted.stdout
    assert f"[127.0.0.1]:{sshd.port} ssh-ed25519 " in known.read_text()
    again = run_cli("check", "fresh", "--ssh-config", str(config), "--only", "host.reachable")
    assert again.exit_status == 0


def test_auth_failure_and_unreachable_are_distinct(run_cli, sshd, tmp_path):
    """A refused key and a closed port give two different, clearly worded results."""
    stranger = tmp_path / "stranger_key"
    keygen(stranger)
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host stranger\n  HostName 127.0.0.1\n  Port {sshd.port}\n  IdentityFile {stranger}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {sshd.known_hosts}\n"
    )
    auth = run_cli("check", "stranger", "--ssh-config", str(config), "--format", "json")
    assert results_by_id(json.loads(auth.stdout)["hosts"][0])["host.reachable"]["details"]["kind"] == "auth"

    closed = run_cli("check", f"root@127.0.0.1:{_closed_port()}", "--format", "json", "--connect-timeout", "5")
    data = json.loads(closed.stdout)["hosts"][0]
    results = results_by_id(data)
    assert results["host.reachable"]["details"]["kind"] == "unreachable"
    assert results["packages.required"]["status"] == "blocked"
    assert results["packages.required"]["blocked_by"] == "python.venv"
    assert closed.exit_status == 1


def _closed_port() -> int:
    from tests.sshd import free_port

    return free_port()


def test_missing_venv_is_a_failing_check(run_cli, sshd, tmp_path):
    """A venv that does not exist fails python.venv and blocks the package checks."""
    res = run_cli("check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(tmp_path / "nope"), "--format", "json")
    results = results_by_id(json.loads(res.stdout)["hosts"][0])
    assert results["python.venv"]["status"] == "fail"
    assert "does not exist" in results["python.venv"]["message"]
    assert results["packages.consistent"]["status"] == "blocked"


def test_home_ssh_config_alias_and_inventory_group(run_cli, sshd, bare_venv, tmp_path):
    """Aliases come from the SSH config (--ssh-config: $HOME/.ssh/config is not the one plain ssh
    reads when $HOME is not the account's home); an inventory group expands to its hosts;
    junit has a case per check."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    config = sshd.write_alias_config(["ct200", "b300"], path=tmp_path / "ssh_config")
    (tmp_path / "envdoctor.toml").write_text(
        f"[hosts.ct200]\nvenv = {json.dumps(str(bare_venv))}\nrequires = ['pip']\n"
        f"[hosts.b300]\nvenv = {json.dumps(str(bare_venv))}\n"
        "[groups]\nfleet = ['ct200', 'b300']\n"
    )
    out = tmp_path / "report.xml"
    res = run_cli("check", "fleet", "--format", "junit", "--output", str(out), "--ssh-config", str(config),
                  env={"HOME": str(home)}, cwd=tmp_path)
    assert res.exit_status == 0, res.stderr + out.read_text()
    root = ET.parse(out).getroot()
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"ct200", "b300"}
    names = {c.get("name") for c in suites["ct200"].iter("testcase")}
    assert {"host.reachable", "packages.required", "python.pip-path"} <= names


@pytest.mark.parametrize(
    ("args", "files", "expected"),
    [
        (["check", "nosuchhost"], {}, "unknown host 'nosuchhost'"),
        (["check", "--config", "bad.toml"], {"bad.toml": "[hosts.a\nvenv='x'"}, "not valid TOML"),
        (["check", "--config", "types.toml"], {"types.toml": "[hosts.a]\nrequires = 'tiktoken'"}, "must be a list"),
        (["check", "--require", "tiktoken>>1"], {}, "not a valid requirement"),
        (["check", "--venv", "relative/path"], {}, "must be an absolute path"),
        (["check", "--config", "missing.toml"], {}, "does not exist"),
        (["check", "--config", "/dev/null"], {}, "config file /dev/null is not a regular file"),
        (["check", "--model", ""], {}, "--model '' names no directory"),  # (else: the login folder)
        (["check", "--config", "empty.toml"], {"empty.toml": "[hosts.a]\nmodels = ['']"}, "has an empty string"),
        (["check", "--scan", " "], {}, "--scan '' names no distribution"),
        (["drift", "--provider", ""], {}, "--provider '' names no distribution"),
        (["scan", "/dev/null"], {}, "/dev/null is neither a file nor a folder"),
        (["hosts", "a", "--ssh-config", "missing_config"], {}, "SSH config missing_config does not exist"),
        (["check", "--checks", "boom.py"], {"boom.py": "x = 1\nraise RuntimeError('boom')\n"},
         "boom.py:2: loading it raised RuntimeError: boom"),
        (["check", "a", "--config", "rel.toml"], {"rel.toml": "[hosts.a]\nssh = 'local'\nvenv = 'rel/v'"},
         "hosts.a.venv 'rel/v' must be an absolute path on the host"),
        (["run", "a", "s", "--config", "cmd.toml"], {"cmd.toml": "[hosts.a]\nssh = 'local'\n[stages.s]\nhost = 'a'\n"
                                                                 "command = ' '"}, "stages.s needs a command"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run_cli, tmp_path, args, files, expected):
    """Bad arguments and bad config files give a one-line error and exit status 2, no traceback."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    home = tmp_path / "home"
    home.mkdir()
    res = run_cli(*args, cwd=tmp_path, env={"HOME": str(home)})
    assert res.exit_status == 2
    assert expected in res.stderr
    assert "Traceback" not in res.stderr
    assert res.stderr.splitlines()[0].startswith("envdoctor: error:")


def test_ssh_config_dev_null_reads_no_config_as_ssh_f_does(run_cli, tmp_path):
    """`ssh -F /dev/null` is the idiom for "no config at all": --ssh-config takes it too."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host gx\n  HostName 10.9.9.9\n  Port 2222\n")
    res = run_cli("hosts", "gx", "--ssh-config", "/dev/null", "--format", "json", env={"HOME": str(home)})
    assert res.exit_status == 0, res.stderr
    (host,) = json.loads(res.stdout)["hosts"]
    assert (host["hostname"], host["port"]) == ("gx", 22)
