"""Known hosts files whose names hold spaces (`UserKnownHostsFile "~/My Keys/known hosts" ...`):
envdoctor reads and writes the files real `ssh` reads and writes, against a real sshd."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.faults_support import results_by_id
from tests.sshd import SSHServer

pytestmark = pytest.mark.e2e


def host_key(server: SSHServer) -> str:
    return " ".join((server.root / "host_ed25519.pub").read_text().split()[:2])


def write_config(server: SSHServer, folder: Path, strict: str) -> Path:
    """Alias `sp` for the server; its two user known hosts files are in `My Keys` (with spaces)."""
    (folder / "My Keys").mkdir(parents=True, exist_ok=True)
    config = folder / "ssh_config"
    config.write_text(f"Host sp\n  HostName 127.0.0.1\n  Port {server.port}\n  User {server.user}\n"
                      f"  IdentityFile {server.client_key}\n  IdentitiesOnly yes\n"
                      f'  UserKnownHostsFile "{folder}/My Keys/kh one" "{folder}/My Keys/known hosts 2"\n'
                      f"  StrictHostKeyChecking {strict}\n  BatchMode yes\n")
    return config


def ssh_connects(config: Path) -> bool:
    return subprocess.run(["ssh", "-F", str(config), "sp", "true"], capture_output=True, stdin=subprocess.DEVNULL,
                          timeout=60).returncode == 0


def reachable(run_cli, config: Path) -> dict:
    res = run_cli("check", "sp", "--ssh-config", str(config), "--only", "host.reachable", "--format", "json")
    assert res.exit_status in (0, 1), res.stderr
    return results_by_id(json.loads(res.stdout)["hosts"][0])["host.reachable"]


def test_the_key_in_the_second_spaced_file_is_trusted(run_cli, sshd: SSHServer, tmp_path: Path) -> None:
    """The host key is only in `My Keys/known hosts 2`: ssh connects (StrictHostKeyChecking yes),
    and so does envdoctor (split at the spaces, it would find no such file and refuse)."""
    config = write_config(sshd, tmp_path, "yes")
    (tmp_path / "My Keys" / "known hosts 2").write_text(f"[127.0.0.1]:{sshd.port} {host_key(sshd)}\n")
    assert ssh_connects(config), "the oracle: ssh trusts the key in the second file"
    result = reachable(run_cli, config)
    assert result["status"] == "pass", result


def test_accept_new_records_in_the_file_ssh_records_in(run_cli, sshd: SSHServer, tmp_path: Path) -> None:
    """accept-new with no file yet: envdoctor records the key in the same file ssh does
    (`My Keys/kh one`), never in a file named after a fragment (`My`)."""
    by_ssh, by_envdoctor = tmp_path / "ssh", tmp_path / "envdoctor"
    assert ssh_connects(write_config(sshd, by_ssh, "accept-new"))
    assert reachable(run_cli, write_config(sshd, by_envdoctor, "accept-new"))["status"] == "pass"

    def files(folder: Path) -> list[str]:
        return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name != "ssh_config")

    assert files(by_envdoctor) == files(by_ssh) == ["My Keys/kh one"]
    recorded = (by_envdoctor / "My Keys" / "kh one").read_text().split()
    assert recorded[1:3] == host_key(sshd).split()
