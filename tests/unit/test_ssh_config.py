"""Cutting an OpenSSH config down to one host's blocks keeps its meaning."""

from __future__ import annotations

from asyncssh.config import SSHClientConfig

from envdoctor.transport.ssh_config import reduced_config_files, split_blocks

CONFIG = """\
# global
User nobody
Host ct200 b300
    HostName 10.0.0.5
    Port 2222
Host gpu-* !gpu-bad
    User root
    IdentityFile ~/.ssh/gpu_%h
Match host ct200
    ServerAliveInterval 5
Host=other
  HostName 10.9.9.9
Host *
    ConnectTimeout 7
"""


def resolve(paths, host):
    config = SSHClientConfig.load(None, paths, False, False, False, "me", (), host, ())
    return {k: config.get(k) for k in ("Hostname", "Port", "User", "IdentityFile", "ConnectTimeout", "ServerAliveInterval")}


def test_blocks_keep_every_line_once():
    """Splitting into blocks loses and duplicates nothing."""
    assert "".join(b.text for b in split_blocks(CONFIG)) == CONFIG


def test_reduced_file_resolves_like_the_whole_file(tmp_path):
    """For each host, asyncssh reads the same settings from the cut-down file as from the whole."""
    path = tmp_path / "config"
    path.write_text(CONFIG)
    for host in ["ct200", "b300", "gpu-01", "gpu-bad", "other", "unlisted"]:
        reduced = reduced_config_files([str(path)], host)
        assert resolve(reduced, host) == resolve([str(path)], host), host
    assert len(open(reduced_config_files([str(path)], "gpu-01")[0]).read()) < len(CONFIG)
