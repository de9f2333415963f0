"""Two loopback sshds with different host keys: envdoctor connects exactly where `ssh` does,
and refuses a changed, revoked or alias-mismatched host key with and without --accept-new.

Which server a connection reached is proven by its host key: each case's known_hosts trusts
only the server the case should reach (under the name OpenSSH looks it up by), with
StrictHostKeyChecking yes, so a connection to the other server is refused. Real `ssh`
(BatchMode) is run on the same files as the oracle.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.faults_support import hosts_by_name, results_by_id
from tests.sshd import SSHServer, keygen, start_sshd, wait_for_banner

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server_b(sshd: SSHServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """A second sshd on 127.0.0.1 with its own host key, accepting the first one's client key."""
    server = start_sshd(tmp_path_factory.mktemp("sshd_b"), [], client_key=sshd.client_key)
    yield server
    server.stop()


def host_key(server: SSHServer) -> str:
    """``type base64`` of a server's host key."""
    return " ".join((server.root / "host_ed25519.pub").read_text().split()[:2])


@pytest.fixture()
def env(sshd: SSHServer, server_b: SSHServer, tmp_path: Path) -> dict[str, str]:
    """Template values: ports A and B, the client key, the user, the case folder."""
    (tmp_path / "keys").mkdir()
    return {"A": str(sshd.port), "B": str(server_b.port), "key": str(sshd.client_key), "user": sshd.user,
            "d": str(tmp_path), "kh": str(tmp_path / "known_hosts")}


def write_config(env: dict[str, str], body: str, *, strict: str = "yes") -> Path:
    """The case's blocks, then defaults for every host (first match wins, so the case decides)."""
    text = body + (
        "Host * !inc\n  IdentityFile {key}\n"
        "Host *\n  User {user}\n  IdentitiesOnly yes\n  UserKnownHostsFile {kh}\n"
        f"  StrictHostKeyChecking {strict}\n  BatchMode yes\n"
    )
    config = Path(env["d"]) / "ssh_config"
    config.write_text(text.format(**env))
    return config


