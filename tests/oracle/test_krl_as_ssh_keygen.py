"""KRLs built byte by byte, malformed in every way OpenSSH's krl.c checks (and well formed in
ways a naive reader refuses), judged by envdoctor and by `ssh-keygen -Q` (the oracle):
for each KRL and each of several host keys and certificates the verdicts are the same:
not revoked, revoked, or unreadable (which revokes every key, as ssh refuses every host)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import asyncssh
import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from envdoctor.transport.revoked_keys import HostKey, RevocationError, revocation

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen (the oracle)")

MAGIC = b"SSHKRL\n\0"


def u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def u64(n: int) -> bytes:
    return n.to_bytes(8, "big")


def string(data: bytes) -> bytes:
    return u32(len(data)) + data


def mpint(n: int, pad: bool = False) -> bytes:
    data = n.to_bytes((n.bit_length() + 8) // 8, "big") if n else b""
    return string((b"\0" if pad else b"") + data)


def header(version: int = 1, comment: bytes = b"test", reserved: bytes = b"") -> bytes:
    return MAGIC + u32(version) + u64(1) + u64(0) + u64(0) + string(reserved) + string(comment)


def section(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + string(body)


def certs(ca: bytes, *subsections: bytes) -> bytes:
    return section(1, string(ca) + string(b"") + b"".join(subsections))


def sub(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + string(body)


def serials(*numbers: int) -> bytes:
    return sub(0x20, b"".join(u64(n) for n in numbers))


def serial_range(low: int, high: int, extra: bytes = b"") -> bytes:
    return sub(0x21, u64(low) + u64(high) + extra)


def bitmap(first: int, bits: bytes, extra: bytes = b"") -> bytes:
    return sub(0x22, u64(first) + string(bits) + extra)


def key_ids(*ids: bytes) -> bytes:
    return sub(0x23, b"".join(string(i) for i in ids))


def blobs(kind: int, *entries: bytes) -> bytes:
    return section(kind, b"".join(string(e) for e in entries))


def signed(body: bytes, key: asyncssh.SSHKey, algorithm: bytes = b"ssh-ed25519", tamper: bool = False) -> bytes:
    """``body`` followed by a signature section of ``key`` over it (as krl.c checks it)."""
    head = body + bytes([4]) + string(key.public_data)
    signature = key.sign(head + (b"x" if tamper else b""), algorithm)
    return head + string(signature)


class Keys:
    """Real keys and certificates made by ssh-keygen, and the blobs KRLs name them by."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, Path] = {}
        for name, kind in (("ca", "ed25519"), ("other", "ed25519"), ("rsa_ca", "rsa"), ("ec_ca", "ecdsa"),
                           ("host", "ed25519")):
            subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(root / name)], check=True)
        self.files["host"] = root / "host.pub"
        for ca, serial in (("ca", 7), ("other", 7), ("ca", 0), ("rsa_ca", 7), ("ec_ca", 7)):
            pub = root / f"{ca}-{serial}.pub"
            pub.write_bytes((root / "host.pub").read_bytes())
            subprocess.run(["ssh-keygen", "-q", "-s", str(root / ca), "-h", "-z", str(serial), "-I", f"host-{serial}",
                            str(pub)], check=True)
            self.files[f"{ca}-{serial}"] = root / f"{ca}-{serial}-cert.pub"
        self.signer = asyncssh.generate_private_key("ssh-ed25519")
        self.other_signer = asyncssh.generate_private_key("ssh-ed25519")

    def blob(self, name: str) -> bytes:
        return asyncssh.read_public_key(str(self.root / f"{name}.pub")).public_data

    def cert_blob(self, name: str) -> bytes:
        return asyncssh.read_certificate(str(self.files[name])).public_data


def renamed(blob: bytes, name: bytes) -> bytes:
    """The same key under another type name (its short name, say)."""
    length = int.from_bytes(blob[:4], "big")
    return string(name) + blob[4 + length:]


def ecdsa_blob(point: bytes, curve: bytes = b"nistp256", name: bytes = b"ecdsa-sha2-nistp256") -> bytes:
    return string(name) + string(curve) + string(point)


