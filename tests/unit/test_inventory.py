"""Inventory parsing and HOST resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

from envdoctor.errors import ConfigError
from envdoctor.inventory import Overrides, load_inventory, parse_destination, resolve_hosts
from envdoctor.transport.ssh import SSHTarget


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "envdoctor.toml"
    path.write_text(text)
    return path


def test_groups_expand_and_cli_overrides_apply(tmp_path):
    """A group expands to its hosts in order; --venv overrides, --require adds."""
    inv = load_inventory(write(tmp_path, """
[hosts.ct200]
ssh = "root@10.0.0.5:2222"
venv = "/root/venv_a"
requires = ["tiktoken"]
[hosts.b300]
[groups]
all = ["ct200", "b300", "ct200"]
"""))
    specs = resolve_hosts(["all"], inv, Overrides(venv="/root/v2", requires=("transformers",)), ssh_config_files=[])
    assert [s.name for s in specs] == ["ct200", "b300"]
    assert specs[0].ssh == SSHTarget("10.0.0.5", "root", 2222)
    assert specs[0].venv == "/root/v2"
    assert specs[0].requires == ("tiktoken", "transformers")
    assert specs[1].ssh == SSHTarget("b300")


def test_unknown_host_and_ssh_alias(tmp_path):
    """A bare name must be an inventory host, a group or an SSH alias; `*` alone does not count."""
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  User root\nHost gpu-* !gpu-bad\n  Port 22\n")
    inv = load_inventory(None)
    assert resolve_hosts(["gpu-01"], inv, ssh_config_files=[str(config)])[0].ssh == SSHTarget("gpu-01")
    with pytest.raises(ConfigError, match="unknown host 'typo'"):
        resolve_hosts(["typo"], inv, ssh_config_files=[str(config)])
    with pytest.raises(ConfigError, match="unknown host 'gpu-bad'"):
        resolve_hosts(["gpu-bad"], inv, ssh_config_files=[str(config)])


def test_no_host_means_local():
    """Without HOST arguments the local machine is checked."""
    specs = resolve_hosts([], load_inventory(None))
    assert specs[0].name == "local" and specs[0].is_local


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("user@host", SSHTarget("host", "user")),
        ("user@host:2200", SSHTarget("host", "user", 2200)),
        ("host:22", SSHTarget("host", None, 22)),
        ("root@[::1]:2222", SSHTarget("::1", "root", 2222)),
    ],
)
def test_destinations(text, target):
    """user@host[:port] forms parse into a target."""
    assert parse_destination(text) == target


@pytest.mark.parametrize("text", ["user@", "a b", "host:99999", "@host", "host;rm -rf /"])
def test_bad_destinations_are_refused(text):
    """Malformed destinations are config errors, never passed to SSH."""
    with pytest.raises(ConfigError):
        parse_destination(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[hosts.a]\nvenv = 3\n", "hosts.a.venv must be a str"),
        ("[hosts.a]\nvnev = '/x'\n", "unknown key 'vnev'"),
        ("[hosts.a]\nrequires = ['tiktoken>>']\n", "not a valid requirement"),
        ("[groups]\ng = ['a', 'g']\n[hosts.a]\n", None),
        ("hosts = 3\n", "hosts must be a table"),
        ("[stages.gen]\nhost = 'a'\n", "needs a command"),
    ],
)
def test_malformed_inventory(tmp_path, text, message):
    """Wrong types, typos and bad requirements are config errors that name the key."""
    path = write(tmp_path, text)
    if message is None:
        inv = load_inventory(path)
        with pytest.raises(ConfigError, match="includes itself"):
            resolve_hosts(["g"], inv, ssh_config_files=[])
        return
    with pytest.raises(ConfigError, match=message):
        load_inventory(path)


def test_inventory_that_is_not_utf8(tmp_path):
    """A config file that is not UTF-8 is a clear config error."""
    path = tmp_path / "envdoctor.toml"
    path.write_bytes(b"[hosts.a]\nvenv = '\xff'\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_inventory(path)


def test_group_tables_mark_a_job_whose_hosts_must_agree(tmp_path):
    """[groups.NAME] with hosts and same = true sits beside the list form; both expand alike."""
    inv = load_inventory(write(tmp_path, """
[hosts.n1]
[hosts.n2]
[hosts.n3]
[groups]
all = ["n1", "n2", "n3"]
[groups.train]
hosts = ["n1", "n2"]
same = true
[groups.serve]
hosts = ["n3", "train"]
"""))
    assert inv.groups == {"all": ("n1", "n2", "n3"), "train": ("n1", "n2"), "serve": ("n3", "train")}
    assert inv.same_groups == frozenset({"train"})
    assert [s.name for s in resolve_hosts(["train"], inv, ssh_config_files=[])] == ["n1", "n2"]
    assert [s.name for s in resolve_hosts(["serve"], inv, ssh_config_files=[])] == ["n3", "n1", "n2"]
    assert inv.group_hosts("serve") == ("n3", "n1", "n2")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[groups.train]\nsame = true\n", "groups.train needs hosts"),
        ("[groups.train]\nhosts = ['a']\nsame = 'yes'\n", "groups.train.same must be a bool"),
        ("[groups.train]\nhosts = ['a']\nsmae = true\n", "unknown key 'smae'"),
        ("[groups.train]\nhosts = 'a'\n", "groups.train.hosts must be a list"),
        ("[groups]\ntrain = 'a'\n", "groups.train must be a list of host names or a table"),
        ("[hosts.a]\n[groups.a]\nhosts = ['a']\n", "'a' is both a host and a group"),
    ],
)
def test_malformed_group_tables_are_config_errors_naming_the_key(tmp_path, text, message):
    """A group table without hosts, with a wrong type or an unknown key is a one-line config error."""
    with pytest.raises(ConfigError, match=message):
        load_inventory(write(tmp_path, text))


def test_a_group_that_includes_itself_is_refused_when_expanded(tmp_path):
    """group_hosts follows nested groups and refuses a loop, as resolve_hosts does."""
    inv = load_inventory(write(tmp_path, "[groups.a]\nhosts = ['b']\nsame = true\n[groups]\nb = ['a']\n"))
    with pytest.raises(ConfigError, match="includes itself"):
        inv.group_hosts("a")
