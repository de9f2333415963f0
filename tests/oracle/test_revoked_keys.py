"""RevokedHostKeys files judged as OpenSSH judges them: KRLs and key lists written by the real
ssh-keygen, with `ssh-keygen -Q` (does this KRL revoke this key?) as the oracle. The e2e
parity test runs real ssh against sshd with these files; here many more KRL layouts are
covered (serial lists, ranges and bitmaps, key IDs, wildcard authorities, fingerprints)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import asyncssh
import pytest

from envdoctor.transport.revoked_keys import HostKey, RevocationError, revocation

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed")

SERIALS = [1, 2, 7, 63, 64, 65, 100, 1000, 1001, 5000]
SPECS = {
    "one-serial": "serial: 7\n",
    "scattered": "serial: 1\nserial: 64\nserial: 1001\n",
    "range": "serial: 60-100\n",
    "dense-and-sparse": "serial: 1-2\nserial: 63-65\nserial: 5000\nserial: 100\n",
    "key-id": "id: host-65\nid: host-1000\n",
    "mixed": "serial: 2\nid: host-7\nserial: 900-1000\n",
}


def keygen(path: Path, kind: str = "ed25519") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True)
    return Path(f"{path}.pub")


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("krl")
    found = {"ca": keygen(root / "ca"), "other_ca": keygen(root / "other_ca"), "host": keygen(root / "host"),
             "rsa_host": keygen(root / "rsa_host", "rsa")}
    for serial in SERIALS:
        for ca in ("ca", "other_ca"):
            pub = root / f"h-{ca}-{serial}.pub"
            pub.write_bytes(found["host"].read_bytes())
            subprocess.run(["ssh-keygen", "-q", "-s", str(root / ca), "-h", "-z", str(serial), "-I", f"host-{serial}",
                            str(pub)], check=True)
            found[f"{ca}-{serial}"] = root / f"h-{ca}-{serial}-cert.pub"
    return found


def oracle(krl: Path, key_file: Path) -> bool:
    """ssh-keygen -Q: exit 1 and REVOKED when the KRL revokes the key."""
    proc = subprocess.run(["ssh-keygen", "-Q", "-f", str(krl), str(key_file)], capture_output=True, text=True)
    return "REVOKED" in proc.stdout


def judged(krl: Path, key_file: Path) -> bool:
    blob = asyncssh.read_public_key(str(key_file)).public_data if "cert" not in key_file.name else \
        asyncssh.read_certificate(str(key_file)).public_data
    return revocation(str(krl), HostKey.of(blob)) is not None


#: (spec, for any authority): a KRL for any authority (-w) holds key IDs only.
CERT_CASES = [(spec, False) for spec in SPECS] + [(spec, True) for spec in SPECS if "serial" not in SPECS[spec]]


@pytest.mark.parametrize(("spec", "wildcard"), CERT_CASES,
                         ids=[f"{spec}-{'any' if wild else 'by'}-authority" for spec, wild in CERT_CASES])
def test_certificate_sections_agree_with_ssh_keygen(keys, tmp_path, spec, wildcard):
    (tmp_path / "spec").write_text(SPECS[spec])
    krl = tmp_path / "krl"
    ca = ["-w"] if wildcard else ["-s", str(keys["ca"])]
    subprocess.run(["ssh-keygen", "-q", "-k", "-f", str(krl), *ca, str(tmp_path / "spec")], check=True)
    for serial in SERIALS:
        for ca_name in ("ca", "other_ca"):
            key_file = keys[f"{ca_name}-{serial}"]
            assert judged(krl, key_file) is oracle(krl, key_file), (spec, serial, ca_name)
    assert not judged(krl, keys["host"])


@pytest.mark.parametrize("line", ["key", "sha1", "sha256", "hash"])
def test_key_sections_agree_with_ssh_keygen(keys, tmp_path, line):
    """A bare key revoked by blob, SHA-1 or SHA-256 fingerprint: so are its certificates; the CA
    revoked: so is every certificate it signed."""
    host = keys["host"].read_text().strip()
    if line == "hash":
        host = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(keys["host"])], capture_output=True,
                              text=True, check=True).stdout.split()[1]
    (tmp_path / "spec").write_text(f"{line}: {host}\n{line if line != 'hash' else 'key'}: "
                                   f"{keys['rsa_host'].read_text().strip() if line == 'hash' else keys['ca'].read_text().strip()}\n")
    krl = tmp_path / "krl"
    subprocess.run(["ssh-keygen", "-q", "-k", "-f", str(krl), str(tmp_path / "spec")], check=True)
    for name in ("host", "rsa_host", "ca-7", "other_ca-7"):
        assert judged(krl, keys[name]) is oracle(krl, keys[name]), (line, name)
    assert judged(krl, keys["host"])


def test_plain_list_names_keys_and_authorities(keys, tmp_path):
    listed = tmp_path / "revoked"
    listed.write_text(f"# revoked\n\n  {keys['other_ca'].read_text()}")
    assert judged(listed, keys["other_ca-7"]) and not judged(listed, keys["ca-7"]) and not judged(listed, keys["host"])
    listed.write_text(keys["host"].read_text())
    assert judged(listed, keys["ca-7"]) and judged(listed, keys["host"])


@pytest.mark.parametrize("content", [b"not a key\n", b"SSHKRL\n\x00\x00\x00\x00\x01truncated"])
def test_a_file_that_cannot_be_judged_revokes_everything(keys, tmp_path, content):
    bad = tmp_path / "bad"
    bad.write_bytes(content)
    with pytest.raises(RevocationError):
        judged(bad, keys["host"])
    with pytest.raises(RevocationError):
        judged(tmp_path / "missing", keys["host"])


def test_damaged_krls_end_in_a_verdict_or_a_refusal(keys, tmp_path):
    """Every truncation and many byte flips of a real KRL: a verdict or RevocationError, never a
    hang or another exception (a hostile file must not stop or stall the run)."""
    (tmp_path / "spec").write_text(SPECS["mixed"] + f"key: {keys['rsa_host'].read_text().strip()}\n")
    krl = tmp_path / "krl"
    subprocess.run(["ssh-keygen", "-q", "-k", "-f", str(krl), "-s", str(keys["ca"]), str(tmp_path / "spec")], check=True)
    data = krl.read_bytes()
    blob = asyncssh.read_certificate(str(keys["ca-7"])).public_data
    damaged = tmp_path / "damaged"
    variants = [data[:cut] for cut in range(8, len(data))]
    variants += [data[:at] + bytes([data[at] ^ flip]) + data[at + 1:] for at in range(8, len(data)) for flip in (1, 0x80)]
    for variant in variants:
        damaged.write_bytes(variant)
        try:
            revocation(str(damaged), HostKey.of(blob))
        except RevocationError:
            pass
