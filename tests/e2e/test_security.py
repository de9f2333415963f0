"""Security over a real sshd: host keys are never trusted silently, secrets never shown."""

from __future__ import annotations

import http.server
import json
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.faults_support import results_by_id
from tests.sshd import keygen

pytestmark = pytest.mark.e2e

HF_TOKEN = "hf_" + "Zq8" * 12
INDEX_PASSWORD = "s3cret-Pa55word"


def test_changed_host_key_is_refused_even_with_accept_new(run_cli, sshd, tmp_path):
    """--accept-new records unknown keys only: a key that differs from known_hosts is still refused."""
    impostor_pub = keygen(tmp_path / "other_key")
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {impostor_pub}\n")
    before = known.read_bytes()
    config = sshd.write_alias_config(["changed"], known_hosts=known, path=tmp_path / "ssh_config")
    res = run_cli("check", "changed", "--ssh-config", str(config), "--accept-new", "--format", "json",
                  "--only", "host.reachable")
    assert res.exit_status == 1
    reachable = results_by_id(json.loads(res.stdout)["hosts"][0])["host.reachable"]
    assert reachable["status"] == "error"
    assert reachable["details"]["kind"] == "host-key-changed"
    assert "accept-new" not in reachable["fix"], "--accept-new cannot record a changed key: never the advice"
    assert known.read_bytes() == before, "a changed key must never be written to known_hosts"


def test_accept_new_says_which_key_it_trusted(run_cli, sshd, tmp_path):
    """Accepting an unknown key is announced on stderr with its SHA256 fingerprint, even without -v."""
    known = tmp_path / "known_hosts"
    config = sshd.write_alias_config(["newhost"], known_hosts=known, path=tmp_path / "ssh_config")
    res = run_cli("check", "newhost", "--ssh-config", str(config), "--accept-new", "--only", "host.reachable")
    assert res.exit_status == 0, res.stdout + res.stderr
    expected = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(sshd.root / "host_ed25519.pub")],
                              capture_output=True, text=True, check=True).stdout.split()[1]
    assert "host_key_accepted" in res.stderr
    assert expected in res.stderr
    assert stat.S_IMODE(known.stat().st_mode) == 0o600
    # The second run trusts the recorded key and says nothing about accepting.
    again = run_cli("check", "newhost", "--ssh-config", str(config), "--accept-new", "--only", "host.reachable")
    assert again.exit_status == 0 and "host_key_accepted" not in again.stderr


@pytest.mark.parametrize("hashed", [True, False], ids=["HashKnownHosts-yes", "HashKnownHosts-no"])
def test_accepted_key_is_recorded_as_ssh_records_it(run_cli, sshd, tmp_path, hashed):
    """A key accepted with --accept-new is written as ssh's accept-new writes it: under a hashed
    name with HashKnownHosts yes (Debian's and Ubuntu's system default), so no host name is
    left in clear. Oracles: real ssh writes its own file from the same config, ssh-keygen -F
    finds envdoctor's line, and real ssh then trusts it with StrictHostKeyChecking yes."""
    config = sshd.write_alias_config(["hk"], known_hosts=tmp_path / "known_hosts", path=tmp_path / "ssh_config")
    text = config.read_text().replace("StrictHostKeyChecking yes", "StrictHostKeyChecking accept-new")
    config.write_text(text + f"    HashKnownHosts {'yes' if hashed else 'no'}\n    BatchMode yes\n")
    name = f"[127.0.0.1]:{sshd.port}"
    oracle_config = tmp_path / "oracle_config"
    oracle_config.write_text(config.read_text().replace(str(tmp_path / "known_hosts"), str(tmp_path / "oracle_known")))
    subprocess.run(["ssh", "-F", str(oracle_config), "hk", "true"], check=True, capture_output=True,
                   stdin=subprocess.DEVNULL, timeout=60)
    oracle_line = (tmp_path / "oracle_known").read_text().splitlines()[0]
    assert oracle_line.startswith("|1|") is hashed
    res = run_cli("check", "hk", "--ssh-config", str(config), "--only", "host.reachable")
    assert res.exit_status == 0, res.stdout + res.stderr
    lines = (tmp_path / "known_hosts").read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("|1|") is hashed
    assert ("127.0.0.1" in lines[0]) is not hashed
    assert lines[0].split()[1:] == oracle_line.split()[1:3]  # the same key
    found = subprocess.run(["ssh-keygen", "-F", name, "-f", str(tmp_path / "known_hosts")], capture_output=True,
                           text=True)
    assert found.returncode == 0 and lines[0] in found.stdout
    strict = tmp_path / "strict_config"
    strict.write_text(config.read_text().replace("StrictHostKeyChecking accept-new", "StrictHostKeyChecking yes"))
    subprocess.run(["ssh", "-F", str(strict), "hk", "true"], check=True, capture_output=True, stdin=subprocess.DEVNULL,
                   timeout=60)
    again = run_cli("check", "hk", "--ssh-config", str(strict), "--only", "host.reachable")
    assert again.exit_status == 0 and "host_key_accepted" not in again.stderr


@pytest.fixture(scope="module")
def empty_index() -> Iterator[str]:
    """host:port of a package index on 127.0.0.1 that knows no package (pip gives up at once)."""

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802  # the name http.server calls
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _private_key_body(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    return [line for line in lines if line and not line.startswith("-----")]


@pytest.mark.parametrize("fmt", ["json"])
def test_no_secret_in_logs_or_reports(run_cli, sshd, venv_factory, tmp_path, empty_index, fmt):
    """With -vv, a token in the environment or in a URL, an index password and the private key never appear in any output."""
    target = venv_factory(f"secrets-{fmt}")
    index = f"http://alice:{INDEX_PASSWORD}@{empty_index}/simple"
    extra = f"http://{HF_TOKEN}@{empty_index}/extra"
    output = tmp_path / f"report.{fmt}"
    res = run_cli("-vv", "fix", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(target),
                  "--require", "envdoctor-no-such-package-xyz", "--index-url", index, "--extra-index-url", extra,
                  "--format", fmt, "--output", str(output),
                  env={"HF_TOKEN": HF_TOKEN, "HUGGING_FACE_HUB_TOKEN": HF_TOKEN, "MY_SECRET": "hunter2-secret"})
    assert output.exists(), res.stderr[-3000:]
    report = output.read_text()
    # The remedy really ran with the URLs (so there was something to leak) ...
    assert f"{empty_index}/simple" in report and f"{empty_index}/simple" in res.stderr
    assert "remedy_start" in res.stderr
    assert "***" in report
    # ... and none of the secrets came out.
    everything = res.stdout + res.stderr + report
    assert INDEX_PASSWORD not in everything
    assert HF_TOKEN not in everything
    assert "hunter2-secret" not in everything
    for line in _private_key_body(sshd.client_key):
        assert line not in everything
    assert "Traceback" not in res.stderr
    if fmt == "json":
        json.loads(report)  # redaction must not break the format
