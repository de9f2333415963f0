"""Command-line destinations read as `ssh DEST` reads them (real `ssh -G` is the oracle), except
the contract's ``[user@]host:port`` (DESIGN: HOST is ``user@host[:port]``), which is read as
`ssh -p PORT [user@]host` would be; the inventory's ``host:port`` kept; and the ``host`` of
`envdoctor hosts` echoed as it was given (only a password masked) while other secrets stay
redacted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envdoctor.errors import ConfigError
from envdoctor.inventory import load_inventory, parse_command_line_destination, resolve_hosts

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs an OpenSSH client (the oracle)")

#: Destinations `ssh -G` accepts, read as ssh reads them: IPv6 literals with and without
#: brackets, scopes, the last `@`, URIs, a `%` in the destination, names with other colons.
ACCEPTED = [
    "[::1]", "::1", "fe80::1%eth0", "fe80::1%lo:22", "fe80::1%nosuch:22", "::1:22", "Gpu1", "a:b", "a:", "x]:1",
    "a:22:33", "u@h", "a@b@c", "u x@h", "ssh://u@h", "ssh://h:2222", "ssh://u;fp=x@h:ssh", "ssh://u%40x@h/",
    "SSH://h:2", "h%h", "FE80::1", "::FFFF:1.2.3.4",
]
#: The contract's host:port: (destination, what `ssh -G` is asked instead: -l/-p and the host).
CONTRACT = [
    ("gpu1:2222", ["-p", "2222", "gpu1"]), ("a:22", ["-p", "22", "a"]), ("user@a:22", ["-p", "22", "user@a"]),
    ("[::1]:22", ["-p", "22", "::1"]), ("1.2.3.4:2201", ["-p", "2201", "1.2.3.4"]), ("A:22", ["-p", "22", "A"]),
    ("[a]:22", ["-p", "22", "a"]), ("a%b:22", ["-p", "22", "a%b"]), ("u@[::ffff:127.0.0.1]:2222",
                                                                       ["-p", "2222", "u@::ffff:127.0.0.1"]),
]
#: Destinations `ssh -G` refuses: envdoctor must refuse them too (exit 2, one line).
REFUSED_BY_SSH = ["@h", "a b", "h;rm", "u;x@h", "u -x@h", "ssh://[::1]:2222", "ssh://h/path", "ssh://h:0",
                  "ssh://u'x@h", "a,b"]


def ssh_g(config: Path, dest: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ssh", "-G", "-F", str(config), *options, "--", dest], check=False, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=30)


def envdoctor(*args: str, without_ssh: bool = False, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if without_ssh:  # no ssh on PATH: the built-in parser answers
        env["PATH"] = os.path.dirname(sys.executable)
        assert shutil.which("ssh", path=env["PATH"]) is None
    env["ENVDOCTOR_SSH_G_CACHE"] = "off"
    return subprocess.run([sys.executable, "-m", "envdoctor", *args], check=False, capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL, timeout=120, cwd=cwd)


@pytest.fixture()
def empty_config(tmp_path: Path) -> Path:
    config = tmp_path / "ssh_config"
    config.write_text("")
    return config


@pytest.mark.parametrize("without_ssh", [False, True], ids=["ssh-G", "built-in"])
def test_hosts_json_agrees_with_ssh_G(empty_config: Path, without_ssh: bool) -> None:
    """hostname, port and user of `hosts --format json` are ssh -G's for every destination ssh
    accepts, and `ssh -G -p PORT host`'s for the contract's `host:port`, with ssh -G and without."""
    given = [*ACCEPTED, *(dest for dest, _ in CONTRACT)]
    asked = [[dest] for dest in ACCEPTED] + [ssh_args for _, ssh_args in CONTRACT]
    res = envdoctor("hosts", *given, "--ssh-config", str(empty_config), "--format", "json",
                    without_ssh=without_ssh)
    assert res.returncode == 0, res.stdout + res.stderr
    entries = json.loads(res.stdout)["hosts"]
    assert [e["host"] for e in entries] == given  # and the host is each destination as given
    for dest, args, entry in zip(given, asked, entries):
        answer = ssh_g(empty_config, args[-1], *args[:-1]).stdout
        want = dict(line.split(" ", 1) for line in answer.splitlines() if " " in line)
        assert (entry["hostname"], entry["port"], entry["user"]) == (want["hostname"], int(want["port"]),
                                                                     want["user"]), dest


@pytest.mark.parametrize("dest", REFUSED_BY_SSH)
def test_destinations_ssh_refuses_are_usage_errors(empty_config: Path, dest: str) -> None:
    """Where ssh -G fails, `hosts` reports an error for the destination and exits 2."""
    assert ssh_g(empty_config, dest).returncode != 0
    res = envdoctor("hosts", dest, "--ssh-config", str(empty_config), "--format", "json")
    assert res.returncode == 2, res.stdout + res.stderr
    (entry,) = json.loads(res.stdout)["hosts"]
    assert entry["error"] and "\n" not in entry["error"] and "Traceback" not in res.stderr


@pytest.mark.parametrize(("dest", "advice"), [
    ("127.0.0.1:ssh", "ssh://HOST:PORT"),
    ("root@127.0.0.2:22:33", "ssh://root@HOST:PORT"),
    ("127.0.0.1:", "HOST:PORT"),
    ("SSH://127.0.0.1:2", "lower case"),
])
def test_check_refuses_a_colon_that_is_no_port(empty_config: Path, dest: str, advice: str) -> None:
    """A command that connects refuses a host name with a `:` that is not `host:port` (ssh would
    look up the whole name) in one line, exit 2, saying how to give a port; it never connects
    anywhere. (Every address here is 127.0.0.0/8, should a regression try to connect.)"""
    res = envdoctor("check", dest, "--ssh-config", str(empty_config))
    assert res.returncode == 2, res.stdout + res.stderr
    first = res.stderr.splitlines()[0]
    assert advice in first and "Traceback" not in res.stderr


@pytest.mark.parametrize(("dest", "target"), [
    ("root@127.0.0.1:2222", ("127.0.0.1", "root", 2222)),
    ("127.0.0.1:2201", ("127.0.0.1", None, 2201)),
    ("[::1]:2201", ("::1", None, 2201)),
    ("ops@[127.0.0.1]:22", ("127.0.0.1", "ops", 22)),
    ("ssh://root@127.0.0.1:2222", ("127.0.0.1", "root", 2222)),
    ("::1", ("::1", None, None)),
])
def test_the_contracts_host_port_is_host_and_port(empty_config: Path, dest: str, target: tuple) -> None:
    """DESIGN's HOST `user@host[:port]`: check and fix connect to that host and port."""
    (spec,) = resolve_hosts([dest], load_inventory(None), ssh_config_files=[str(empty_config)])
    assert spec.ssh is not None and (spec.ssh.host, spec.ssh.user, spec.ssh.port) == target
    with pytest.raises(ConfigError, match="out of range"):
        resolve_hosts(["root@127.0.0.1:70000"], load_inventory(None), ssh_config_files=[str(empty_config)])


