"""With $HOME elsewhere than the account's home (CI containers, `sudo -E`), envdoctor reads the
files plain `ssh` reads: the user config of the password database's home, then the system
file and its ssh_config.d, with only an Include's `~`/relative path under $HOME. Real
`ssh -G` is the oracle, run in a private mount namespace where a scratch folder stands in
for the account's home and for /etc/ssh (nothing outside the namespace changes)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client (the oracle)")

DESTINATIONS = ["acct", "inc", "sysbox", "plain"]

#: Runs inside the namespace: ssh -G and envdoctor (ssh -G path, built-in path, the host guard).
PROGRAM = textwrap.dedent("""
    import asyncio, json, subprocess, sys
    from envdoctor.errors import ConfigError
    from envdoctor.inventory import load_inventory, resolve_hosts
    from envdoctor.transport import openssh
    from envdoctor.transport.ssh_config_resolve import resolve_builtin
    from envdoctor.transport.target import SSHOptions

    def fields(hostname, port, user, jump, hashed):
        return [hostname, int(port), user, jump, hashed]

    found = {}
    for dest in sys.argv[1:]:
        out = subprocess.run(["ssh", "-G", dest], capture_output=True, text=True, check=True).stdout
        g = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
        jump = None if g.get("proxyjump", "none") == "none" else g["proxyjump"]
        found[dest] = {"ssh": fields(g["hostname"], g["port"], g["user"], jump, g["hashknownhosts"] == "yes")}
        resolver = openssh.default_resolver(SSHOptions(), fresh=True)
        for name, target in (("envdoctor", asyncio.run(resolver.resolve(dest))),
                             ("builtin", resolve_builtin(dest, config_file=openssh.config_file_for(SSHOptions())))):
            jump = ",".join(target.proxy_jump) if target.proxy_jump else None
            found[dest][name] = fields(target.hostname, target.port, target.user, jump, target.hash_known_hosts)
    guard = {}
    for name in ("acct", "homeonly"):
        try:
            resolve_hosts([name], load_inventory(None))
            guard[name] = True
        except ConfigError:
            guard[name] = False
    print(json.dumps({"found": found, "guard": guard}))
""")


def namespace_prefix() -> list[str] | None:
    """`unshare` with a private mount namespace (as root, else in a user namespace), or None."""
    for argv in (["unshare", "-m"], ["unshare", "-r", "-m"]):
        try:
            if subprocess.run([*argv, "true"], capture_output=True, timeout=30).returncode == 0:
                return argv
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o644)


def test_plain_ssh_and_envdoctor_read_the_same_files(tmp_path: Path) -> None:
    """User, ProxyJump, HostName and HashKnownHosts set in the account's config, in a file its
    relative Include finds under $HOME, and system-wide (ssh_config, ssh_config.d): ssh -G,
    envdoctor (ssh -G path and built-in parser) agree; the host guard knows the account's
    aliases, not those only in $HOME/.ssh/config (which ssh never reads)."""
    prefix = namespace_prefix()
    if prefix is None:
        pytest.skip("needs a private mount namespace (unshare -m)")
    account_home = pwd.getpwuid(os.getuid()).pw_dir
    account, home, etc = tmp_path / "account", tmp_path / "home", tmp_path / "etc-ssh"
    write(account / ".ssh" / "config", "Include extra.conf\nHost acct\n  User acctuser\n  HostName 127.0.0.2\n")
    write(home / ".ssh" / "config", "Host acct homeonly\n  User homeuser\n  HostName 127.0.0.3\n")
    write(home / ".ssh" / "extra.conf", "Host inc\n  User incuser\n  Port 2201\n")
    write(account / ".ssh" / "extra.conf", "Host inc\n  User wronguser\n")  # (not read: $HOME's is)
    write(etc / "ssh_config", "Include /etc/ssh/ssh_config.d/*.conf\nHost *\n  HashKnownHosts yes\n")
    write(etc / "ssh_config.d" / "10-fleet.conf", "Host sys*\n  User sysuser\n  ProxyJump jumper:2222\n")
    (account / ".ssh").chmod(0o700)
    (tmp_path / "work").mkdir()
    # The account's home stays as it is (this interpreter may live there) with our .ssh laid
    # over it (an overlay whose writes land in the scratch folder); /etc/ssh is replaced.
    script = (f"mount -t overlay overlay -o lowerdir={account_home},upperdir={account},workdir={tmp_path / 'work'} "
              f"{account_home} && mount --bind {etc} /etc/ssh || exit 77; exec \"$@\"")
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("ENVDOCTOR_SSH_G_CACHE", None)
    proc = subprocess.run([*prefix, "sh", "-c", script, "sh", sys.executable, "-c", PROGRAM, *DESTINATIONS],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
                          stdin=subprocess.DEVNULL)
    if proc.returncode == 77:
        pytest.skip(f"cannot lay a scratch ~/.ssh over the account's home here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout.splitlines()[-1])  # (the last line: logging may come before)
    found = answer["found"]
    assert found["acct"]["ssh"][:3] == ["127.0.0.2", 22, "acctuser"]  # the account's config, not $HOME's
    assert found["inc"]["ssh"][1:3] == [2201, "incuser"]  # its relative Include: under $HOME
    assert found["sysbox"]["ssh"][2:4] == ["sysuser", "jumper:2222"] and found["plain"]["ssh"][4] is True
    for dest in DESTINATIONS:
        assert found[dest]["envdoctor"] == found[dest]["ssh"], dest
        assert found[dest]["builtin"] == found[dest]["ssh"], dest
    assert answer["guard"] == {"acct": True, "homeonly": False}