def ssh_connects(config: Path, dest: str, *options: str) -> bool:
    proc = subprocess.run(["ssh", "-F", str(config), *options, dest, "true"], capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    return proc.returncode == 0


def reachable(run_cli, config: Path, dest: str, *args: str, env: dict[str, str] | None = None) -> tuple[dict, str]:
    """host.reachable of one envdoctor check, and its stderr."""
    res = run_cli("check", dest, "--ssh-config", str(config), "--only", "host.reachable", "--format", "json", *args,
                  env=env)
    assert res.exit_status in (0, 1), res.stderr
    return results_by_id(json.loads(res.stdout)["hosts"][0])["host.reachable"], res.stderr


B_ONLY = "[127.0.0.1]:{B} " + "{key_b}\n"

ROUTES = [
    # (case id, config blocks, destination, known_hosts text)
    ("comment-after-host-patterns",
     "Host prod   # replaces staging\n  HostName 127.0.0.1\n  Port {A}\nHost staging\n  HostName 127.0.0.1\n  Port {B}\n",
     "staging", B_ONLY),
    ("comma-list-is-one-literal-pattern",
     "Host gpu1,gpu2\n  HostName 127.0.0.1\n  Port {A}\nHost gpu1\n  HostName 127.0.0.1\n  Port {B}\n", "gpu1", B_ONLY),
    ("trailing-comment-on-port", "Host tc\n  HostName 127.0.0.1\n  Port {B} # the second server\n", "tc", B_ONLY),
    ("negated-elsewhere-but-own-block",
     "Host * !bastion\n  HostName 127.0.0.1\n  Port {A}\nHost bastion\n  HostName 127.0.0.1\n  Port {B}\n",
     "bastion", B_ONLY),
    ("alias-only-under-match-originalhost", "Match originalhost mo\n  HostName 127.0.0.1\n  Port {B}\n", "mo", B_ONLY),
    ("match-exec-with-token-and-equals",
     'Match originalhost mx exec "test %n = mx"\n  HostName 127.0.0.1\n  Port {B}\n'
     "Host mx\n  HostName 127.0.0.1\n  Port {A}\n", "mx", B_ONLY),
    ("identity-percent-h-after-include",
     "Host inc\n  IdentityFile {d}/keys/id_%h\nInclude {d}/inc.conf\n", "inc", B_ONLY),
    ("missing-identity-file-skipped",
     "Host idm\n  HostName 127.0.0.1\n  Port {B}\n  IdentityFile {d}/keys/id_old\n", "idm", B_ONLY),
    ("known-hosts-file-with-tokens",
     "Host kt\n  HostName 127.0.0.1\n  Port {B}\n  UserKnownHostsFile {d}/kh/%h_%p\n", "kt", ""),
    ("host-key-alias", "Host al\n  HostName 127.0.0.1\n  Port {B}\n  HostKeyAlias myalias\n", "al",
     "myalias {key_b}\n"),
    ("proxyjump-uri-through-a-to-b",
     "Host pj\n  HostName 127.0.0.1\n  Port {B}\n  ProxyJump ssh://{user}@127.0.0.1:{A}\n", "pj",
     "[127.0.0.1]:{B} {key_b}\n[127.0.0.1]:{A} {key_a}\n"),
]


@pytest.mark.parametrize(("config_body", "dest", "known"), [r[1:] for r in ROUTES], ids=[r[0] for r in ROUTES])
def test_route_reaches_the_server_ssh_reaches(run_cli, sshd, server_b, env, config_body, dest, known):
    """envdoctor logs in to the server `ssh` logs in to (proven by the host key it accepts)."""
    values = {**env, "key_a": host_key(sshd), "key_b": host_key(server_b)}
    Path(env["kh"]).write_text(known.format(**values))
    (Path(env["d"]) / "kh").mkdir()
    (Path(env["d"]) / "kh" / f"127.0.0.1_{server_b.port}").write_text(f"[127.0.0.1]:{server_b.port} {values['key_b']}\n")
    (Path(env["d"]) / "inc.conf").write_text(f"Host inc\n  HostName 127.0.0.1\n  Port {server_b.port}\n")
    (Path(env["d"]) / "keys" / "id_127.0.0.1").write_bytes(sshd.client_key.read_bytes())
    (Path(env["d"]) / "keys" / "id_127.0.0.1").chmod(0o600)
    config = write_config(env, config_body)
    assert ssh_connects(config, dest), "the oracle: ssh itself reaches server B"
    result, stderr = reachable(run_cli, config, dest)
    assert result["status"] == "pass", (result, stderr)
    assert not (Path(env["d"]) / "kh" / "%h_%p").exists()


REFUSALS = [
    ("changed-key", "Host ch\n  HostName 127.0.0.1\n  Port {B}\n", "ch", "[127.0.0.1]:{B} {key_a}\n",
     "host-key-changed"),
    ("revoked-on-non-default-port", "Host rv\n  HostName 127.0.0.1\n  Port {B}\n", "rv",
     "@revoked [127.0.0.1]:{B} {key_b}\n", "host-key"),
    ("alias-mismatch", "Host am\n  HostName 127.0.0.1\n  Port {B}\n  HostKeyAlias myalias\n", "am",
     "myalias {key_a}\n[127.0.0.1]:{B} {key_b}\n", "host-key-changed"),
    ("changed-key-in-token-file",
     "Host tk\n  HostName 127.0.0.1\n  Port {B}\n  UserKnownHostsFile {d}/kh/%h_%p\n", "tk", "", "host-key-changed"),
]


@pytest.mark.parametrize("accept_new", [False, True], ids=["strict", "accept-new"])
@pytest.mark.parametrize(("config_body", "dest", "known", "kind"), [r[1:] for r in REFUSALS],
                         ids=[r[0] for r in REFUSALS])
def test_bad_host_key_is_refused(run_cli, sshd, server_b, env, config_body, dest, known, kind, accept_new):
    """A changed, revoked or alias-mismatched key is refused, as ssh refuses it, and nothing is
    recorded; a changed key (alias-mismatched too) is its own kind of problem."""
    values = {**env, "key_a": host_key(sshd), "key_b": host_key(server_b)}
    kh_dir = Path(env["d"]) / "kh"
    kh_dir.mkdir()
    (kh_dir / f"127.0.0.1_{server_b.port}").write_text(f"[127.0.0.1]:{server_b.port} {values['key_a']}\n")
    Path(env["kh"]).write_text(known.format(**values))
    config = write_config(env, config_body, strict="accept-new" if accept_new else "yes")
    before = {p: p.read_bytes() for p in [Path(env["kh"]), *kh_dir.iterdir()]}
    assert not ssh_connects(config, dest), "the oracle: ssh refuses this key too"
    result, stderr = reachable(run_cli, config, dest, *(["--accept-new"] if accept_new else []))
    assert result["status"] == "error" and result["details"]["kind"] == kind, (result, stderr)
    assert {p: p.read_bytes() for p in [Path(env["kh"]), *kh_dir.iterdir()]} == before
    assert sorted(p.name for p in kh_dir.iterdir()) == [f"127.0.0.1_{server_b.port}"], "no file named after a token"


def test_accept_new_from_config_records_in_the_expanded_file(run_cli, server_b, env):
    """StrictHostKeyChecking accept-new in the config accepts an unknown key without the flag and
    records it in the first UserKnownHostsFile, tokens expanded."""
    config = write_config(env, "Host an\n  HostName 127.0.0.1\n  Port {B}\n  UserKnownHostsFile {d}/kh/%h_%p {kh}\n",
                          strict="accept-new")
    result, stderr = reachable(run_cli, config, "an")
    assert result["status"] == "pass", (result, stderr)
    recorded = Path(env["d"]) / "kh" / f"127.0.0.1_{server_b.port}"
    assert recorded.read_text().split()[1:3] == host_key(server_b).split()
    assert "host_key_accepted" in stderr
    assert not Path(env["kh"]).exists()


def test_strict_no_needs_the_confirmation_flag(run_cli, server_b, env):
    """`StrictHostKeyChecking no` is treated as yes unless --insecure-no-host-key-check confirms it (then logged)."""
    config = write_config(env, "Host sn\n  HostName 127.0.0.1\n  Port {B}\n", strict="no")
    refused, _ = reachable(run_cli, config, "sn")
    assert refused["details"]["kind"] == "host-key"
    assert "insecure-no-host-key-check" in refused["message"]
    accepted, stderr = reachable(run_cli, config, "sn", "--insecure-no-host-key-check")
    assert accepted["status"] == "pass", accepted
    assert "host_key_check_disabled" in stderr


def test_known_hosts_none_is_not_the_default_file(run_cli, server_b, env):
    """`UserKnownHostsFile none` reads no user file (never ~/.ssh/known_hosts): the key is unknown."""
    config = write_config(env, "Host kn\n  HostName 127.0.0.1\n  Port {B}\n  UserKnownHostsFile none\n")
    result, _ = reachable(run_cli, config, "kn")
    assert result["details"]["kind"] == "host-key"


@pytest.fixture()
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(5)
    for sock in held:
        sock.close()
    listener.close()


def test_connect_timeout_comes_from_the_config(run_cli, env, silent_port):
    """ConnectTimeout in the config bounds the connection unless --connect-timeout is given."""
    env = {**env, "S": str(silent_port)}
    config = write_config(env, "Host slow\n  HostName 127.0.0.1\n  Port {S}\n  ConnectTimeout 1\n")
    started = time.monotonic()
    result, _ = reachable(run_cli, config, "slow")
    assert "within 1s" in result["message"], result
    assert time.monotonic() - started < 12
    overridden, _ = reachable(run_cli, config, "slow", "--connect-timeout", "2")
    assert "within 2s" in overridden["message"], overridden


def test_bad_ssh_config_is_exit_2_naming_the_line(run_cli, env):
    """An unbalanced quote is a one-line usage error naming the file and line, not a traceback."""
    config = Path(env["d"]) / "ssh_config"
    config.write_text('Host good\n  Port 22\nHost bad"\n  Port 1\n')
    res = run_cli("check", "good", "--ssh-config", str(config))
    assert res.exit_status == 2
    assert "Traceback" not in res.stderr
    assert f"{config} line 3" in res.stderr or f"{config}:3" in res.stderr, res.stderr


def test_typo_gets_the_nearest_alias(run_cli, env):
    """A name the config does not define is refused, with the closest alias suggested."""
    config = write_config(env, "Host staging\n  HostName 127.0.0.1\n")
    res = run_cli("check", "stagin", "--ssh-config", str(config))
    assert res.exit_status == 2
    assert "unknown host 'stagin'" in res.stderr and "did you mean 'staging'" in res.stderr


def test_hosts_command_plans_like_ssh_g(run_cli, sshd, server_b, env):
    """`envdoctor hosts --format json` gives each destination's plan (jump hops resolved) and
    exit 2 with an error entry for a destination that cannot be resolved."""
    config = write_config(env, "Host pj\n  HostName 127.0.0.1\n  Port {B}\n  ProxyJump bastion\n  ConnectTimeout 7\n"
                               "Host bastion\n  HostName 127.0.0.1\n  Port {A}\n")
    res = run_cli("hosts", "pj", "--ssh-config", str(config), "--format", "json")
    assert res.exit_status == 0, res.stderr
    document = json.loads(res.stdout)
    assert (document["schema"], document["command"], document["exit_status"]) == (1, "hosts", 0)
    plan = hosts_by_name(res.stdout)["pj"]
    assert plan == {
        "host": "pj", "hostname": "127.0.0.1", "port": server_b.port, "user": sshd.user,
        "identity_files": [str(sshd.client_key)],
        "proxy_jump": [{"hostname": "127.0.0.1", "port": sshd.port, "user": sshd.user}],
        "known_hosts_files": [env["kh"], "/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"],
        "strict_host_key_checking": "true", "connect_timeout": 7.0,
    }
    text = run_cli("hosts", "pj", "--ssh-config", str(config))
    assert f"[{config}:3]" in text.stdout and "ssh -G" in text.stdout
    Path(config).write_text(Path(config).read_text() + "Host broken\"\n")
    bad = run_cli("hosts", "pj", "--ssh-config", str(config), "--format", "json")
    assert bad.exit_status == 2
    assert "error" in hosts_by_name(bad.stdout)["pj"]


def test_route_proof_fails_for_the_wrong_server(sshd, server_b, env):
    """The method can fail: known_hosts trusting only server A's key refuses a route to B (ssh agrees)."""
    Path(env["kh"]).write_text(f"[127.0.0.1]:{sshd.port} {host_key(sshd)}\n")
    config = write_config(env, "Host wrong\n  HostName 127.0.0.1\n  Port {B}\n")
    assert shutil.which("ssh") and not ssh_connects(config, "wrong")


@pytest.fixture(scope="module")
def host_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A host certificate authority's private key."""
    path = tmp_path_factory.mktemp("host_ca") / "ca"
    keygen(path)
    return path


@pytest.fixture(scope="module")
def server_c(sshd: SSHServer, host_ca: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """A third sshd whose host key is certified by ``host_ca`` for 127.0.0.1."""
    server = start_sshd(tmp_path_factory.mktemp("sshd_c"), [], client_key=sshd.client_key, host_certificate_ca=host_ca)
    yield server
    server.stop()


def test_cert_authority_vouches_for_the_host(run_cli, server_c, host_ca, env, tmp_path):
    """A host certificate from a CA that known_hosts trusts (@cert-authority) is accepted, as ssh
    accepts it; one from another CA is refused, with --accept-new too, and nothing is recorded."""
    ca_pub = " ".join(Path(f"{host_ca}.pub").read_text().split()[:2])
    known = Path(env["kh"])
    known.write_text(f"@cert-authority [127.0.0.1]:{server_c.port} {ca_pub}\n")
    config = write_config({**env, "C": str(server_c.port)}, "Host ca\n  HostName 127.0.0.1\n  Port {C}\n")
    assert ssh_connects(config, "ca"), "the oracle: ssh trusts the certificate"
    result, stderr = reachable(run_cli, config, "ca")
    assert result["status"] == "pass", (result, stderr)
    other_pub = " ".join(keygen(tmp_path / "other_ca").split()[:2])
    known.write_text(f"@cert-authority [127.0.0.1]:{server_c.port} {other_pub}\n")
    before = known.read_bytes()
    assert not ssh_connects(config, "ca")
    refused, _ = reachable(run_cli, config, "ca", "--accept-new")
    assert refused["details"]["kind"] == "host-key", refused
    assert known.read_bytes() == before


CIPHER_CASES = [
    # (Ciphers line, whether ssh connects: the test sshd offers OpenSSH's defaults, no CBC)
    ("aes256-ctr", True),
    ("-aes*-gcm@openssh.com,aes*-ctr", True),  # chacha20-poly1305 alone
    ("aes128-cbc", False),
]


@pytest.mark.parametrize(("ciphers_line", "connects"), CIPHER_CASES, ids=[c[0] for c in CIPHER_CASES])
def test_ciphers_are_those_ssh_would_offer(run_cli, sshd, env, ciphers_line, connects):
    """Only the ciphers ssh would offer are offered: where ssh finds no cipher in common with
    the server, envdoctor does not connect either (asyncssh's defaults would have)."""
    Path(env["kh"]).write_text(f"[127.0.0.1]:{sshd.port} {host_key(sshd)}\n")
    config = write_config(env, f"Host ci\n  HostName 127.0.0.1\n  Port {{A}}\n  Ciphers {ciphers_line}\n")
    assert ssh_connects(config, "ci") is connects
    result, _ = reachable(run_cli, config, "ci")
    assert (result["status"] == "pass") is connects, result


@pytest.mark.parametrize(("ciphers_line", "negotiated"), [
    ("aes256-ctr", "aes256-ctr"),
    ("chacha20-poly1305@openssh.com,aes256-gcm@openssh.com", None),  # GCM first on AES hardware, else chacha
])
def test_negotiated_cipher_is_one_ssh_allows(sshd, env, ciphers_line, negotiated):
    import asyncio

    from envdoctor.transport import ciphers
    from envdoctor.transport.ssh import SSHTransport
    from envdoctor.transport.target import SSHOptions, SSHTarget

    Path(env["kh"]).write_text(f"[127.0.0.1]:{sshd.port} {host_key(sshd)}\n")
    config = write_config(env, f"Host ci\n  HostName 127.0.0.1\n  Port {{A}}\n  Ciphers {ciphers_line}\n")

    async def cipher() -> str:
        transport = SSHTransport("ci", SSHTarget("ci"), SSHOptions(config_files=(str(config),)))
        await transport.connect()
        try:
            assert transport._conn is not None
            return str(transport._conn.get_extra_info("send_cipher"))
        finally:
            await transport.close()

    expected = negotiated or ("aes256-gcm@openssh.com" if ciphers.aes_instructions()
                              else "chacha20-poly1305@openssh.com")
    assert asyncio.run(cipher()) == expected


def test_no_usable_cipher_is_a_failed_connection_not_a_login(run_cli, sshd, env):
    """`Ciphers -*` leaves ssh nothing to offer: the host is not reached, and the reason says why."""
    Path(env["kh"]).write_text(f"[127.0.0.1]:{sshd.port} {host_key(sshd)}\n")
    config = write_config(env, "Host ci\n  HostName 127.0.0.1\n  Port {A}\n  Ciphers -*\n")
    assert not ssh_connects(config, "ci")
    result, _ = reachable(run_cli, config, "ci")
    assert result["status"] == "error", result
    assert "none of the ciphers ssh would offer" in result["message"], result


# Old servers, each allowing only what OpenSSH's client no longer offers by default in one
# respect: SHA-1 key exchange, an RSA host key signed with SHA-1 (ssh-rsa), a SHA-1 MAC with
# a cipher that needs one. asyncssh's own defaults would reach all three.
LEGACY_SERVERS = {
    "kex": ("ed25519", ["KexAlgorithms diffie-hellman-group14-sha1"]),
    "host-key": ("rsa", ["HostKeyAlgorithms ssh-rsa"]),
    "mac": ("ed25519", ["Ciphers aes128-ctr", "MACs hmac-sha1"]),
}


@pytest.fixture(scope="module")
def legacy_servers(sshd: SSHServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SSHServer]]:
    servers: dict[str, SSHServer] = {}
    try:
        for name, (key_type, lines) in LEGACY_SERVERS.items():
            servers[name] = start_sshd(tmp_path_factory.mktemp(f"sshd_{name}"), [], client_key=sshd.client_key,
                                       host_key_type=key_type, extra_config=lines)
        yield servers
    finally:
        for server in servers.values():
            server.stop()


ALGORITHM_CASES = [
    # (old server, the client's config line, whether ssh connects)
    ("kex", "", False),
    ("kex", "KexAlgorithms +diffie-hellman-group14-sha1", True),
    ("host-key", "", False),
    ("host-key", "HostKeyAlgorithms +ssh-rsa", True),
    ("mac", "", True),
    ("mac", "MACs hmac-sha2-256,hmac-sha2-512", False),
    ("mac", "MACs -hmac-sha1*", False),
]


@pytest.mark.parametrize(("server", "line", "connects"), ALGORITHM_CASES,
                         ids=[f"{c[0]}:{c[1] or 'defaults'}" for c in ALGORITHM_CASES])
def test_algorithms_are_those_ssh_would_offer(run_cli, legacy_servers, env, server, line, connects):
    """KexAlgorithms, HostKeyAlgorithms and MACs: where ssh finds nothing in common with an old
    server, envdoctor does not connect either; where the config allows the old algorithm, both do."""
    target = legacy_servers[server]
    key = next(target.root.glob("host_*.pub")).read_text().split()[:2]
    Path(env["kh"]).write_text(f"[127.0.0.1]:{target.port} {' '.join(key)}\n")
    body = f"Host old\n  HostName 127.0.0.1\n  Port {target.port}\n" + (f"  {line}\n" if line else "")
    config = write_config(env, body)
    assert ssh_connects(config, "old") is connects, "the oracle"
    result, stderr = reachable(run_cli, config, "old")
    assert (result["status"] == "pass") is connects, (result, stderr)
    if not connects:
        assert result["details"]["kind"] != "host-key", result  # no algorithm in common, not a changed key
        if server != "host-key":  # (that sshd resets the connection before saying why)
            assert "KexAlgorithms +NAME" in result["fix"], result


PUBKEY_CASES = [
    # (the client's config line, whether ssh logs in with the ed25519 client key)
    ("PubkeyAcceptedAlgorithms ssh-ed25519", True),
    ("PubkeyAcceptedKeyTypes ssh-ed25519,rsa-sha2-512", True),
    ("PubkeyAcceptedAlgorithms rsa-sha2-512,rsa-sha2-256", False),
    ("PubkeyAcceptedAlgorithms -ssh-ed25519*", False),
]


@pytest.mark.parametrize(("line", "logs_in"), PUBKEY_CASES, ids=[c[0] for c in PUBKEY_CASES])
def test_client_key_is_offered_only_as_ssh_offers_it(run_cli, sshd, env, line, logs_in):
    """PubkeyAcceptedAlgorithms: a key ssh would not sign with is not used to log in either."""
    assert sshd.client_key.with_suffix(".pub").read_text().startswith("ssh-ed25519 ")
    Path(env["kh"]).write_text(f"[127.0.0.1]:{sshd.port} {host_key(sshd)}\n")
    config = write_config(env, f"Host pk\n  HostName 127.0.0.1\n  Port {sshd.port}\n  {line}\n")
    assert ssh_connects(config, "pk") is logs_in, "the oracle"
    result, stderr = reachable(run_cli, config, "pk")
    assert (result["status"] == "pass") is logs_in, (result, stderr)
    if not logs_in:
        assert result["details"]["kind"] != "host-key", result


#: A ProxyCommand helper: records its arguments (one a line), then relays stdin/stdout to host:port.
PROXY_RELAY = r'''import os, socket, sys, threading
host, port, record = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(record, "w") as out:
    out.write("\n".join(sys.argv[4:]) + "\n")
sock = socket.create_connection((host, port))
def upstream():
    while True:
        data = os.read(0, 65536)
        if not data:
            sock.shutdown(socket.SHUT_WR)
            return
        sock.sendall(data)
threading.Thread(target=upstream, daemon=True).start()
while True:
    data = sock.recv(65536)
    if not data:
        break
    os.write(1, data)
'''


@pytest.mark.parametrize("shell", ["/bin/sh", "/usr/bin/zsh"])
def test_proxy_command_runs_as_ssh_runs_it(run_cli, sshd, env, shell):
    """ProxyCommand: the same tokens (%h %p %r %n %k %%) and the same shell ($SHELL, not
    /bin/sh) as real ssh, which is the oracle; both reach the server through the relay."""
    if not Path(shell).exists():
        pytest.skip(f"{shell} is not installed")
    Path(env["kh"]).write_text(f"myalias {host_key(sshd)}\n")
    relay = Path(env["d"]) / "relay.py"
    relay.write_text(PROXY_RELAY)
    seen = {who: Path(env["d"]) / f"seen-{who}" for who in ("ssh", "envdoctor")}
    # "${ZSH_VERSION:-none}" is expanded by the shell that runs the command: it tells which one did.
    body = ("Host px\n  HostName 127.0.0.1\n  Port {A}\n  HostKeyAlias myalias\n"
            f"  ProxyCommand {sys.executable} {relay} %h %p {{d}}/seen-$WHO %r %n %k 100%% "
            '"${{ZSH_VERSION:-none}}"\n')
    config = write_config(env, body)
    shell_env = {"SHELL": shell, "WHO": "ssh"}
    proc = subprocess.run(["ssh", "-F", str(config), "px", "true"], capture_output=True, stdin=subprocess.DEVNULL,
                          timeout=60, env={**os.environ, **shell_env})
    assert proc.returncode == 0, proc.stderr
    result, stderr = reachable(run_cli, config, "px", env={**shell_env, "WHO": "envdoctor"})
    assert result["status"] == "pass", (result, stderr)
    expected = seen["ssh"].read_text().splitlines()
    assert expected[:4] == [sshd.user, "px", "myalias", "100%"]
    assert (expected[4] == "none") is (shell == "/bin/sh")  # zsh ran it under $SHELL=zsh
    assert seen["envdoctor"].read_text().splitlines() == expected


def test_proxy_command_with_an_unknown_token_is_refused_as_ssh_refuses_it(run_cli, env):
    """ssh stops at a token it does not know (%z) in ProxyCommand; so does envdoctor, naming it."""
    config = write_config(env, "Host pz\n  HostName 127.0.0.1\n  ProxyCommand nc %h %z\n")
    proc = subprocess.run(["ssh", "-F", str(config), "pz", "true"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode == 255 and "unknown key %z" in proc.stderr
    result, _ = reachable(run_cli, config, "pz")
    assert result["status"] != "pass" and "unknown token %z" in result["message"], result


@contextlib.contextmanager
def running_agent(socket_path: Path, key: Path) -> Iterator[str]:
    """A real ssh-agent on ``socket_path`` holding ``key``; stopped on leaving."""
    if not (shutil.which("ssh-agent") and shutil.which("ssh-add")):
        pytest.skip("ssh-agent is not installed")
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket_path)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if socket_path.exists():
                break
            time.sleep(0.05)
        subprocess.run(["ssh-add", "-q", str(key)], check=True, env={**os.environ, "SSH_AUTH_SOCK": str(socket_path)},
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        yield str(socket_path)
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="module")
def agent(sshd: SSHServer) -> Iterator[str]:
    """An ssh-agent holding the test sshd's client key, on a short socket path ending in
    ``-127.0.0.1.sock`` (so that ``%h`` can name it)."""
    folder = Path(tempfile.mkdtemp(prefix="eda-", dir="/tmp"))
    try:
        with running_agent(folder / "agent-127.0.0.1.sock", sshd.client_key) as socket_path:
            yield socket_path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


AGENT_CASES = [
    # (case id, IdentityAgent line or "", the environment's SSH_AUTH_SOCK: the agent or nothing)
    ("agent-path", "IdentityAgent {agent}", None),
    ("agent-path-with-token", "IdentityAgent {agent_dir}/agent-%h.sock", None),
    ("agent-none-beats-the-environment", "IdentityAgent none", "agent"),
    ("agent-from-SSH_AUTH_SOCK", "IdentityAgent SSH_AUTH_SOCK", "agent"),
    ("agent-from-a-variable", "IdentityAgent $MY_AGENT", None),
    ("agent-from-an-unset-variable", "IdentityAgent $NO_SUCH_AGENT_VAR", "agent"),
    ("agent-from-braced-variable", "IdentityAgent ${{MY_AGENT}}", None),
    ("no-identityagent-uses-the-environment", "", "agent"),
    ("no-identityagent-no-environment", "", None),
]


@pytest.mark.parametrize(("line", "auth_sock"), [c[1:] for c in AGENT_CASES], ids=[c[0] for c in AGENT_CASES])
def test_identity_agent_is_the_one_ssh_uses(run_cli, sshd, env, agent, line, auth_sock):
    """IdentityAgent decides which agent (if any) signs, as with ssh: only the agent holds the
    key here (the IdentityFile does not exist), so each login succeeds exactly where ssh's does."""
    Path(env["kh"]).write_text(f"[127.0.0.1]:{sshd.port} {host_key(sshd)}\n")
    values = {**env, "agent": agent, "agent_dir": str(Path(agent).parent)}
    config = Path(env["d"]) / "ssh_config"
    config.write_text(("Host ag\n  HostName 127.0.0.1\n  Port {A}\n  User {user}\n  IdentityFile {d}/keys/absent\n"
                       f"  {line}\n  UserKnownHostsFile {{kh}}\n  StrictHostKeyChecking yes\n  BatchMode yes\n")
                      .format(**values))
    environ = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    environ["MY_AGENT"] = agent
    if auth_sock:
        environ["SSH_AUTH_SOCK"] = agent
    oracle = subprocess.run(["ssh", "-F", str(config), "ag", "true"], capture_output=True, stdin=subprocess.DEVNULL,
                            timeout=60, env=environ).returncode == 0
    # run_cli's environment is the test's with these on top: SSH_AUTH_SOCK "" is no agent for both.
    result, stderr = reachable(run_cli, config, "ag", env={"MY_AGENT": agent, "SSH_AUTH_SOCK": agent if auth_sock else ""})
    assert (result["status"] == "pass") is oracle, (oracle, result, stderr)


@pytest.fixture(scope="module")
def user_ca_server(sshd: SSHServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SSHServer, Path]]:
    """An sshd that admits user certificates from its own CA; and a client key that only a
    certificate admits (authorized_keys holds another key), with that certificate kept away
    from ``<key>-cert.pub``, where asyncssh and ssh would find it on their own."""
    root = tmp_path_factory.mktemp("sshd_user_ca")
    ca = root / "user_ca"
    keygen(ca)
    server = start_sshd(root / "server", [], client_key=sshd.client_key, extra_config=[f"TrustedUserCAKeys {ca}.pub"])
    key = root / "certified"
    keygen(key)
    subprocess.run(["ssh-keygen", "-q", "-s", str(ca), "-I", "envdoctor-test", "-n", server.user, f"{key}.pub"],
                   check=True)
    Path(f"{key}-cert.pub").rename(root / "certified.cert")
    yield server, key
    server.stop()


CERTIFICATE_CASES = [
    # (case id, CertificateFile lines)
    ("certificate-file", "  CertificateFile {cert}\n"),
    ("certificate-file-with-tokens", "  CertificateFile {cert_dir}/certified.%h.cert\n"),
    ("second-certificate-file", "  CertificateFile {d}/absent.cert\n  CertificateFile {cert}\n"),
    ("unreadable-certificate-then-good", "  CertificateFile {d}/garbage.cert\n  CertificateFile {cert}\n"),
    ("no-certificate-file", ""),
]


@pytest.mark.parametrize("lines", [c[1] for c in CERTIFICATE_CASES], ids=[c[0] for c in CERTIFICATE_CASES])
def test_certificate_file_logs_in_where_ssh_does(run_cli, env, user_ca_server, lines):
    """CertificateFile pairs a user certificate with its key, as ssh pairs it: the login works
    exactly where ssh's works (without the certificate the key alone is refused)."""
    server, key = user_ca_server
    cert = key.parent / "certified.cert"
    by_host = key.parent / "certified.127.0.0.1.cert"
    if not by_host.exists():
        by_host.write_bytes(cert.read_bytes())
    (Path(env["d"]) / "garbage.cert").write_text("not a certificate\n")
    Path(env["kh"]).write_text(f"[127.0.0.1]:{server.port} {host_key(server)}\n")
    values = {**env, "cert": str(cert), "cert_dir": str(key.parent), "P": str(server.port), "k": str(key)}
    config = Path(env["d"]) / "ssh_config"
    config.write_text(("Host uc\n  HostName 127.0.0.1\n  Port {P}\n  User {user}\n  IdentityFile {k}\n"
                       "  IdentitiesOnly yes\n" + lines + "  UserKnownHostsFile {kh}\n  StrictHostKeyChecking yes\n"
                       "  BatchMode yes\n").format(**values))
    environ = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    oracle = subprocess.run(["ssh", "-F", str(config), "uc", "true"], capture_output=True, stdin=subprocess.DEVNULL,
                            timeout=60, env=environ).returncode == 0
    assert oracle is bool(lines)
    result, stderr = reachable(run_cli, config, "uc", env={"SSH_AUTH_SOCK": ""})
    assert (result["status"] == "pass") is oracle, (oracle, result, stderr)


@pytest.mark.parametrize("identities_only", ["yes", "no"])
def test_public_key_file_selects_the_agent_key(run_cli, sshd, env, agent, identities_only):
    """1Password's and Secretive's documented setup: the private key lives only in the agent,
    IdentityFile names its public half (with IdentitiesOnly yes, the only key offered). ssh signs
    with the agent's key; so must envdoctor."""
    Path(env["kh"]).write_text(f"[127.0.0.1]:{sshd.port} {host_key(sshd)}\n")
    public = Path(env["d"]) / "keys" / "agent_key.pub"
    public.write_text(Path(f"{sshd.client_key}.pub").read_text())
    config = Path(env["d"]) / "ssh_config"
    config.write_text(f"Host pk\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n  IdentityFile {public}\n"
                      f"  IdentitiesOnly {identities_only}\n  IdentityAgent {agent}\n  UserKnownHostsFile {env['kh']}\n"
                      "  StrictHostKeyChecking yes\n  BatchMode yes\n")
    environ = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    oracle = subprocess.run(["ssh", "-F", str(config), "pk", "true"], capture_output=True, stdin=subprocess.DEVNULL,
                            timeout=60, env=environ)
    assert oracle.returncode == 0, oracle.stderr
    result, stderr = reachable(run_cli, config, "pk", env={"SSH_AUTH_SOCK": ""})
    assert result["status"] == "pass", (result, stderr)


def test_no_default_key_when_identity_files_are_named(run_cli, sshd, env, tmp_path):
    """IdentityFile names a key that is not there, and no agent: ssh offers no key at all (its
    default ~/.ssh/id_* are not used once IdentityFile names others). asyncssh would fall back
    to them; envdoctor must not log in where ssh cannot."""
    Path(env["kh"]).write_text(f"[127.0.0.1]:{sshd.port} {host_key(sshd)}\n")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    for suffix in ("", ".pub"):  # the key the server accepts, where asyncssh looks by default
        (home / ".ssh" / f"id_ed25519{suffix}").write_bytes(Path(f"{sshd.client_key}{suffix}").read_bytes())
    os.chmod(home / ".ssh" / "id_ed25519", 0o600)
    config = Path(env["d"]) / "ssh_config"
    config.write_text(f"Host nd\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
                      f"  IdentityFile {env['d']}/keys/absent\n  UserKnownHostsFile {env['kh']}\n"
                      "  StrictHostKeyChecking yes\n  BatchMode yes\n")
    environ = {**{k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}, "HOME": str(home)}
    oracle = subprocess.run(["ssh", "-F", str(config), "nd", "true"], capture_output=True, stdin=subprocess.DEVNULL,
                            timeout=60, env=environ)
    assert oracle.returncode == 255
    result, stderr = reachable(run_cli, config, "nd", env={"SSH_AUTH_SOCK": "", "HOME": str(home)})
    assert result["status"] == "error" and result["details"]["kind"] == "auth", (result, stderr)


@pytest.fixture(scope="module")
def sha1_cert_server(sshd: SSHServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SSHServer, Path]]:
    """An sshd whose host certificate an RSA CA signed with SHA-1 (``ssh-keygen -t ssh-rsa``),
    which OpenSSH's default CASignatureAlgorithms leaves out; and that CA's public key file."""
    root = tmp_path_factory.mktemp("sshd_sha1_cert")
    ca = root / "rsa_ca"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(ca)], check=True)
    server = start_sshd(root / "server", [], client_key=sshd.client_key, host_certificate_ca=ca)
    host_pub = server.root / "host_ed25519.pub"
    subprocess.run(["ssh-keygen", "-q", "-s", str(ca), "-t", "ssh-rsa", "-h", "-I", "sha1", "-n", "127.0.0.1",
                    str(host_pub)], check=True)
    listing = subprocess.run(["ssh-keygen", "-L", "-f", str(server.root / "host_ed25519-cert.pub")],
                             capture_output=True, text=True, check=True).stdout
    assert "(using ssh-rsa)" in listing
    server.proc.send_signal(signal.SIGHUP)  # sshd re-executes itself and reads the new certificate
    time.sleep(0.5)
    wait_for_banner(server.port, time.monotonic() + 20, server.proc)
    yield server, Path(f"{ca}.pub")
    server.stop()


