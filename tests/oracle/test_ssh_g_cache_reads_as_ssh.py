"""The `ssh -G` cache is keyed by the files ssh really reads: an Include's `~` and relative path
are expanded against $HOME (as ssh's glob does, even when $HOME is not the account's home),
a Match exec anywhere in those files means no caching, and the ssh binary is known by more
than its modification time. Real `ssh -G` (same environment) is the oracle after each edit."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from envdoctor.transport import ssh_g_cache
from envdoctor.transport.openssh import HostResolver

SSH = shutil.which("ssh")
pytestmark = pytest.mark.skipif(SSH is None, reason="needs the OpenSSH client (the oracle)")


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$HOME set to a folder that is not the account's home, with a private cache."""
    folder = tmp_path / "home"
    (folder / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("ENVDOCTOR_SSH_G_CACHE", raising=False)
    return folder


def ssh_g(config: Path, dest: str, ssh: str | None = None) -> dict[str, str]:
    out = subprocess.run([ssh or SSH, "-G", "-F", str(config), "--", dest], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=60, check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def resolved(config: Path, dest: str, ssh: str | None = None) -> tuple[str, int, tuple[str, ...] | None]:
    """hostname, port and ProxyJump of one run (a fresh resolver: a new run, the cache kept)."""
    target = asyncio.run(HostResolver(str(config), ssh=ssh or SSH).resolve(dest))
    return target.hostname, target.port, target.proxy_jump


def agrees(config: Path, dest: str, ssh: str | None = None) -> bool:
    want = ssh_g(config, dest, ssh)
    jump = None if want.get("proxyjump", "none") == "none" else tuple(want["proxyjump"].split(","))
    return resolved(config, dest, ssh) == (want["hostname"], int(want["port"]), jump)


@pytest.mark.parametrize("include", ["extra.conf", "~/.ssh/extra.conf", "~/.ssh/ex*.conf"])
def test_an_edit_of_a_file_included_from_home_is_seen(home: Path, tmp_path: Path, include: str) -> None:
    """`Include extra.conf` (or `~/...`) reads $HOME/.ssh/extra.conf: a same-size edit there is
    a cache miss, so envdoctor keeps agreeing with ssh -G."""
    config = tmp_path / "config"
    config.write_text(f"Include {include}\nHost *\n  Port 2200\n")
    extra = home / ".ssh" / "extra.conf"
    extra.write_text("Host h\n  HostName 127.0.0.2\n")
    assert agrees(config, "h") and resolved(config, "h")[0] == "127.0.0.2"
    assert ssh_g_cache.config_state(SSH, str(config)).digest is not None  # (cached: a real test of the key)
    stat = extra.stat()
    extra.write_text("Host h\n  HostName 127.0.0.3\n")
    os.utime(extra, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert agrees(config, "h") and resolved(config, "h")[0] == "127.0.0.3"


def test_a_match_exec_in_a_file_included_from_home_is_never_cached(home: Path, tmp_path: Path) -> None:
    """A Match exec inside $HOME/.ssh/jump.conf: the answer follows the command every run."""
    flag = tmp_path / "on"
    flag.touch()
    config = tmp_path / "config"
    config.write_text("Include jump.conf\nHost h\n  HostName 127.0.0.2\n")
    (home / ".ssh" / "jump.conf").write_text(f'Match host h exec "test -e {flag}"\n  ProxyJump jumphost\n')
    assert ssh_g_cache.config_state(SSH, str(config)).digest is None
    assert agrees(config, "h") and resolved(config, "h")[2] == ("jumphost",)
    flag.unlink()
    assert agrees(config, "h") and resolved(config, "h")[2] is None


def test_home_itself_is_part_of_the_key(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two $HOMEs with different included files: each run answers as ssh -G does under it."""
    config = tmp_path / "config"
    config.write_text("Include extra.conf\n")
    (home / ".ssh" / "extra.conf").write_text("Host h\n  HostName 127.0.0.2\n")
    other = tmp_path / "other"
    (other / ".ssh").mkdir(parents=True)
    (other / ".ssh" / "extra.conf").write_text("Host h\n  HostName 127.0.0.4\n")
    assert agrees(config, "h")
    monkeypatch.setenv("HOME", str(other))
    assert agrees(config, "h") and resolved(config, "h")[0] == "127.0.0.4"


def test_an_ssh_binary_rewritten_in_place_is_a_miss(home: Path, tmp_path: Path) -> None:
    """The same path, size and modification time but new content (its ctime changes): the
    cached answer of the old binary is not replayed."""
    config = tmp_path / "config"
    config.write_text("Host h\n  HostName 127.0.0.2\n")
    wrapper = tmp_path / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec {SSH} -oPort=2201 "$@"\n')
    wrapper.chmod(0o755)
    assert agrees(config, "h", str(wrapper)) and resolved(config, "h", str(wrapper))[1] == 2201
    stat = wrapper.stat()
    with open(wrapper, "r+") as handle:  # (in place: the same inode)
        handle.write(f'#!/bin/sh\nexec {SSH} -oPort=2202 "$@"\n')
    os.utime(wrapper, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert wrapper.stat().st_size == stat.st_size and wrapper.stat().st_mtime_ns == stat.st_mtime_ns
    assert agrees(config, "h", str(wrapper)) and resolved(config, "h", str(wrapper))[1] == 2202


@pytest.mark.parametrize("include", ["inc-%h.conf", "${ENVDOCTOR_INC}/x.conf"])
def test_an_include_that_newer_ssh_expands_per_destination_is_not_cached(home: Path, tmp_path: Path,
                                                                         include: str) -> None:
    """OpenSSH after 9.2 expands % tokens and ${VAR} in Include (its files then depend on the
    destination): whichever ssh runs, such a config is not cached."""
    config = tmp_path / "config"
    config.write_text(f"Include {include}\nHost h\n  Port 1\n")
    state = ssh_g_cache.config_state(SSH, str(config))
    assert state.digest is None and "Include" in state.reason


@pytest.mark.timeout(60)  # (reading the FIFO would block forever)
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_read_set_that_cannot_be_confirmed_is_not_cached(home: Path, tmp_path: Path, kind: str) -> None:
    """An included FIFO (not opened for reading: it would block) or a folder: no cache."""
    target = home / ".ssh" / "odd.conf"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    config = tmp_path / "config"
    config.write_text("Include odd.conf\nHost h\n  Port 1\n")
    state = ssh_g_cache.config_state(SSH, str(config))
    assert state.digest is None and "odd.conf" in state.reason


@pytest.mark.parametrize(("include", "name"), [("extra.conf", "extra.conf"), ("~/.ssh/e*.conf", "extra.conf"),
                                               (r"ex\*tra.conf", "ex*tra.conf"), ("~", None)])
def test_the_built_in_parser_includes_the_files_ssh_includes(home: Path, tmp_path: Path, include: str,
                                                               name: str | None) -> None:
    """Without ssh, the same Include expansion ($HOME, backslash quoting): the same hostname
    as ssh -G under that $HOME."""
    from envdoctor.transport.ssh_config_resolve import resolve_builtin

    config = tmp_path / "config"
    config.write_text(f"Include {include}\nHost h\n  HostName 127.0.0.9\n")
    if name is not None:
        (home / ".ssh" / name).write_text("Host h\n  HostName 127.0.0.2\n")
    want = ssh_g(config, "h")["hostname"]
    assert want == ("127.0.0.9" if name is None else "127.0.0.2")
    assert resolve_builtin("h", config_file=str(config)).hostname == want
