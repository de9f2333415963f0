"""The cache of `ssh -G` answers: any input ssh reads changes the key; impure configs are never cached."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from envdoctor.transport import ssh_g_cache
from envdoctor.transport.openssh import HostResolver

SSH = shutil.which("ssh")
pytestmark = pytest.mark.skipif(SSH is None, reason="the OpenSSH client is not installed")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("ENVDOCTOR_SSH_G_CACHE", raising=False)


def digest(config: Path) -> str | None:
    return ssh_g_cache.config_state(SSH, str(config)).digest


def test_every_input_changes_the_key(tmp_path, monkeypatch):
    """Config text, an included file, a glob's matches and a referenced variable each change the key."""
    included = tmp_path / "inc"
    included.mkdir()
    (included / "a.conf").write_text("Host a\n  Port 1\n")
    config = tmp_path / "config"
    config.write_text(f"Include {included}/*.conf\nHost a\n  UserKnownHostsFile ${{ENVDOCTOR_T}}/kh\n")
    monkeypatch.setenv("ENVDOCTOR_T", "/one")
    first = digest(config)
    assert first is not None and digest(config) == first
    monkeypatch.setenv("ENVDOCTOR_T", "/two")
    second = digest(config)
    assert second != first
    (included / "a.conf").write_text("Host a\n  Port 2\n")
    third = digest(config)
    assert third != second
    (included / "b.conf").write_text("")
    fourth = digest(config)
    assert fourth != third
    config.write_text(config.read_text() + "# a comment\n")
    assert digest(config) != fourth


@pytest.mark.parametrize("text", ['Match exec "true"\n  Port 1\n', "Host a\n  CanonicalizeHostname yes\n",
                                  'Match host x !exec "false"\n', "Match localnetwork 10.0.0.0/8\n  Port 1\n"])
def test_impure_configs_are_not_cached(tmp_path, text):
    """Match exec (a command), hostname canonicalisation (DNS) and Match localnetwork (the
    interfaces, in OpenSSH after 9.2) make the answer impure: no cache."""
    config = tmp_path / "config"
    config.write_text(text)
    assert digest(config) is None


def test_warm_answer_is_the_same_and_a_change_is_a_miss(tmp_path):
    """A second run answers from the cache with the same plan; after an edit ssh -G is asked again."""
    config = tmp_path / "config"
    config.write_text("Host a\n  HostName 10.0.0.1\n  Port 2201\n")
    cold = asyncio.run(HostResolver(str(config)).plan("a"))
    entries = list((tmp_path / "cache" / "envdoctor" / "ssh-g").iterdir())
    assert len(entries) == 1
    warm = asyncio.run(HostResolver(str(config), ssh=SSH).plan("a"))
    assert warm == cold
    config.write_text("Host a\n  HostName 10.0.0.2\n  Port 2201\n")
    assert asyncio.run(HostResolver(str(config)).plan("a")).target.hostname == "10.0.0.2"


def test_an_entry_others_could_write_is_ignored(tmp_path):
    """A cached answer in a group-writable file is not trusted: ssh -G is asked instead."""
    config = tmp_path / "config"
    config.write_text("Host a\n  HostName 10.0.0.1\n")
    asyncio.run(HostResolver(str(config)).plan("a"))
    (entry,) = (tmp_path / "cache" / "envdoctor" / "ssh-g").iterdir()
    tampered = entry.read_text().replace("hostname 10.0.0.1", "hostname 10.6.6.6")
    entry.write_text(tampered)
    os.chmod(entry, 0o666)
    assert asyncio.run(HostResolver(str(config)).plan("a")).target.hostname == "10.0.0.1"
    # The same text in a private file is believed: the entry above was refused for its mode.
    entry.write_text(tampered)
    os.chmod(entry, 0o600)
    state = ssh_g_cache.config_state(SSH, str(config))
    assert "10.6.6.6" in (ssh_g_cache.load(state, "a", None, None) or "")


def test_prefetch_answers_as_one_resolve_at_a_time(tmp_path, monkeypatch):
    """Many destinations resolved at once (plain processes, 16 at a time) give exactly the
    plans that resolving each alone gives, with -l/-p, and a destination ssh refuses is
    left to resolve, which names it."""
    from envdoctor.errors import ConfigError
    from envdoctor.transport import openssh
    from envdoctor.transport.target import SSHOptions, SSHTarget

    monkeypatch.setenv("ENVDOCTOR_SSH_G_CACHE", "off")
    config = tmp_path / "config"
    config.write_text("".join(f"Host h{i}\n  HostName 10.0.{i}.1\n  Port {2000 + i}\n" for i in range(40))
                      + "Host *\n  User ops\n  Ciphers aes256-ctr\n")
    keys = [(f"h{i}", "u" if i % 3 == 0 else None, 22 if i % 5 == 0 else None) for i in range(40)]
    alone = [asyncio.run(HostResolver(str(config)).resolve(*key)) for key in keys]
    together = HostResolver(str(config))
    together.prefetch(keys)
    assert [together._done[key] for key in keys] == alone
    assert alone[3].user == "u" and alone[5].port == 22 and alone[1].ciphers == ("aes256-ctr",)

    targets = [SSHTarget("h1"), SSHTarget("bad host")]  # ssh: hostname contains invalid characters
    with pytest.raises(ConfigError, match="bad host"):
        openssh.resolve_all(targets, SSHOptions(config_files=(str(config),)))


def test_a_hanging_ssh_g_times_out_once(tmp_path, monkeypatch):
    """A Match exec that hangs: ssh -G is stopped after the timeout and not run a second time."""
    from envdoctor.errors import ConfigError
    from envdoctor.transport import openssh
    from envdoctor.transport.target import SSHOptions, SSHTarget

    monkeypatch.setattr(openssh, "SSH_G_TIMEOUT", 1.0)
    runs = tmp_path / "runs"
    config = tmp_path / "config"
    config.write_text(f'Match exec "echo run >> {runs}; sleep 20"\n  Port 2222\nHost slow\n  HostName 10.0.0.9\n')
    with pytest.raises(ConfigError, match="did not finish within 1s"):
        openssh.resolve_all([SSHTarget("slow")], SSHOptions(config_files=(str(config),)))
    assert runs.read_text() == "run\n"