CA_SIGNATURE_CASES = [
    # (case id, CASignatureAlgorithms line or "", the bare host key in known_hosts too)
    ("sha1-certificate-refused-by-default", "", False),
    ("sha1-certificate-allowed-by-the-config", "CASignatureAlgorithms +ssh-rsa", False),
    ("bare-key-known-stands-alone", "", True),
    ("only-ed25519-authorities", "CASignatureAlgorithms ssh-ed25519", False),
]


@pytest.mark.parametrize(("line", "bare_known"), [c[1:] for c in CA_SIGNATURE_CASES], ids=[c[0] for c in CA_SIGNATURE_CASES])
def test_host_certificate_signature_is_judged_as_ssh_judges_it(run_cli, env, sha1_cert_server, line, bare_known):
    """A host certificate vouches only when its CA signed it with an algorithm in
    CASignatureAlgorithms (SHA-1 ssh-rsa is not in OpenSSH's defaults); otherwise the bare key
    must be known itself. Real ssh is the oracle; asyncssh alone accepts every signature."""
    server, ca_pub = sha1_cert_server
    trusted = f"@cert-authority [127.0.0.1]:{server.port} " + " ".join(ca_pub.read_text().split()[:2]) + "\n"
    if bare_known:
        trusted += f"[127.0.0.1]:{server.port} {host_key(server)}\n"
    Path(env["kh"]).write_text(trusted)
    config = write_config({**env, "S": str(server.port)}, f"Host sc\n  HostName 127.0.0.1\n  Port {{S}}\n  {line}\n")
    oracle = ssh_connects(config, "sc")
    assert oracle is (bool(line.endswith("+ssh-rsa")) or bare_known)
    result, stderr = reachable(run_cli, config, "sc")
    assert (result["status"] == "pass") is oracle, (oracle, result, stderr)
    if not oracle:
        assert result["details"]["kind"] == "host-key", result


