"""`gpu1:2222` on the command line: host `gpu1`, port 2222 (what `ssh -p 2222 gpu1` resolves),
unless the SSH config names `gpu1:2222` itself without wildcards (`Host gpu1:2222` or
`Match originalhost gpu1:2222`): then what `ssh gpu1:2222` resolves. A wildcard such as
`Host gpu*` (which ssh also applies to the name `gpu1:2222`) keeps the port. Real `ssh -G`
is the oracle for both readings; `check` and `hosts` read a destination alike."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from envdoctor.cli.main import cli
from envdoctor.errors import ConfigError
from envdoctor.inventory import load_inventory, resolve_hosts
from envdoctor.transport.openssh import HostResolver

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client (the oracle)")

#: (config, destination, whether ssh's own reading of the whole name applies)
CASES = [
    ("Host gpu*\n  HostName 127.0.0.1\n", "gpu1:2222", False),
    ("Host gpu?:*\n  HostName 127.0.0.1\nHost gpu1\n  HostName 127.0.0.2\n", "gpu1:2222", False),
    ("Host *\n  HostName 127.0.0.1\n", "root@gpu1:2222", False),
    ("Host gpu1:2222\n  HostName 127.0.0.1\n  Port 2201\n", "gpu1:2222", True),
    ("Host other gpu1:2222\n  HostName 127.0.0.1\n  Port 2201\nHost gpu*\n  Port 2202\n", "gpu1:2222", True),
    ("Host gpu1:2222 !gpu1:*\n  HostName 127.0.0.1\n  Port 2201\nHost gpu*\n  HostName 127.0.0.3\n", "gpu1:2222",
     False),
    ("Match originalhost gpu1:2222\n  HostName 127.0.0.1\n  Port 2201\n", "gpu1:2222", True),
]


@pytest.fixture(autouse=True)
def private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def ssh_g(config: Path, *args: str) -> tuple[str, int, str]:
    out = subprocess.run(["ssh", "-G", "-F", str(config), *args], capture_output=True, text=True, check=True,
                         stdin=subprocess.DEVNULL, timeout=60).stdout
    values = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    return values["hostname"], int(values["port"]), values["user"]


@pytest.mark.parametrize(("body", "dest", "whole"), CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_host_port_is_read_as_documented_and_resolved_as_ssh(tmp_path: Path, body: str, dest: str,
                                                             whole: bool) -> None:
    """check's reading (resolve_hosts) and hosts' reading agree, and each resolves to what
    ssh -G gives for it: `ssh -G gpu1:2222` when the config names the whole, else
    `ssh -G -p 2222 gpu1`."""
    config = tmp_path / "config"
    config.write_text(body)
    user, _, hostport = dest.rpartition("@")
    host, _, port = hostport.rpartition(":")
    login = ["-l", user] if user else []
    want = ssh_g(config, *login, hostport) if whole else ssh_g(config, *login, "-p", port, host)
    if not whole:  # (what ssh itself would do with the whole name differs: the port is lost)
        assert ssh_g(config, *login, hostport)[1] != int(port)
    (spec,) = resolve_hosts([dest], load_inventory(None), ssh_config_files=[str(config)])
    assert spec.ssh is not None
    target = asyncio.run(HostResolver(str(config)).resolve(spec.ssh.host, spec.ssh.user, spec.ssh.port))
    assert (target.hostname, target.port, target.user) == want
    result = CliRunner().invoke(cli, ["hosts", dest, "--ssh-config", str(config), "--format", "json"])
    assert result.exit_code == 0, result.output
    (entry,) = json.loads(result.stdout)["hosts"]
    assert (entry["hostname"], entry["port"], entry["user"]) == want


def test_a_wildcard_does_not_make_another_colon_a_host_name(tmp_path: Path) -> None:
    """`gpu1:ssh` with `Host gpu*`: refused by the commands that connect (no port number), as
    without the block; with `Host gpu1:ssh` it is that alias."""
    config = tmp_path / "config"
    config.write_text("Host gpu*\n  HostName 127.0.0.1\n")
    with pytest.raises(ConfigError, match="is not a host name nor host:port"):
        resolve_hosts(["gpu1:ssh"], load_inventory(None), ssh_config_files=[str(config)])
    config.write_text("Host gpu1:ssh\n  HostName 127.0.0.1\n")
    (spec,) = resolve_hosts(["gpu1:ssh"], load_inventory(None), ssh_config_files=[str(config)])
    assert spec.ssh is not None and (spec.ssh.host, spec.ssh.port) == ("gpu1:ssh", None)
