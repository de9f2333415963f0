"""Known hosts file names with spaces: `ssh -G` prints UserKnownHostsFile/GlobalKnownHostsFile
joined by spaces and unquoted, and envdoctor recovers the files ssh uses from the config's
own (argv_split) words, expanded as ssh expands them. The oracle is real `ssh -G` (its
printed line is the files joined by spaces); the e2e test with a real sshd proves which
files ssh reads and writes (tests/e2e/test_known_hosts_spaces.py)."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

from envdoctor.errors import ConfigError
from envdoctor.transport.openssh import HostResolver
from envdoctor.transport.ssh_config_resolve import resolve_builtin

SSH = shutil.which("ssh")
pytestmark = pytest.mark.skipif(SSH is None, reason="needs the OpenSSH client (the oracle)")
HOME = pwd.getpwuid(os.getuid()).pw_dir

#: (config lines for Host h, the user files ssh uses, the global files ssh uses); {d} is a folder.
CASES = [
    ('UserKnownHostsFile "~/My Keys/known hosts" ~/kh2', (f"{HOME}/My Keys/known hosts", f"{HOME}/kh2"), None),
    ("UserKnownHostsFile '{d}/a b' {d}/c\\ d {d}/e", ("{d}/a b", "{d}/c d", "{d}/e"), None),
    ('UserKnownHostsFile "{d}/%h dir/kh" "{d}/${{KH_SPACED}}"', ("{d}/127.0.0.2 dir/kh", "{d}/x y"), None),
    ('GlobalKnownHostsFile "/etc/ssh/global one" /etc/ssh/g2', None, ("/etc/ssh/global one", "/etc/ssh/g2")),
    ("UserKnownHostsFile {d}/one {d}/two", ("{d}/one", "{d}/two"), None),
    ('UserKnownHostsFile "{d}/only one"', ("{d}/only one",), None),
    ("", (f"{HOME}/.ssh/known_hosts", f"{HOME}/.ssh/known_hosts2"), ("/etc/ssh/ssh_known_hosts",
                                                                      "/etc/ssh/ssh_known_hosts2")),
]


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KH_SPACED", "x y")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def printed(config: Path, key: str) -> str:
    out = subprocess.run([SSH, "-G", "-F", str(config), "h"], capture_output=True, text=True, check=True,
                         stdin=subprocess.DEVNULL, timeout=60).stdout
    return next(line.split(" ", 1)[1] for line in out.splitlines() if line.startswith(key + " "))


@pytest.mark.parametrize(("line", "user", "global_"), CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_file_lists_are_the_files_ssh_uses(tmp_path: Path, line: str, user, global_) -> None:
    """The files envdoctor reads (ssh -G path twice: fresh and from the cache; and the built-in
    parser) are the config's words expanded, and joined by spaces they are what ssh -G printed."""
    config = tmp_path / "config"
    config.write_text(f"Host h\n  HostName 127.0.0.2\n  {line.format(d=tmp_path)}\n")
    for _ in range(2):
        for target in (asyncio.run(HostResolver(str(config)).resolve("h")), resolve_builtin("h", config_file=str(config))):
            if user is not None:
                assert target.user_known_hosts_files == tuple(u.format(d=tmp_path) for u in user)
            if global_ is not None:
                assert target.global_known_hosts_files == global_
            assert " ".join(target.user_known_hosts_files) == printed(config, "userknownhostsfile")
            assert " ".join(target.global_known_hosts_files) == printed(config, "globalknownhostsfile")


def test_a_list_the_config_cannot_split_is_refused(tmp_path: Path) -> None:
    """Two lines whose files join to the same text ssh -G prints: envdoctor refuses in one
    line rather than guess which files ssh reads."""
    config = tmp_path / "config"
    config.write_text(f'Host h\n  UserKnownHostsFile "{tmp_path}/a b" {tmp_path}/c\n'
                      f'Host other\n  UserKnownHostsFile {tmp_path}/a "b {tmp_path}/c"\n')
    assert printed(config, "userknownhostsfile") == f"{tmp_path}/a b {tmp_path}/c"
    with pytest.raises(ConfigError, match="does not tell where its file names end") as caught:
        asyncio.run(HostResolver(str(config)).resolve("h"))
    assert "\n" not in str(caught.value)