@pytest.fixture(scope="module")
def server_r(sshd: SSHServer, host_ca: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """An sshd whose host certificate ``host_ca`` signed with serial number 5 and key ID rev-test."""
    server = start_sshd(tmp_path_factory.mktemp("sshd_r"), [], client_key=sshd.client_key, host_certificate_ca=host_ca)
    subprocess.run(["ssh-keygen", "-q", "-s", str(host_ca), "-h", "-z", "5", "-I", "rev-test", "-n", "127.0.0.1",
                    str(server.root / "host_ed25519.pub")], check=True)
    server.proc.send_signal(signal.SIGHUP)  # sshd re-executes itself and reads the new certificate
    time.sleep(0.5)
    wait_for_banner(server.port, time.monotonic() + 20, server.proc)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def revocation_files(sshd: SSHServer, server_r: SSHServer, host_ca: Path,
                     tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Revoked-keys files made by ssh-keygen: text lists and KRLs naming (or not) server A's key,
    server R's certificate (by serial, key ID, range) or its CA."""
    root = tmp_path_factory.mktemp("revoked")
    other = root / "other"
    keygen(other)
    a_pub, c_cert = sshd.root / "host_ed25519.pub", server_r.root / "host_ed25519-cert.pub"
    files = {"a-in-list": a_pub.read_text(), "other-in-list": f"# comment\n\n{Path(f'{other}.pub').read_text()}",
             "ca-in-list": Path(f"{host_ca}.pub").read_text(), "garbage-list": "not a key at all\n"}
    for name, text in files.items():
        (root / name).write_text(text)
    krls = {"krl-a": [str(a_pub)], "krl-other": [f"{other}.pub"], "krl-ca": [f"{host_ca}.pub"]}
    for name, keys in krls.items():
        subprocess.run(["ssh-keygen", "-q", "-k", "-f", str(root / name), *keys], check=True)
    listing = subprocess.run(["ssh-keygen", "-L", "-f", str(c_cert)], capture_output=True, text=True, check=True).stdout
    key_id = listing.split('Key ID: "', 1)[1].split('"', 1)[0]
    assert key_id == "rev-test" and "Serial: 5" in listing
    specs = {"krl-cert-serial": "serial: 5\n", "krl-cert-range": "serial: 3-9\n", "krl-cert-other-serial": "serial: 7\n",
             "krl-cert-id": f"id: {key_id}\n", "krl-cert-other-id": "id: somebody-else\n",
             "krl-sha256-a": f"sha256: {a_pub.read_text().strip()}\n",
             "krl-sha1-a": f"sha1: {a_pub.read_text().strip()}\n"}
    for name, spec in specs.items():
        (root / f"{name}.spec").write_text(spec)
        ca = ["-s", f"{host_ca}.pub"] if "cert" in name else []
        subprocess.run(["ssh-keygen", "-q", "-k", "-f", str(root / name), *ca, str(root / f"{name}.spec")], check=True)
    (root / "broken-krl").write_bytes((root / "krl-a").read_bytes()[:30])
    return {p.name: p for p in root.iterdir()}


REVOCATION_CASES = [
    # (case id: the file, and which server: "A" a plain host key, "C" a host certificate (server R))
    ("a-in-list", "A"), ("other-in-list", "A"), ("garbage-list", "A"), ("missing", "A"), ("krl-a", "A"),
    ("krl-other", "A"), ("krl-sha256-a", "A"), ("krl-sha1-a", "A"), ("broken-krl", "A"), ("ca-in-list", "C"), ("krl-ca", "C"),
    ("krl-cert-serial", "C"), ("krl-cert-range", "C"), ("krl-cert-other-serial", "C"), ("krl-cert-id", "C"),
    ("krl-cert-other-id", "C"), ("other-in-list", "C"),
]


@pytest.mark.parametrize(("name", "server"), REVOCATION_CASES, ids=[f"{c[0]}-{c[1]}" for c in REVOCATION_CASES])
def test_revoked_host_keys_refuse_what_ssh_refuses(run_cli, sshd, server_r, host_ca, env, revocation_files, name,
                                                    server):
    """RevokedHostKeys (a text list or a KRL from ssh-keygen): envdoctor logs in exactly where real
    ssh does; a file that is missing or a KRL that does not parse refuses the host, as with ssh."""
    path = revocation_files.get(name, Path(env["d"]) / "no-such-file")
    target = sshd if server == "A" else server_r
    if server == "A":
        Path(env["kh"]).write_text(f"[127.0.0.1]:{sshd.port} {host_key(sshd)}\n")
    else:
        ca_pub = " ".join(Path(f"{host_ca}.pub").read_text().split()[:2])
        Path(env["kh"]).write_text(f"@cert-authority [127.0.0.1]:{server_r.port} {ca_pub}\n")
    config = write_config({**env, "T": str(target.port)},
                          f"Host rv\n  HostName 127.0.0.1\n  Port {{T}}\n  RevokedHostKeys {path}\n")
    oracle = ssh_connects(config, "rv")
    result, stderr = reachable(run_cli, config, "rv")
    assert (result["status"] == "pass") is oracle, (oracle, result, stderr)
    if not oracle:
        assert result["details"]["kind"] == "host-key", result


@pytest.fixture(scope="module")
def rsa_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """An sshd with a 3072-bit RSA host key (ssh-keygen's default size) that admits a 3072-bit
    RSA client key."""
    root = tmp_path_factory.mktemp("sshd_rsa")
    client = root / "client_rsa"
    keygen(client, "rsa")
    server = start_sshd(root / "server", [], client_key=client, host_key_type="rsa")
    yield server
    server.stop()


RSA_SIZE_CASES = [
    # (case id, RequiredRSASize line or "")
    ("default-1024", ""),
    ("3072-allows-3072", "RequiredRSASize 3072"),
    ("4096-refuses-the-host-key-and-our-key", "RequiredRSASize 4096"),
]


@pytest.mark.parametrize("line", [c[1] for c in RSA_SIZE_CASES], ids=[c[0] for c in RSA_SIZE_CASES])
def test_required_rsa_size_as_ssh_applies_it(run_cli, rsa_server, env, line):
    """RequiredRSASize (OpenSSH 9.1+): ssh refuses an RSA host key below it and does not offer an
    RSA key of its own below it; envdoctor logs in exactly where real ssh does."""
    Path(env["kh"]).write_text(f"[127.0.0.1]:{rsa_server.port} {host_key_of(rsa_server, 'rsa')}\n")
    config = Path(env["d"]) / "ssh_config"
    config.write_text(f"Host rs\n  HostName 127.0.0.1\n  Port {rsa_server.port}\n  User {rsa_server.user}\n"
                      f"  IdentityFile {rsa_server.client_key}\n  IdentitiesOnly yes\n  {line}\n"
                      f"  UserKnownHostsFile {env['kh']}\n  StrictHostKeyChecking yes\n  BatchMode yes\n")
    oracle = ssh_connects(config, "rs")
    assert oracle is ("4096" not in line)
    result, stderr = reachable(run_cli, config, "rs", env={"SSH_AUTH_SOCK": ""})
    assert (result["status"] == "pass") is oracle, (oracle, result, stderr)
    if not oracle:
        assert "RequiredRSASize" in result["message"], result


def host_key_of(server: SSHServer, kind: str) -> str:
    return " ".join((server.root / f"host_{kind}.pub").read_text().split()[:2])


def test_required_rsa_size_skips_our_own_small_key(run_cli, sshd, rsa_server, env):
    """Our 3072-bit RSA key under RequiredRSASize 4096, against a host with an Ed25519 key: ssh
    skips the key and cannot log in; neither does envdoctor (the host key is not the reason)."""
    server = start_sshd(Path(env["d"]) / "ed_host", [], client_key=rsa_server.client_key)
    try:
        Path(env["kh"]).write_text(f"[127.0.0.1]:{server.port} {host_key(server)}\n")
        config = Path(env["d"]) / "ssh_config"
        config.write_text(f"Host rk\n  HostName 127.0.0.1\n  Port {server.port}\n  User {server.user}\n"
                          f"  IdentityFile {rsa_server.client_key}\n  IdentitiesOnly yes\n  RequiredRSASize 4096\n"
                          f"  UserKnownHostsFile {env['kh']}\n  StrictHostKeyChecking yes\n  BatchMode yes\n")
        assert not ssh_connects(config, "rk")
        assert ssh_connects(Path(str(config)), "rk", "-o", "RequiredRSASize=3072")
        result, stderr = reachable(run_cli, config, "rk", env={"SSH_AUTH_SOCK": ""})
        assert result["status"] == "error" and result["details"]["kind"] == "auth", (result, stderr)
    finally:
        server.stop()


def test_certificate_file_pairs_with_the_agents_key(run_cli, env, user_ca_server):
    """The key that the certificate certifies lives only in an agent (IdentityFile names its
    public half), the certificate on disk (CertificateFile): ssh pairs them; so does envdoctor."""
    server, key = user_ca_server
    folder = Path(tempfile.mkdtemp(prefix="edc-", dir="/tmp"))
    try:
        with running_agent(folder / "agent.sock", key) as socket_path:
            Path(env["kh"]).write_text(f"[127.0.0.1]:{server.port} {host_key(server)}\n")
            config = Path(env["d"]) / "ssh_config"
            config.write_text(f"Host ac\n  HostName 127.0.0.1\n  Port {server.port}\n  User {server.user}\n"
                              f"  IdentityFile {key}.pub\n  IdentitiesOnly yes\n  IdentityAgent {socket_path}\n"
                              f"  CertificateFile {key.parent / 'certified.cert'}\n  UserKnownHostsFile {env['kh']}\n"
                              "  StrictHostKeyChecking yes\n  BatchMode yes\n")
            environ = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
            oracle = subprocess.run(["ssh", "-F", str(config), "ac", "true"], capture_output=True,
                                    stdin=subprocess.DEVNULL, timeout=60, env=environ)
            assert oracle.returncode == 0, oracle.stderr
            result, stderr = reachable(run_cli, config, "ac", env={"SSH_AUTH_SOCK": ""})
            assert result["status"] == "pass", (result, stderr)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_bind_address_is_the_source_ssh_uses(run_cli, sshd, env, tmp_path):
    """BindAddress: the connection leaves from 127.0.0.2, as ssh's does; the server's log (which
    records the client's address of each login) is the witness for both."""
    server = start_sshd(tmp_path / "bind_server", [], client_key=sshd.client_key)
    try:
        Path(env["kh"]).write_text(f"[127.0.0.1]:{server.port} {host_key(server)}\n")
        config = write_config({**env, "P": str(server.port)},
                              "Host ba\n  HostName 127.0.0.1\n  Port {P}\n  BindAddress 127.0.0.2\n")

        def sources_in_log() -> list[str]:
            return [line.split(" from ", 1)[1].split()[0] for line in server.log_text().splitlines()
                    if "Accepted publickey" in line]

        assert ssh_connects(config, "ba")
        assert sources_in_log() == ["127.0.0.2"]
        result, stderr = reachable(run_cli, config, "ba")
        assert result["status"] == "pass", (result, stderr)
        assert sources_in_log() == ["127.0.0.2", "127.0.0.2"]
    finally:
        server.stop()
