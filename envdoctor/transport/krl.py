"""OpenSSH Key Revocation Lists read as OpenSSH 9.2's krl.c reads them (``ssh_krl_from_blob``).

Any deviation from that reading is a parse failure, which revokes every key (ssh refuses every
host then): a header field out of place, a comment or key ID holding a NUL, a section ssh
does not know or with bytes left over, a revocation section after a signature, a
certificate authority or signing key that is not a key ssh accepts (:mod:`sshkey_blob`),
serial number 0, a range whose low end is above its high end, a bitmap past 2^64, a
fingerprint of the wrong length, a signature that does not verify, a key that signs twice,
or signing keys the list itself revokes. ``ssh-keygen -Q`` is the oracle in the tests.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from envdoctor.transport.sshkey_blob import KeyIdentity, Reader, WireError, key_identity

KRL_MAGIC = b"SSHKRL\n\0"
KRL_FORMAT_VERSION = 1
SECTION_CERTIFICATES, SECTION_EXPLICIT_KEY, SECTION_FINGERPRINT_SHA1 = 1, 2, 3
SECTION_SIGNATURE, SECTION_FINGERPRINT_SHA256 = 4, 5
CERT_SERIAL_LIST, CERT_SERIAL_RANGE, CERT_SERIAL_BITMAP, CERT_KEY_ID = 0x20, 0x21, 0x22, 0x23
U64 = 1 << 64
#: What sshbuf_load_file takes at most (SSHBUF_SIZE_MAX): a larger file is not read.
MAX_KRL_BYTES = 0x8000000


class KRLError(ValueError):
    """The KRL does not parse as ssh parses it."""


@dataclass
class CertRevocations:
    """The certificates revoked for one authority (or for any: the key None)."""

    ranges: list[tuple[int, int]] = field(default_factory=list)
    bitmaps: list[tuple[int, int]] = field(default_factory=list)  # (first serial, bits)
    key_ids: set[bytes] = field(default_factory=set)

    def serial_revoked(self, serial: int) -> bool:
        return any(low <= serial <= high for low, high in self.ranges) or any(
            serial >= first and bits >> (serial - first) & 1 for first, bits in self.bitmaps)


@dataclass
class KRL:
    keys: set[bytes] = field(default_factory=set)
    sha1: set[bytes] = field(default_factory=set)
    sha256: set[bytes] = field(default_factory=set)
    certificates: dict[KeyIdentity | None, CertRevocations] = field(default_factory=dict)

    def key_revoked(self, blob: bytes) -> bool:
        """is_key_revoked for a plain key blob: by fingerprint or as an explicit key."""
        return (hashlib.sha1(blob).digest() in self.sha1 or hashlib.sha256(blob).digest() in self.sha256
                or blob in self.keys)

    def certificate_revoked(self, ca: KeyIdentity, serial: int, key_id: bytes) -> str | None:
        """is_cert_revoked for its authority, then for any authority."""
        for revocations in (self.certificates.get(ca), self.certificates.get(None)):
            if revocations is None:
                continue
            if key_id in revocations.key_ids:
                return "by key ID"
            if serial != 0 and revocations.serial_revoked(serial):  # (serial 0: none was given)
                return "by serial number"
        return None


def _key(blob: bytes, what: str) -> KeyIdentity:
    try:
        return key_identity(blob)
    except WireError as exc:
        raise KRLError(f"its {what} is not a key ssh accepts ({exc})") from None


def _verify(blob: bytes, signature: bytes, signed: bytes) -> None:
    """sshkey_verify over the KRL up to the signature."""
    import asyncssh

    try:
        key = asyncssh.public_key.decode_ssh_public_key(blob)
    except (asyncssh.KeyImportError, ValueError):
        try:
            key = asyncssh.public_key.decode_ssh_certificate(blob).key
        except (asyncssh.KeyImportError, ValueError):
            raise KRLError("a signing key that cannot verify") from None
    try:
        good = key.verify(signed, signature)
    except (asyncssh.Error, ValueError, TypeError):
        good = False
    if not good:
        raise KRLError("a signature that does not verify")


def _signers(data: bytes, start: int) -> list[tuple[KeyIdentity, bytes]]:
    """The first pass: every section framed; signatures last, each verified, no key twice."""
    reader = Reader(data, start)
    signers: list[tuple[KeyIdentity, bytes]] = []
    while not reader.done():
        kind, blob = reader.byte(), reader.string()
        if kind != SECTION_SIGNATURE:
            if signers:
                raise KRLError("a section after a signature")
            continue
        signer = _key(blob, "signing key")
        signed = data[: reader.at]
        _verify(blob, reader.string(), signed)
        if any(signer == seen for seen, _ in signers):
            raise KRLError("signed twice with the same key")
        signers.append((signer, blob))
    return signers


def _blobs(body: Reader, size: int, into: set[bytes]) -> None:
    while not body.done():
        entry = body.string()
        if size and len(entry) != size:
            raise KRLError(f"a fingerprint of {len(entry)} bytes where {size} belong")
        into.add(entry)


def _serial(low: int, high: int) -> None:
    if low > high or low == 0:
        raise KRLError(f"a serial range {low}-{high}")


def _certificates(body: Reader, krl: KRL) -> None:
    """parse_revoked_certs: an authority (empty: any), reserved, then subsections."""
    blob = body.string()
    body.string()  # reserved
    ca = _key(blob, "certificate authority") if blob else None
    while not body.done():
        kind, sub = body.byte(), Reader(body.string())
        revocations = krl.certificates.setdefault(ca, CertRevocations())
        if kind == CERT_SERIAL_LIST:
            while not sub.done():
                serial = sub.uint64()
                _serial(serial, serial)
                revocations.ranges.append((serial, serial))
        elif kind == CERT_SERIAL_RANGE:
            low, high = sub.uint64(), sub.uint64()
            _serial(low, high)
            revocations.ranges.append((low, high))
        elif kind == CERT_SERIAL_BITMAP:
            first, bits = sub.uint64(), sub.bignum()
            if bits & 1 and first == 0 or first and first + bits.bit_length() - 1 >= U64:
                raise KRLError("a serial bitmap holding serial 0 or past 2^64")
            revocations.bitmaps.append((first, bits))
        elif kind == CERT_KEY_ID:
            while not sub.done():
                revocations.key_ids.add(sub.cstring())
        else:
            raise KRLError(f"unknown certificate subsection {kind:#x}")
        if not sub.done():
            raise KRLError(f"bytes left over in certificate subsection {kind:#x}")


def parse_krl(data: bytes) -> KRL:
    """The revocations of a KRL (``data`` starts with the magic); KRLError where ssh fails."""
    try:
        return _parse(data)
    except WireError as exc:
        raise KRLError(str(exc)) from None


def _parse(data: bytes) -> KRL:
    if len(data) > MAX_KRL_BYTES:
        raise KRLError("larger than ssh reads")
    header = Reader(data, len(KRL_MAGIC))
    if header.uint32() != KRL_FORMAT_VERSION:
        raise KRLError("unsupported format version")
    header.uint64(), header.uint64(), header.uint64()  # KRL version, generated date, flags
    header.string()  # reserved
    header.cstring()  # comment
    signers = _signers(data, header.at)
    krl = KRL()
    reader = Reader(data, header.at)
    while not reader.done():
        kind, body = reader.byte(), Reader(reader.string())
        if kind == SECTION_SIGNATURE:
            reader.string()  # (verified in the first pass)
            continue
        if kind == SECTION_CERTIFICATES:
            _certificates(body, krl)
        elif kind in (SECTION_EXPLICIT_KEY, SECTION_FINGERPRINT_SHA1, SECTION_FINGERPRINT_SHA256):
            into = {SECTION_EXPLICIT_KEY: krl.keys, SECTION_FINGERPRINT_SHA1: krl.sha1,
                    SECTION_FINGERPRINT_SHA256: krl.sha256}[kind]
            _blobs(body, {SECTION_EXPLICIT_KEY: 0, SECTION_FINGERPRINT_SHA1: 20, SECTION_FINGERPRINT_SHA256: 32}[kind],
                   into)
        else:
            raise KRLError(f"unknown section {kind}")
    if signers and all(krl.key_revoked(_plain(blob)) for _, blob in signers):
        raise KRLError("every key that signed it is revoked by it")
    return krl


def _plain(blob: bytes) -> bytes:
    """A key's plain blob as ssh serialises it again (a certificate's key without the
    certificate; numbers in their shortest form): what its fingerprints are taken of."""
    import asyncssh

    for decode in (lambda b: asyncssh.public_key.decode_ssh_certificate(b).key, asyncssh.public_key.decode_ssh_public_key):
        try:
            return decode(blob).public_data
        except (asyncssh.KeyImportError, ValueError):
            continue
    return blob