def test_a_host_line_naming_host_port_is_followed(tmp_path: Path) -> None:
    """When the SSH config itself has `Host gpu1:2222`, ssh uses that block, and so does envdoctor."""
    config = tmp_path / "ssh_config"
    config.write_text("Host gpu1:2222\n  HostName 127.0.0.1\n  Port 2222\n")
    (spec,) = resolve_hosts(["gpu1:2222"], load_inventory(None), ssh_config_files=[str(config)])
    assert spec.ssh is not None and (spec.ssh.host, spec.ssh.port) == ("gpu1:2222", None)
    res = envdoctor("hosts", "gpu1:2222", "--ssh-config", str(config), "--format", "json")
    entry = json.loads(res.stdout)["hosts"][0]
    want = dict(ln.split(" ", 1) for ln in ssh_g(config, "gpu1:2222").stdout.splitlines() if " " in ln)
    assert (entry["hostname"], entry["port"]) == (want["hostname"], int(want["port"])) == ("127.0.0.1", 2222)


def test_inventory_keeps_its_documented_host_port(tmp_path: Path, empty_config: Path) -> None:
    """The inventory's `ssh = "root@10.0.0.5:2222"` (README) still means port 2222: the plan is
    what `ssh -l root -p 2222 10.0.0.5` resolves."""
    (tmp_path / "envdoctor.toml").write_text('[hosts.ct200]\nssh = "root@10.0.0.5:2222"\n'
                                             '[hosts.v6]\nssh = "[::1]:2201"\n')
    res = envdoctor("hosts", "ct200", "v6", "--ssh-config", str(empty_config), "--format", "json", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    ct200, v6 = json.loads(res.stdout)["hosts"]
    assert (ct200["host"], ct200["hostname"], ct200["port"], ct200["user"]) == ("ct200", "10.0.0.5", 2222, "root")
    assert (v6["hostname"], v6["port"]) == ("::1", 2201)


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_hosts_echoes_the_destination_as_given(empty_config: Path, fmt: str) -> None:
    """`ssh://u@h` and `u@h` come back as typed (the user is no secret), in JSON and text."""
    dests = ["ssh://u@h", "u@h", "ssh://alice;fp=x@gpu.example:2222", "ssh://deploy@gpu.example"]
    res = envdoctor("hosts", *dests, "--ssh-config", str(empty_config), "--format", fmt)
    assert res.returncode == 0, res.stdout + res.stderr
    if fmt == "json":
        assert [e["host"] for e in json.loads(res.stdout)["hosts"]] == dests
    else:
        headings = [line for line in res.stdout.splitlines() if line and not line.startswith((" ", "resolved by"))]
        assert headings == dests
    assert "***" not in res.stdout


@pytest.mark.parametrize("dest", ["ssh://u:hunter2pw@127.0.0.1", "u:hunter2pw@127.0.0.1",
                                  "ssh://u%3ahunter2pw@127.0.0.1"])
def test_a_password_in_a_destination_is_refused_and_never_echoed(empty_config: Path, dest: str) -> None:
    """ssh would send `u:password` as the user name; envdoctor refuses it (exit 2, one line) and
    the password appears nowhere, in `hosts` (JSON and text) nor in `check`."""
    for args in (["hosts", dest, "--format", "json"], ["hosts", dest], ["check", dest]):
        res = envdoctor(*args, "--ssh-config", str(empty_config))
        assert res.returncode == 2, res.stdout + res.stderr
        assert "hunter2pw" not in res.stdout + res.stderr
        assert "password" in res.stdout + res.stderr and "Traceback" not in res.stderr
    entry = json.loads(envdoctor("hosts", dest, "--format", "json", "--ssh-config", str(empty_config)).stdout)
    assert entry["hosts"][0]["host"].startswith(("ssh://u", "u:"))


def test_other_fields_are_still_redacted(tmp_path: Path) -> None:
    """Only the echoed destination is exempt: a token-shaped value elsewhere in the plan (here a
    User from the config) is still masked."""
    token = "ghp_" + "A1b2C3d4" * 4
    config = tmp_path / "ssh_config"
    config.write_text(f"Host tok\n  User {token}\n")
    for fmt in ("json", "text"):
        res = envdoctor("hosts", "tok", "--ssh-config", str(config), "--format", fmt)
        assert res.returncode == 0 and token not in res.stdout, res.stdout


@pytest.mark.parametrize("text", ["", "u@", "@h", "-oProxyCommand=x", "a b", "h;rm"])
def test_command_line_parser_refuses_in_one_line(text: str) -> None:
    """What ssh refuses (and an empty host, which ssh would only fail to look up) is a ConfigError."""
    with pytest.raises(ConfigError) as caught:
        parse_command_line_destination(text)
    assert "\n" not in str(caught.value)


def test_a_bare_name_with_a_port_is_still_guarded(tmp_path: Path) -> None:
    """`ct20:22` is a typo of the alias `ct200` just as `ct20` is: refused with the nearest
    alias; a name the config defines, a dotted name and user@name take a port freely."""
    config = tmp_path / "ssh_config"
    config.write_text("Host ct200\n  HostName 127.0.0.1\n")
    with pytest.raises(ConfigError, match=r"unknown host 'ct20' \(in 'ct20:22'\).*did you mean 'ct200'"):
        resolve_hosts(["ct20:22"], load_inventory(None), ssh_config_files=[str(config)])
    specs = resolve_hosts(["ct200:2222", "gpu.example:22", "root@ct20:22", "[::1]:22"], load_inventory(None),
                          ssh_config_files=[str(config)])
    assert [(s.ssh.host, s.ssh.port) for s in specs if s.ssh] == [
        ("ct200", 2222), ("gpu.example", 22), ("ct20", 22), ("::1", 22)]
    assert [str(s.ssh) for s in specs] == ["ct200:2222", "gpu.example:22", "root@ct20:22", "[::1]:22"]


def test_an_inventory_host_with_a_port_is_refused_saying_why(tmp_path: Path, empty_config: Path) -> None:
    (tmp_path / "envdoctor.toml").write_text('[hosts.ct200]\nssh = "root@10.0.0.5:2222"\n')
    with pytest.raises(ConfigError, match="'ct200' is a host or group of the inventory; give it without a port"):
        resolve_hosts(["ct200:22"], load_inventory(str(tmp_path / "envdoctor.toml")),
                      ssh_config_files=[str(empty_config)])


def test_hosts_text_shows_the_login_and_key_settings_the_config_sets(tmp_path: Path) -> None:
    """A ProxyCommand is shown as itself (not as "proxy jump none"); IdentityAgent, CertificateFile,
    RevokedHostKeys, CASignatureAlgorithms, RequiredRSASize and HashKnownHosts appear when set."""
    config = tmp_path / "config"
    config.write_text("Host gpu1\n  HostName 10.0.0.7\n  IdentityAgent /run/agent.sock\n  CertificateFile /nowhere.pub\n"
                      "  RevokedHostKeys /etc/ssh/krl\n  ProxyCommand nc %h %p\n  CASignatureAlgorithms +ssh-rsa\n"
                      "  RequiredRSASize 3072\n  HashKnownHosts yes\nHost plain\n  HostName 10.0.0.8\n")
    res = envdoctor("hosts", "gpu1", "plain", "--ssh-config", str(config))
    assert res.returncode == 0, res.stdout + res.stderr
    gpu1, plain = res.stdout.split("\n\n")[:2]
    for label, value in (("proxy command", "nc %h %p"), ("identity agent", "/run/agent.sock"),
                         ("certificate files", "(none that exist)"), ("revoked host keys", "/etc/ssh/krl"),
                         ("CA signatures", "rsa-sha2-256,ssh-rsa"), ("required RSA size", "3072"),
                         ("hash known hosts", "yes")):
        assert any(line.split()[:len(label.split())] == label.split() and value in line for line in gpu1.splitlines()), \
            (label, gpu1)
    assert "proxy jump" not in gpu1 and "proxy jump         none" in plain
    assert not any(word in plain for word in ("identity agent", "revoked", "CA signatures", "RSA size"))
