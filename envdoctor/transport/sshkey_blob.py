"""SSH wire data and public key blobs, read as OpenSSH 9.2 reads them (sshbuf, sshkey.c).

A KRL names certificate authorities and signing keys by their blobs, and ssh refuses the
whole KRL when one of them is not a key ``sshkey_from_blob`` accepts: a key type it knows
(the exact name, or for a plain key its short name in any case: ``RSA``, ``ed25519``), each
part well formed (bignums not negative nor over 16384 bits, an RSA modulus of 1024 bits or
more, an Ed25519 key of 32 bytes, an ECDSA curve name matching the type and a point on the
curve that ssh's own checks accept), nothing after it. Two keys are the same key when their
type and public parts are (``sshkey_equal``), whatever the bytes: :class:`KeyIdentity`.
"""

from __future__ import annotations

from dataclasses import dataclass

SSHBUF_MAX_BIGNUM = 16384 // 8
SSHBUF_MAX_ECPOINT = (528 * 2 // 8) + 1
RSA_MIN_BITS = 1024
ED25519_PK_BYTES = 32


class WireError(ValueError):
    """The data is not what OpenSSH would read there."""


class Reader:
    """OpenSSH's sshbuf getters over bytes: each raises WireError where sshbuf fails."""

    def __init__(self, data: bytes, at: int = 0) -> None:
        self.data, self.at = data, at

    def take(self, size: int) -> bytes:
        if size < 0 or self.at + size > len(self.data):
            raise WireError("truncated")
        chunk = self.data[self.at : self.at + size]
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

    def cstring(self) -> bytes:
        """A string holding no NUL but, at most, a last one (which is dropped)."""
        value = self.string()
        if b"\0" in value[:-1]:
            raise WireError("a NUL inside a string")
        return value[:-1] if value.endswith(b"\0") else value

    def bignum(self) -> int:
        """sshbuf_get_bignum2: not negative, at most 16384 bits (one leading zero byte allowed)."""
        value = self.string()
        if value and value[0] & 0x80:
            raise WireError("a negative number")
        if len(value) > SSHBUF_MAX_BIGNUM + 1 or len(value) == SSHBUF_MAX_BIGNUM + 1 and value[0]:
            raise WireError("a number too large")
        return int.from_bytes(value, "big")

    def done(self) -> bool:
        return self.at == len(self.data)


_CURVES = {"ecdsa-sha2-nistp256": "nistp256", "ecdsa-sha2-nistp384": "nistp384", "ecdsa-sha2-nistp521": "nistp521",
           "sk-ecdsa-sha2-nistp256@openssh.com": "nistp256",
           "webauthn-sk-ecdsa-sha2-nistp256@openssh.com": "nistp256"}
PLAIN_TYPES = {"ssh-ed25519": "ed25519", "sk-ssh-ed25519@openssh.com": "ed25519-sk", "ssh-dss": "dsa",
               "ssh-rsa": "rsa", "rsa-sha2-256": "rsa", "rsa-sha2-512": "rsa",
               **{name: ("ecdsa-sk" if "sk-" in name else "ecdsa") for name in _CURVES}}
SHORT_NAMES = {"ed25519": "ed25519", "ed25519-sk": "ed25519-sk", "ecdsa": "ecdsa", "ecdsa-sk": "ecdsa-sk",
               "dsa": "dsa", "rsa": "rsa"}
CERT_TYPES = frozenset({"ssh-ed25519-cert-v01@openssh.com", "sk-ssh-ed25519-cert-v01@openssh.com",
                        "ecdsa-sha2-nistp256-cert-v01@openssh.com", "ecdsa-sha2-nistp384-cert-v01@openssh.com",
                        "ecdsa-sha2-nistp521-cert-v01@openssh.com", "sk-ecdsa-sha2-nistp256-cert-v01@openssh.com",
                        "ssh-dss-cert-v01@openssh.com", "ssh-rsa-cert-v01@openssh.com",
                        "rsa-sha2-256-cert-v01@openssh.com", "rsa-sha2-512-cert-v01@openssh.com"})
#: The order of each NIST curve's group (public facts of FIPS 186).
_ORDERS = {
    "nistp256": 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551,
    "nistp384": int("FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFC7634D81F4372DDF581A0DB248B0A77AECEC196ACCC52973", 16),
    "nistp521": int("01FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFA"
                    "51868783BF2F966B7FCC0148F709A5D03BB5C9B8899C47AEBB6FB71E91386409", 16),
}


@dataclass(frozen=True)
class KeyIdentity:
    """What ``sshkey_equal`` compares: the key's type and its public parts."""

    kind: str
    parts: tuple[object, ...]


def _ec_point(curve: str, point: bytes) -> tuple[int, int]:
    """sshbuf_get_eckey and sshkey_ec_validate_public: an uncompressed point on the curve, its
    coordinates longer than half the order and below the order less one."""
    from cryptography.hazmat.primitives.asymmetric import ec

    if not point or len(point) > SSHBUF_MAX_ECPOINT or point[0] != 4:
        raise WireError("not an uncompressed EC point")
    group = {"nistp256": ec.SECP256R1(), "nistp384": ec.SECP384R1(), "nistp521": ec.SECP521R1()}[curve]
    try:
        numbers = ec.EllipticCurvePublicKey.from_encoded_point(group, point).public_numbers()
    except ValueError:
        raise WireError("an EC point not on its curve") from None
    order = _ORDERS[curve]
    half = order.bit_length() // 2
    if min(numbers.x.bit_length(), numbers.y.bit_length()) <= half or max(numbers.x, numbers.y) >= order - 1:
        raise WireError("an EC point ssh's checks refuse")
    return numbers.x, numbers.y


def _certificate(blob: bytes) -> KeyIdentity:
    """A certificate as a key: ssh parses and verifies it; asyncssh does the same here."""
    import asyncssh

    try:
        asyncssh.public_key.decode_ssh_certificate(blob)
    except (asyncssh.KeyImportError, ValueError):
        raise WireError("not a valid certificate") from None
    return KeyIdentity("cert", (blob,))


def key_identity(blob: bytes) -> KeyIdentity:
    """The key a blob holds, as ``sshkey_from_blob`` accepts it; WireError where it refuses."""
    reader = Reader(blob)
    name = reader.cstring().decode("latin-1")
    if name in CERT_TYPES:
        return _certificate(blob)
    kind = PLAIN_TYPES.get(name) or SHORT_NAMES.get(name.lower())
    if kind is None:
        raise WireError(f"unknown key type {name!r}")
    parts: tuple[object, ...]
    if kind == "rsa":
        exponent, modulus = reader.bignum(), reader.bignum()
        if modulus.bit_length() < RSA_MIN_BITS:
            raise WireError("an RSA key under 1024 bits")
        parts = (exponent, modulus)
    elif kind == "dsa":
        parts = (reader.bignum(), reader.bignum(), reader.bignum(), reader.bignum())
    elif kind.startswith("ed25519"):
        key = reader.string()
        if len(key) != ED25519_PK_BYTES:
            raise WireError("an Ed25519 key that is not 32 bytes")
        parts = (key,)
    else:
        curve = _CURVES.get(name)  # (a short name: ssh finds no curve for it)
        if curve is None or reader.cstring().decode("latin-1") != curve:
            raise WireError("an ECDSA key whose curve is not its type's")
        parts = (curve, _ec_point(curve, reader.string()))
    if kind.endswith("-sk"):
        parts += (reader.cstring(),)  # the security key's application
    if not reader.done():
        raise WireError("data after the key")
    return KeyIdentity(kind, parts)
