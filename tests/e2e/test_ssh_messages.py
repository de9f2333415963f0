"""Connection failures told as ssh tells them, with real `ssh` on the same files as the oracle:
a changed host key (the offending known_hosts line, the `ssh-keygen -R` that removes it, never
--accept-new) and an unknown one."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.e2e.faults_support import results_by_id
from tests.sshd import SSHServer, keygen

pytestmark = pytest.mark.e2e


def write_config(sshd: SSHServer, folder: Path, *, port: int | None = None, extra: str = "") -> Path:
    """One alias `box` for 127.0.0.1 (the test sshd's port unless another is given), strict host keys."""
    config = folder / "ssh_config"
    config.write_text(
        f"Host box\n  HostName 127.0.0.1\n  Port {port or sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {folder / 'known_hosts'}\n"
        f"  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  BatchMode yes\n{extra}")
    return config


def ssh_stderr(config: Path, *options: str) -> str:
    """The oracle: what `ssh -F config box true` says on stderr (it must fail)."""
    proc = subprocess.run(["ssh", "-F", str(config), *options, "box", "true"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60, check=False)
    assert proc.returncode == 255, proc.stderr
    return proc.stderr


def reachable(run_cli, config: Path, *args: str) -> tuple[dict, str]:
    """host.reachable of `envdoctor check box` in JSON, and the run's stderr."""
    res = run_cli("check", "box", "--ssh-config", str(config), "--format", "json", "--only", "host.reachable", *args)
    assert res.exit_status == 1 and "Traceback" not in res.stderr, res.stdout + res.stderr
    return results_by_id(json.loads(res.stdout)["hosts"][0])["host.reachable"], res.stderr


def test_a_changed_host_key_says_so_with_the_line_and_the_command_that_removes_it(run_cli, sshd, tmp_path):
    """A key other than the one known_hosts holds is 'REMOTE HOST IDENTIFICATION HAS CHANGED',
    naming the offending line as ssh names it and `ssh-keygen -R '[127.0.0.1]:PORT' -f FILE`,
    with and without --accept-new, and never advising --accept-new. Running that command is
    the whole remedy: then --accept-new records the real key and the other line stays."""
    known = tmp_path / "known_hosts"
    other = f"[127.0.0.2]:{sshd.port} {keygen(tmp_path / 'unrelated')}\n"
    known.write_text(other + f"[127.0.0.1]:{sshd.port} {keygen(tmp_path / 'old_host_key')}\n")
    config = write_config(sshd, tmp_path)
    oracle = ssh_stderr(config)
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in oracle
    offending = re.search(r"Offending \S+ key in \S+", oracle)
    assert offending and offending.group() == f"Offending ED25519 key in {known}:2", oracle
    assert f'ssh-keygen -f "{known}" -R "[127.0.0.1]:{sshd.port}"' in oracle
    for args in ([], ["--accept-new"]):
        result, _ = reachable(run_cli, config, *args)
        assert result["details"]["kind"] == "host-key-changed", result
        assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in result["message"]
        assert offending.group() in result["message"]
        command = f"ssh-keygen -R '[127.0.0.1]:{sshd.port}' -f {known}"
        assert f"`{command}`" in result["fix"]
        assert "accept-new" not in result["message"] + result["fix"]
    text = run_cli("check", "box", "--ssh-config", str(config), "--accept-new", "--only", "host.reachable")
    assert "host key changed" in text.stdout and "accept-new" not in text.stdout, text.stdout

    subprocess.run(shlex.split(command), check=True, capture_output=True)
    assert known.read_text().startswith(other) and str(sshd.port) not in known.read_text().replace(other, "")
    res = run_cli("check", "box", "--ssh-config", str(config), "--accept-new", "--only", "host.reachable")
    assert res.exit_status == 0, res.stdout + res.stderr


def test_an_unknown_host_key_is_a_different_problem_from_a_changed_one(run_cli, sshd, tmp_path):
    """No entry for the host: kind host-key (not host-key-changed), ssh's 'No ED25519 host key
    is known for [127.0.0.1]:PORT', and here --accept-new is the advice."""
    config = write_config(sshd, tmp_path)
    oracle = ssh_stderr(config)
    words = f"No ED25519 host key is known for [127.0.0.1]:{sshd.port}"
    assert words in oracle
    result, _ = reachable(run_cli, config)
    assert result["details"]["kind"] == "host-key", result
    assert "host key of box" in result["message"] and "is unknown" in result["message"]
    assert words in result["message"]
    assert "--accept-new" in result["fix"]