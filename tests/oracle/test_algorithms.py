"""KexAlgorithms, MACs, HostKeyAlgorithms and PubkeyAcceptedAlgorithms: read, refused and assembled as OpenSSH does
(`ssh -G` is the oracle), and a connection offers only what ssh allows."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest

from envdoctor.errors import ConfigError
from envdoctor.transport import algorithms
from envdoctor.transport.openssh import HostResolver, parse_ssh_g
from envdoctor.transport.ssh_config_resolve import resolve_builtin

CASES = {
    "KexAlgorithms": [
        "curve25519-sha256", "+diffie-hellman-group14-sha1", "^ecdh-sha2-nistp256", "-sntrup*",
        "-*sha1,curve25519-sha256@libssh.org", "diffie-hellman-group1-sha1,curve25519-sha256", "curve*",
        "-*", "+diffie-hellman-group-exchange-sha1,diffie-hellman-group14-sha1",
        # refused by ssh's reader
        "nosuch", "+nosuch", "curve25519-sha256,nosuch", "curve25519-sha256,,nosuch", "+", ",",
        "Curve25519-sha256", "mlkem768x25519-sha256",
    ],
    "MACs": [
        "hmac-sha2-256", "+hmac-md5", "^hmac-sha1", "-umac*", "-*etm@openssh.com", "hmac-sha2-*",
        "hmac-sha2-512,hmac-sha2-256", "-*",
        "nosuch", "hmac-sha2-256,nosuch", "+,", "hmac-sha2-256,,nosuch",
    ],
    "HostKeyAlgorithms": [
        "ssh-ed25519", "+ssh-rsa", "^rsa-sha2-256", "-*cert*", "ssh-ed25519*", "-ssh-rsa*,ecdsa*",
        "rsa-sha2-512,ssh-ed25519", "ssh-rsa", "!ssh-rsa", "ssh-*,!ssh-dss", "-*",
        "RSA", "ed25519", "ssh-ed25519,RSA",
        "nosuch", "+nosuch", "nosuch*", "ssh-ed25519,nosuch", ",", "ssh-ed25519,,nosuch",
    ],
    "PubkeyAcceptedAlgorithms": [
        "ssh-ed25519", "+ssh-rsa", "^rsa-sha2-512", "-rsa*", "-*cert*", "rsa-sha2-256,ssh-ed25519-cert*",
        "ssh-rsa", "!ssh-rsa", "RSA", "-*", "nosuch", "ssh-ed25519,nosuch",
    ],
    # The keyword's name before OpenSSH 8.5, read as the same one.
    "PubkeyAcceptedKeyTypes": ["ssh-ed25519", "+ssh-rsa", "nosuch"],
}
KEYS = {"KexAlgorithms": "kexalgorithms", "MACs": "macs", "HostKeyAlgorithms": "hostkeyalgorithms",
        "PubkeyAcceptedAlgorithms": "pubkeyacceptedalgorithms", "PubkeyAcceptedKeyTypes": "pubkeyacceptedalgorithms"}
FIELDS = {"KexAlgorithms": "kex_algorithms", "MACs": "macs", "HostKeyAlgorithms": "host_key_algorithms",
          "PubkeyAcceptedAlgorithms": "pubkey_algorithms", "PubkeyAcceptedKeyTypes": "pubkey_algorithms"}


def ssh_g(config: Path) -> str | None:
    proc = subprocess.run(["ssh", "-G", "-F", str(config), "x"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30)
    return proc.stdout if proc.returncode == 0 else None


def ssh_g_expansion_error(config: Path) -> str | None:
    """What ssh -G said when it read the value and then failed to expand it (key type lists only)."""
    proc = subprocess.run(["ssh", "-G", "-F", str(config), "x"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30)
    return next((words for words in algorithms.EMPTY_LIST_ERRORS.values() if words in proc.stderr), None)


def listed(output: str, key: str) -> tuple[str, ...] | None:
    line = next((ln for ln in output.splitlines() if ln.startswith(key + " ")), None)
    return None if line is None else tuple(a for a in line.split(" ", 1)[1].split(",") if a)


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client as the oracle")
@pytest.mark.parametrize(("keyword", "value"), [(k, v) for k, values in CASES.items() for v in values])
def test_assembled_as_ssh_g_assembles(keyword, value, tmp_path):
    """The same list as ssh -G prints, from the built-in parser and from ssh -G's answer; a
    value ssh refuses is refused with its words."""
    kind = algorithms.KINDS[KEYS[keyword]]
    config = tmp_path / "ssh_config"
    config.write_text(f"Host x\n  {keyword} {value}\n")
    output = ssh_g(config)
    if output is None:
        words = ssh_g_expansion_error(config) or kind.bad_spec
        with pytest.raises(ConfigError, match=words):
            resolve_builtin("x", config_file=str(config))
        return
    words = ssh_g_expansion_error(config)
    if words:  # ssh -G complains and exits 0 (PubkeyAcceptedAlgorithms); ssh itself then dies
        for resolve in (lambda: resolve_builtin("x", config_file=str(config)),
                        lambda: asyncio.run(HostResolver(str(config)).resolve("x"))):
            with pytest.raises(ConfigError, match=words):
                resolve()
        return
    expected = listed(output, KEYS[keyword])
    assert algorithms.assemble(kind, value) == expected
    assert getattr(parse_ssh_g(output, "x"), FIELDS[keyword]) == expected
    assert getattr(resolve_builtin("x", config_file=str(config)), FIELDS[keyword]) == expected


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client as the oracle")
def test_defaults_are_ssh_gs(tmp_path):
    """Without the keywords the built-in tables are what this ssh offers (OpenSSH 9.2's); with
    another OpenSSH the ssh -G path reads its own."""
    config = tmp_path / "ssh_config"
    config.write_text("Host x\n  Port 2\n")
    output = ssh_g(config)
    assert output is not None
    version = subprocess.run(["ssh", "-V"], capture_output=True, text=True).stderr
    if not version.startswith("OpenSSH_9.2"):
        pytest.skip(f"the tables are OpenSSH 9.2's; this is {version.strip()}")
    for key in KEYS.values():
        assert listed(output, key) == algorithms.KINDS[key].defaults


def test_usable_keeps_ssh_order_and_refuses_an_empty_choice():
    supported = ("curve25519-sha256", "diffie-hellman-group14-sha1", "ecdh-sha2-nistp256")
    assert algorithms.usable(algorithms.KEX, None, supported, "h") == ["curve25519-sha256", "ecdh-sha2-nistp256"]
    assert algorithms.usable(algorithms.KEX, ("ecdh-sha2-nistp256", "curve25519-sha256"), supported, "h") == [
        "ecdh-sha2-nistp256", "curve25519-sha256"]
    with pytest.raises(ConfigError, match="gpu1: none of the key exchange algorithms ssh would offer"):
        algorithms.usable(algorithms.KEX, ("sntrup761x25519-sha512@openssh.com",), supported, "gpu1")


def test_asyncssh_sha1_defaults_are_not_offered_unless_ssh_allows_them():
    """asyncssh would offer diffie-hellman-group14-sha1 and ssh-rsa; OpenSSH 9's defaults do not."""
    from envdoctor.transport.ssh import _asyncssh_algorithms

    kex = algorithms.usable(algorithms.KEX, None, _asyncssh_algorithms("kex"), "h")
    hostkeys = algorithms.usable(algorithms.HOST_KEYS, None, _asyncssh_algorithms("host_key"), "h")
    assert "diffie-hellman-group14-sha1" not in kex and "curve25519-sha256" in kex
    assert "ssh-rsa" not in hostkeys and "rsa-sha2-512" in hostkeys and "ssh-ed25519" in hostkeys
    assert "diffie-hellman-group14-sha1" in algorithms.usable(
        algorithms.KEX, algorithms.assemble(algorithms.KEX, "+diffie-hellman-group14-sha1"),
        _asyncssh_algorithms("kex"), "h")


def test_ml_kem_stands_in_for_sntrup_only_where_ssh_asks_for_a_post_quantum_hybrid():
    """OpenSSH 9.2's list starts with sntrup761, which asyncssh runs only with liboqs: ML-KEM
    takes its place rather than falling back to plain curve25519. A list without sntrup (the
    user's `KexAlgorithms curve25519-sha256`, `-sntrup*`) gets no post-quantum method added."""
    without_liboqs = ("mlkem768x25519-sha256", "curve25519-sha256", "ecdh-sha2-nistp256")
    assert algorithms.kex_offered(None, without_liboqs, "h") == [
        "mlkem768x25519-sha256", "curve25519-sha256", "ecdh-sha2-nistp256"]
    with_liboqs = (*without_liboqs, "sntrup761x25519-sha512@openssh.com")
    assert algorithms.kex_offered(None, with_liboqs, "h")[:2] == [
        "sntrup761x25519-sha512@openssh.com", "curve25519-sha256"]
    assert algorithms.kex_offered(("curve25519-sha256",), without_liboqs, "h") == ["curve25519-sha256"]
    assert algorithms.kex_offered(algorithms.assemble(algorithms.KEX, "-sntrup*"), without_liboqs, "h") == [
        "curve25519-sha256", "ecdh-sha2-nistp256"]
    newer_ssh = ("mlkem768x25519-sha256", "sntrup761x25519-sha512", "curve25519-sha256")  # OpenSSH 10's order
    assert algorithms.kex_offered(newer_ssh, without_liboqs, "h") == ["mlkem768x25519-sha256", "curve25519-sha256"]


def test_client_keys_sign_only_as_pubkey_accepted_algorithms_allows():
    """asyncssh's signature_algs from ssh's list: SHA-1 ssh-rsa only when the list names it, a
    certificate's algorithm as its key's, nothing when asyncssh can do none of the list."""
    from envdoctor.transport.ssh import _asyncssh_algorithms

    supported = _asyncssh_algorithms("signature")
    default = algorithms.signature_algorithms(None, supported)
    assert "ssh-rsa" not in default and {"rsa-sha2-256", "rsa-sha2-512", "ssh-ed25519"} <= set(default)
    assert "ssh-rsa" in algorithms.signature_algorithms(algorithms.assemble(algorithms.PUBKEY, "+ssh-rsa"), supported)
    assert algorithms.signature_algorithms(("ssh-ed25519",), supported) == ["ssh-ed25519"]
    assert algorithms.signature_algorithms(("rsa-sha2-256-cert-v01@openssh.com", "rsa-sha2-256"), supported) == [
        "rsa-sha2-256"]
    assert algorithms.signature_algorithms(("sk-ssh-ed25519@openssh.com",), ("ssh-ed25519",)) == []


def test_certificate_signature_algorithm_is_read_from_the_blob(tmp_path):
    """The CA's signature algorithm of a real ssh-keygen certificate: SHA-1 ssh-rsa with -t ssh-rsa,
    rsa-sha2-512 by default (OpenSSH 9), ssh-ed25519 for an Ed25519 CA."""
    import shutil
    import subprocess

    import asyncssh

    from envdoctor.transport.ssh import certificate_signature_algorithm

    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen is not installed")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "host")], check=True)
    for ca_type, extra, expected in (("rsa", ["-t", "ssh-rsa"], "ssh-rsa"), ("rsa", [], "rsa-sha2-512"),
                                     ("ed25519", [], "ssh-ed25519")):
        ca = tmp_path / f"ca-{ca_type}-{expected}"
        subprocess.run(["ssh-keygen", "-q", "-t", ca_type, "-N", "", "-f", str(ca)], check=True)
        subprocess.run(["ssh-keygen", "-q", "-s", str(ca), *extra, "-h", "-I", "x", str(tmp_path / "host.pub")], check=True)
        cert = asyncssh.read_certificate(str(tmp_path / "host-cert.pub"))
        assert certificate_signature_algorithm(cert) == expected


@pytest.mark.parametrize("value", ["+ssh-rsa", "-rsa*", "^ssh-rsa", "ssh-rsa,ssh-ed25519", "rsa-sha2-*"])
def test_ca_signature_list_assembles_as_ssh_g_prints_it(value, tmp_path):
    import shutil
    import subprocess

    from envdoctor.transport import algorithms

    if shutil.which("ssh") is None:
        pytest.skip("ssh is not installed")
    config = tmp_path / "config"
    config.write_text(f"Host a\n  CASignatureAlgorithms {value}\n")
    out = subprocess.run(["ssh", "-G", "-F", str(config), "a"], capture_output=True, text=True, check=True).stdout
    printed = next(line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("casignaturealgorithms "))
    assert ",".join(algorithms.assemble(algorithms.CA_SIGNATURES, value) or ()) == printed