def cases(k: Keys) -> dict[str, bytes]:
    """Named KRLs: the first ones well formed, the `bad-` ones malformed."""
    ca, other, host = k.blob("ca"), k.blob("other"), k.blob("host")
    rsa = asyncssh.read_public_key(str(k.root / "rsa_ca.pub"))
    e, n = rsa.pyca_key.public_numbers().e, rsa.pyca_key.public_numbers().n
    ec_key = asyncssh.read_public_key(str(k.root / "ec_ca.pub")).pyca_key
    real_point = ec_key.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    compressed = ec_key.public_bytes(Encoding.X962, PublicFormat.CompressedPoint)
    sha1, sha256 = hashlib.sha1(host).digest(), hashlib.sha256(host).digest()
    h = header()
    return {
        "empty": h,
        "serial-list": h + certs(ca, serials(3, 7, 9)),
        "serial-list-other-ca": h + certs(other, serials(7)),
        "range": h + certs(ca, serial_range(5, 8)),
        "range-full": h + certs(ca, serial_range(1, 2**64 - 1)),
        "bitmap": h + certs(ca, bitmap(4, bytes([0b1000]))),
        "bitmap-leading-zero": h + certs(ca, bitmap(4, b"\0\x08")),
        "bitmap-near-the-end": h + certs(ca, bitmap(2**64 - 16, b"\x00\x80\x00")),
        "key-id": h + certs(ca, key_ids(b"host-7")),
        "key-id-trailing-nul": h + certs(ca, key_ids(b"host-7\0")),
        "key-id-any-ca": h + certs(b"", key_ids(b"host-0", b"host-7")),
        "serial-0-cert-by-range": h + certs(ca, serial_range(1, 100)),
        "ca-short-name": h + certs(renamed(ca, b"ED25519"), serials(7)),
        "ca-rsa-padded-exponent": h + certs(string(b"ssh-rsa") + mpint(e, pad=True) + mpint(n), serials(7)),
        "ca-rsa-sha2-name": h + certs(renamed(k.blob("rsa_ca"), b"rsa-sha2-512"), serials(7)),
        "ca-ecdsa": h + certs(k.blob("ec_ca"), key_ids(b"host-7")),
        "ca-is-a-certificate": h + certs(k.cert_blob("ca-7"), serials(7)),
        "two-sections-same-ca": h + certs(ca, serials(3)) + certs(ca, key_ids(b"host-7")),
        "explicit-key": h + blobs(2, host),
        "explicit-ca-key": h + blobs(2, ca),
        "explicit-any-bytes": h + blobs(2, b"", b"not a key"),
        "sha1": h + blobs(3, sha1),
        "sha256": h + blobs(5, sha256),
        "sha256-of-ca": h + blobs(5, hashlib.sha256(other).digest()),
        "empty-sections": h + blobs(2) + blobs(3) + blobs(5) + certs(ca),
        "signed": signed(h + certs(ca, serials(7)), k.signer),
        "signed-by-two": signed(signed(h + blobs(2, host), k.signer), k.other_signer),
        # Malformed: every one makes ssh-keygen -Q (and ssh) refuse the whole file.
        "bad-section-after-signature": signed(h, k.signer) + blobs(2, host),
        "bad-serial-0": h + certs(ca, serials(0)),
        "bad-serial-0-in-list": h + certs(ca, serials(7, 0)),
        "bad-range-low-above-high": h + certs(ca, serial_range(9, 8)),
        "bad-range-from-0": h + certs(ca, serial_range(0, 8)),
        "bad-range-trailing-bytes": h + certs(ca, serial_range(5, 8, b"\0")),
        "bad-serial-list-partial": h + certs(ca, sub(0x20, u64(7) + b"\0\0\0")),
        "bad-sha1-length": h + blobs(3, sha1[:19]),
        "bad-sha256-length": h + blobs(5, sha256 + b"\0"),
        "bad-ca-garbage": h + certs(b"\0\0\0\x0bssh-ed25519", serials(7)),
        "bad-ca-trailing-byte": h + certs(ca + b"\0", serials(7)),
        "bad-ca-unknown-type": h + certs(renamed(ca, b"ssh-foo"), serials(7)),
        "bad-ca-rsa-512": h + certs(string(b"ssh-rsa") + mpint(65537) + mpint((1 << 511) | 1), serials(7)),
        "bad-ca-rsa-negative": h + certs(string(b"ssh-rsa") + mpint(65537) + string(b"\x80" + b"\1" * 200), serials(7)),
        "bad-ca-ed25519-short": h + certs(string(b"ssh-ed25519") + string(b"\1" * 31), serials(7)),
        "bad-ca-ecdsa-curve": h + certs(ecdsa_blob(real_point, b"nistp384"), serials(7)),
        "bad-ca-ecdsa-off-curve": h + certs(ecdsa_blob(b"\4" + (1).to_bytes(32, "big") * 2), serials(7)),
        "bad-ca-ecdsa-compressed": h + certs(ecdsa_blob(compressed), serials(7)),
        "bad-ca-ecdsa-short-name": h + certs(ecdsa_blob(real_point, name=b"ECDSA"), serials(7)),
        "bad-key-id-nul": h + certs(ca, key_ids(b"host\0-7")),
        "bad-key-id-partial": h + certs(ca, sub(0x23, string(b"host-7") + b"\0\0")),
        "bad-bitmap-trailing": h + certs(ca, bitmap(4, b"\x08", b"\0")),
        "bad-bitmap-negative": h + certs(ca, bitmap(4, b"\x88")),
        "bad-bitmap-serial-0": h + certs(ca, bitmap(0, b"\x01")),
        "bad-bitmap-wraps": h + certs(ca, bitmap(2**64 - 4, b"\x00\x00\x01\x00\x00")),
        "bad-bitmap-too-large": h + certs(ca, bitmap(1, b"\x01" + b"\0" * 2049)),
        "bad-unknown-subsection": h + certs(ca, sub(0x24, b"")),
        "bad-unknown-section": h + section(6, b""),
        "bad-trailing-in-section": h + section(2, string(host) + b"\0"),
        "bad-format-version": header(version=2),
        "bad-comment-nul": header(comment=b"a\0b"),
        "bad-truncated-header": header()[:-3],
        "bad-section-overruns": h + b"\x02\x00\x00\x01\x00" + string(host),
        "bad-cert-section-no-reserved": h + section(1, string(ca)),
        "bad-signature-tampered": signed(h + blobs(2, other), k.signer, tamper=True),
        "bad-signed-twice-same-key": signed(signed(h, k.signer), k.signer),
        "bad-signer-revoked": signed(h + blobs(2, k.signer.public_data), k.signer),
        "bad-signer-not-a-key": h + bytes([4]) + string(b"junk") + string(b"sig"),
        "bad-signature-missing": h + bytes([4]) + string(k.signer.public_data),
    }


