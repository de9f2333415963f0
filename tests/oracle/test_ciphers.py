"""Ciphers: the list ssh would offer, assembled as OpenSSH assembles it (`ssh -G` is the
oracle), and the order envdoctor offers it in (never outside that list)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from envdoctor.errors import ConfigError
from envdoctor.transport import ciphers
from envdoctor.transport.openssh import parse_ssh_g
from envdoctor.transport.ssh_config_resolve import resolve_builtin

VALUES = [
    "aes256-ctr", "aes128-ctr,aes128-ctr", "3des-cbc", "aes128-gcm@openssh.com,chacha20-poly1305@openssh.com",
    "+aes128-cbc", "+aes128-ctr,aes128-cbc", "+chacha20-poly1305@openssh.com",
    "^aes256-gcm@openssh.com", "^aes128-ctr,aes128-cbc",
    "-chacha*", "-aes*ctr,chacha20-poly1305@openssh.com", "-nosuch", "-*", "-aes1??-ctr", "-[a]es128-ctr",
    # refused by ssh's reader
    "nosuch", "+nosuch", "^nosuch", "aes*", "aes128-ctr,Aes256-ctr", "aes128-ctr,", "+", "aes128-ctr,,aes256-ctr",
    "aes128-ctr,,nosuch", "+,", "-,", "^aes128-ctr,,", "^,", ",", "aes128-ctr,,aes*-gcm*", "aes128-ctr,,!aes*",
    ",aes*", "aes256-ctr,aes128-ctr", "^aes256-ctr,aes128-ctr",
]


def ssh_g_ciphers(config: Path) -> tuple[str, ...] | None:
    """ssh -G's list; "refused" when ssh refuses the config; None when it prints no list."""
    proc = subprocess.run(["ssh", "-G", "-F", str(config), "x"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30)
    if proc.returncode != 0:
        return "refused"  # type: ignore[return-value]
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ciphers ")), None)
    return None if line is None else tuple(c for c in line.split(" ", 1)[1].split(",") if c)


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client as the oracle")
@pytest.mark.parametrize("value", VALUES)
def test_assembled_as_ssh_g_assembles(value, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(f"Host x\n  Ciphers {value}\n")
    expected = ssh_g_ciphers(config)
    if expected == "refused":
        with pytest.raises(ConfigError, match="Bad SSH2 cipher spec"):
            resolve_builtin("x", config_file=str(config))
        return
    assert ciphers.assemble(value) == expected
    assert parse_ssh_g(subprocess.run(["ssh", "-G", "-F", str(config), "x"], capture_output=True, text=True,
                                      timeout=30).stdout, "x").ciphers == expected
    assert resolve_builtin("x", config_file=str(config)).ciphers == expected


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client as the oracle")
def test_default_and_first_match_agree_with_ssh_g(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host x\n  Ciphers aes128-ctr\nHost *\n  Ciphers aes256-ctr\n")
    assert ssh_g_ciphers(config) == ("aes128-ctr",) == resolve_builtin("x", config_file=str(config)).ciphers
    config.write_text("Host x\n  Port 2\n")
    assert ssh_g_ciphers(config) == ciphers.OPENSSH_DEFAULT
    assert resolve_builtin("x", config_file=str(config)).ciphers is None  # (None: OpenSSH's defaults)


def test_a_bad_spec_in_an_unused_block_is_still_refused(tmp_path):
    """As ssh: the value is checked where it is read, active block or not."""
    config = tmp_path / "ssh_config"
    config.write_text("Host other\n  Ciphers nosuch\nHost x\n  Port 2\n")
    with pytest.raises(ConfigError, match=r"ssh_config:2: Bad SSH2 cipher spec 'nosuch'"):
        resolve_builtin("x", config_file=str(config))


def test_ssh_g_answer_keeps_an_empty_list_apart_from_none():
    base = "hostname h\nport 22\nuser u\n"
    assert parse_ssh_g(base, "h").ciphers is None
    assert parse_ssh_g(base + "ciphers \n", "h").ciphers == ()
    assert parse_ssh_g(base + "ciphers aes256-ctr,aes128-gcm@openssh.com\n", "h").ciphers == (
        "aes256-ctr", "aes128-gcm@openssh.com")


SUPPORTED = ("chacha20-poly1305@openssh.com", "aes256-gcm@openssh.com", "aes128-gcm@openssh.com", "aes256-ctr",
             "aes192-ctr", "aes128-ctr", "aes256-cbc", "aes128-cbc", "3des-cbc")


def test_offered_only_from_the_allowed_list_gcm_first_on_aes_hardware(monkeypatch):
    monkeypatch.setattr(ciphers, "aes_instructions", lambda: True)
    assert ciphers.offered(None, SUPPORTED, "h") == [
        "aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com", "aes128-ctr",
        "aes192-ctr", "aes256-ctr"]
    assert ciphers.offered(("aes256-ctr", "chacha20-poly1305@openssh.com"), SUPPORTED, "h") == [
        "aes256-ctr", "chacha20-poly1305@openssh.com"]  # no GCM allowed: none offered
    assert ciphers.offered(("aes256-ctr", "aes256-gcm@openssh.com"), SUPPORTED, "h") == [
        "aes256-gcm@openssh.com", "aes256-ctr"]
    monkeypatch.setattr(ciphers, "aes_instructions", lambda: False)
    assert ciphers.offered(None, SUPPORTED, "h") == list(ciphers.OPENSSH_DEFAULT)  # ssh's own order


def test_offered_drops_what_asyncssh_lacks_and_refuses_an_empty_choice():
    assert ciphers.offered(("aes192-cbc", "aes128-ctr"), SUPPORTED, "h") == ["aes128-ctr"]
    with pytest.raises(ConfigError, match="gpu1: none of the ciphers ssh would offer"):
        ciphers.offered((), SUPPORTED, "gpu1")
    with pytest.raises(ConfigError, match=r"\(aes192-cbc\) can be used"):
        ciphers.offered(("aes192-cbc",), SUPPORTED, "gpu1")


def test_aes_instructions_reads_this_cpu():
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = [ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.split(":")[0].strip() in ("flags", "Features")]
    ciphers.aes_instructions.cache_clear()
    assert ciphers.aes_instructions() == bool(flags and "aes" in flags[0])
