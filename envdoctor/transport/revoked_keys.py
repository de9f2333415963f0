"""``RevokedHostKeys``: whether a host key is revoked by a file, read as OpenSSH reads it
(``sshkey_check_revoked``): an OpenSSH Key Revocation List (``ssh-keygen -k``) when the file
starts with the KRL magic, else a text list of public keys, one per line.

A host key is revoked when the file names it (a certificate by its bare key too), or, for a
host certificate, when it names the certificate's authority, or (a KRL) revokes the
certificate by serial number or key ID. A file that cannot be read, or a KRL that does not
parse as OpenSSH parses it (:mod:`krl`), revokes every key: ssh refuses the host then, and
so does envdoctor. ``ssh-keygen -Q`` is the oracle in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncssh

from envdoctor.transport.krl import KRL_MAGIC, MAX_KRL_BYTES, KRLError, parse_krl
from envdoctor.transport.sshkey_blob import KeyIdentity, WireError, key_identity


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
            try:  # (as ssh serialises it again: what its fingerprints and KRL entries are of)
                return cls(asyncssh.public_key.decode_ssh_public_key(key_data).public_data)
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
            data = handle.read(MAX_KRL_BYTES + 1)
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


def _krl_revokes(data: bytes, key: HostKey, path: str) -> str | None:
    """ssh_krl_check_key: the key (its fingerprints or itself), for a certificate its serial
    number or key ID under its authority (or any), then the authority's own key."""
    try:
        krl = parse_krl(data)
    except KRLError as exc:
        raise RevocationError(f"revoked keys file {path} is a KRL that does not parse ({exc})") from None
    found = None
    if krl.key_revoked(key.blob):
        found = "host key"
    elif key.ca_blob is not None:
        if key.serial is None or key.key_id is None:
            if krl.certificates:  # (a certificate section could apply: refuse rather than pass it)
                raise RevocationError("the host certificate's serial number or key ID could not be read")
        else:
            how = krl.certificate_revoked(_identity(key.ca_blob), key.serial, key.key_id.encode("utf-8"))
            found = f"host certificate ({how})" if how else None
        if found is None and krl.key_revoked(key.ca_blob):
            found = "host certificate's authority"
    return f"{found} revoked by file {path}" if found else None


def _identity(blob: bytes) -> KeyIdentity:
    try:
        return key_identity(blob)
    except WireError:
        return KeyIdentity("unparsed", (blob,))  # (matches no authority a KRL names)