def oracle(krl: Path, keys: list[Path]) -> list[str]:
    """ssh-keygen -Q's verdict for each key: ok, revoked, or error for a KRL it cannot load."""
    proc = subprocess.run(["ssh-keygen", "-Q", "-f", str(krl), *map(str, keys)], capture_output=True, text=True,
                          timeout=60)
    lines = proc.stdout.splitlines()
    if proc.returncode not in (0, 1) or len(lines) != len(keys):
        return ["error"] * len(keys)
    return ["revoked" if line.endswith(": REVOKED") else "ok" for line in lines]


def judged(krl: Path, key: Path) -> str:
    data = asyncssh.read_certificate(str(key)).public_data if key.name.endswith("-cert.pub") else \
        asyncssh.read_public_key(str(key)).public_data
    try:
        return "revoked" if revocation(str(krl), HostKey.of(data)) else "ok"
    except RevocationError:
        return "error"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return Keys(tmp_path_factory.mktemp("krl-keys"))


def test_every_layout_is_judged_as_ssh_keygen_judges_it(keys: Keys, tmp_path: Path) -> None:
    """Over every KRL and key, envdoctor's verdict is ssh-keygen -Q's; the malformed ones are
    refused by the oracle (they really are malformed), the others are not."""
    built = cases(keys)
    assert sum(name.startswith("bad-") for name in built) >= 20
    files = list(keys.files.values())
    disagreements = []
    for name, data in built.items():
        krl = tmp_path / name
        krl.write_bytes(data)
        want = oracle(krl, files)
        assert (want == ["error"] * len(files)) == name.startswith("bad-"), (name, want)
        got = [judged(krl, key) for key in files]
        if got != want:
            disagreements.append((name, want, got))
    assert not disagreements


def test_the_verdicts_are_not_all_alike(keys: Keys, tmp_path: Path) -> None:
    """The well-formed KRLs revoke some keys and not others (so the comparison above can fail)."""
    verdicts = set()
    for name, data in cases(keys).items():
        if not name.startswith("bad-"):
            krl = tmp_path / name
            krl.write_bytes(data)
            verdicts.update(oracle(krl, list(keys.files.values())))
    assert verdicts == {"ok", "revoked"}
