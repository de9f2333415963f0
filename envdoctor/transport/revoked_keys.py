"""``RevokedHostKeys``: whether a host key is revoked by a file, read as OpenSSH reads it
(``sshkey_check_revoked``): an OpenSSH Key Revocation List (``ssh-keygen -k``) when the file
starts with the KRL magic, else a text list of public keys, one per line.

A host key is revoked when the file names it (a certificate by its bare key too), or, for a
host certificate, when it names the certificate's authority, or (a KRL) revokes the
certificate by serial number or key ID. A file that cannot be read, or a KRL that does not
parse, revokes every key: ssh refuses the host then, and so does envdoctor. The layout of a
KRL is OpenSSH's ``PROTOCOL.krl``; ``ssh-keygen -Q`` is the oracle in the tests.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import asyncssh

KRL_MAGIC = b"SSHKRL\n\0"
KRL_FORMAT_VERSION = 1
# Sections, and the subsections of a certificates section.
SECTION_CERTIFICATES, SECTION_EXPLICIT_KEY, SECTION_FINGERPRINT_SHA1 = 1, 2, 3
SECTION_SIGNATURE, SECTION_FINGERPRINT_SHA256 = 4, 5
CERT_SERIAL_LIST, CERT_SERIAL_RANGE, CERT_SERIAL_BITMAP, CERT_KEY_ID = 0x20, 0x21, 0x22, 0x23


class RevocationError(Exception):
    """The revoked keys file cannot be judged: every key counts as revoked."""


@dataclass(frozen=True)
class HostKey:
    """What revocation is judged on: the bare key's blob, and for a certificate its
    authority's key blob, serial number and key ID."""

    blob: bytes
    ca_blob: bytes | None = None
    serial: int | None = None
    key_id: str | None = None

    @classmethod
    def of(cls, key_data: bytes) -> HostKey:
        try:
            cert = asyncssh.public_key.decode_ssh_certificate(key_data)
        except (asyncssh.KeyImportError, ValueError):
            return cls(key_data)
        if cert.is_x509_chain:
            return cls(cert.key.public_data)
        # asyncssh keeps the serial number and key ID unexported; a certificate section that
        # applies refuses the key when they cannot be read (RevocationError), never passes it.
        return cls(cert.key.public_data, cert.signing_key.public_data, getattr(cert, "_serial", None),
                   getattr(cert, "_key_id", None))


def revocation(path: str, key: HostKey) -> str | None:
    """Why ``path`` revokes ``key`` (None when it does not); RevocationError when the file
    cannot be read or is a KRL that does not parse."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise RevocationError(f"cannot read revoked keys file {path}: {exc.strerror}") from None
    if data.startswith(KRL_MAGIC):
        return _krl_revokes(data, key, path)
    return _list_revokes(data, key, path)


def _list_revokes(data: bytes, key: HostKey, path: str) -> str | None:
    """A text list: each line a public key (``type base64 [comment]``) after spaces or tabs;
    empty lines and ``#`` comments are passed over (so is a line that starts with a NUL byte,
    which ends the C string ssh reads). Any other line that is no key makes the whole file
    unusable, as for ssh (``sshkey_in_file``): every host is then refused."""
    for number, line in enumerate(data.split(b"\n"), 1):
        text = line.lstrip(b" \t")
        if not text or text[:1] in (b"#", b"\0"):
            continue
        try:
            listed = asyncssh.import_public_key(text)
        except (asyncssh.KeyImportError, ValueError):
            raise RevocationError(f"revoked keys file {path} line {number} is not a public key") from None
        blob = listed.public_data
        if blob == key.blob:
            return f"host key revoked by file {path}"
        if key.ca_blob is not None and blob == key.ca_blob:
            return f"host certificate's authority revoked by file {path}"
    return None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, size: int) -> bytes:
        if size < 0 or self.at + size > len(self.data):
            raise RevocationError("truncated")
        chunk = self.data[self.at:self.at + size]
        self.at += size
        return chunk

    def byte(self) -> int:
        return self.take(1)[0]

    def uint32(self) -> int:
        return int.from_bytes(self.take(4), "big")

    def uint64(self) -> int:
        return int.from_bytes(self.take(8), "big")

    def string(self) -> bytes:
        return self.take(self.uint32())

    def done(self) -> bool:
        return self.at == len(self.data)


def _krl_revokes(data: bytes, key: HostKey, path: str) -> str | None:
    try:
        return _krl_sections(data, key, path)
    except RevocationError as exc:
        raise RevocationError(f"revoked keys file {path} is a KRL that does not parse ({exc})") from None


def _krl_sections(data: bytes, key: HostKey, path: str) -> str | None:
    reader = _Reader(data)
    reader.take(len(KRL_MAGIC))
    if reader.uint32() != KRL_FORMAT_VERSION:
        raise RevocationError("unsupported format version")
    reader.uint64()  # KRL version
    reader.uint64()  # generated date
    reader.uint64()  # flags
    reader.string()  # reserved
    reader.string()  # comment
    hashes = {SECTION_FINGERPRINT_SHA1: hashlib.sha1(key.blob).digest(),
              SECTION_FINGERPRINT_SHA256: hashlib.sha256(key.blob).digest()}
    ca_hashes = ({SECTION_FINGERPRINT_SHA1: hashlib.sha1(key.ca_blob).digest(),
                  SECTION_FINGERPRINT_SHA256: hashlib.sha256(key.ca_blob).digest()} if key.ca_blob else {})
    found: str | None = None
    while not reader.done():
        kind, body = reader.byte(), _Reader(reader.string())
        if kind == SECTION_SIGNATURE:
            break  # signatures close the list (ssh does not verify them for RevokedHostKeys)
        if kind == SECTION_CERTIFICATES:
            found = found or _certificate_section(body, key)
        elif kind in (SECTION_EXPLICIT_KEY, SECTION_FINGERPRINT_SHA1, SECTION_FINGERPRINT_SHA256):
            while not body.done():
                entry = body.string()
                if kind == SECTION_EXPLICIT_KEY:
                    if entry == key.blob:
                        found = found or "host key"
                    elif key.ca_blob is not None and entry == key.ca_blob:
                        found = found or "host certificate's authority"
                elif entry == hashes[kind]:
                    found = found or "host key"
                elif ca_hashes and entry == ca_hashes[kind]:
                    found = found or "host certificate's authority"
        else:
            raise RevocationError(f"unknown section {kind}")
    return f"{found} revoked by file {path}" if found else None


def _certificate_section(body: _Reader, key: HostKey) -> str | None:
    ca_blob = body.string()  # empty: certificates of any authority
    body.string()  # reserved
    applies = key.ca_blob is not None and (not ca_blob or ca_blob == key.ca_blob)
    found = None
    while not body.done():
        kind, sub = body.byte(), _Reader(body.string())
        if applies and (key.key_id if kind == CERT_KEY_ID else key.serial) is None:
            raise RevocationError("the host certificate's serial number or key ID could not be read")
        if kind == CERT_SERIAL_LIST:
            while not sub.done():
                if sub.uint64() == key.serial and applies:
                    found = "host certificate (by serial number)"
        elif kind == CERT_SERIAL_RANGE:
            low, high = sub.uint64(), sub.uint64()
            if applies and key.serial is not None and low <= key.serial <= high:
                found = "host certificate (by serial number)"
        elif kind == CERT_SERIAL_BITMAP:
            offset, bitmap = sub.uint64(), int.from_bytes(sub.string(), "big")
            if applies and key.serial is not None and key.serial >= offset and bitmap >> (key.serial - offset) & 1:
                found = "host certificate (by serial number)"
        elif kind == CERT_KEY_ID:
            while not sub.done():
                key_id = sub.string().decode("utf-8", "replace")
                if applies and key_id == key.key_id:
                    found = "host certificate (by key ID)"
        else:
            raise RevocationError(f"unknown certificate subsection {kind:#x}")
    return found
