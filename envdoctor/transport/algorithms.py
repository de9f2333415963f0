"""The algorithm lists ssh would offer: ``Ciphers``, ``KexAlgorithms``, ``MACs``,
``HostKeyAlgorithms`` and ``PubkeyAcceptedAlgorithms``, each read and assembled as OpenSSH
does, and what a connection offers of them; and ``CASignatureAlgorithms``, what a host
certificate's authority may have signed it with.

``ssh -G`` prints the assembled lists; without an ``ssh`` binary, :func:`assemble` builds
them as OpenSSH 9's ``kex_assemble_names`` does (``+`` appends to the defaults, ``-``
removes patterns from them, ``^`` puts names first; otherwise each name is a pattern over
what ssh knows, in ``ssh -Q`` order) and :func:`check_spec` refuses a value as
``readconf.c`` does. The tables are OpenSSH 9.2's (``ssh -G -F /dev/null`` and ``ssh -Q``).

The user's list is the policy: a connection offers nothing outside it, so envdoctor never
negotiates a key exchange, MAC or host key signature that ssh would refuse (asyncssh's own
defaults include ``diffie-hellman-group14-sha1`` and SHA-1 ``ssh-rsa`` host keys, which
OpenSSH 8.8+ no longer accepts).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from envdoctor.errors import ConfigError


@dataclass(frozen=True)
class Kind:
    """One algorithm list of the SSH config."""

    keyword: str  # as the config spells it
    what: str  # in messages: "ciphers", "key exchange algorithms", ...
    defaults: tuple[str, ...]  # OpenSSH's default list, in its order
    known: tuple[str, ...]  # what OpenSSH knows, in ``ssh -Q`` order (patterns match over it)
    bad_spec: str  # readconf.c's complaint about a name it does not know
    #: Key types: a name may be a pattern (``sshkey_names_valid2`` with wildcards), and a plain
    #: key type's short name (``RSA``, ``ED25519``) is accepted in any case.
    key_types: bool = False


CIPHERS = Kind(
    "Ciphers", "ciphers",
    ("chacha20-poly1305@openssh.com", "aes128-ctr", "aes192-ctr", "aes256-ctr", "aes128-gcm@openssh.com",
     "aes256-gcm@openssh.com"),
    ("3des-cbc", "aes128-cbc", "aes192-cbc", "aes256-cbc", "aes128-ctr", "aes192-ctr", "aes256-ctr",
     "aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com"),
    "Bad SSH2 cipher spec",
)
KEX = Kind(
    "KexAlgorithms", "key exchange algorithms",
    ("sntrup761x25519-sha512", "sntrup761x25519-sha512@openssh.com", "curve25519-sha256",
     "curve25519-sha256@libssh.org", "ecdh-sha2-nistp256", "ecdh-sha2-nistp384", "ecdh-sha2-nistp521",
     "diffie-hellman-group-exchange-sha256", "diffie-hellman-group16-sha512", "diffie-hellman-group18-sha512",
     "diffie-hellman-group14-sha256"),
    ("diffie-hellman-group1-sha1", "diffie-hellman-group14-sha1", "diffie-hellman-group14-sha256",
     "diffie-hellman-group16-sha512", "diffie-hellman-group18-sha512", "diffie-hellman-group-exchange-sha1",
     "diffie-hellman-group-exchange-sha256", "ecdh-sha2-nistp256", "ecdh-sha2-nistp384", "ecdh-sha2-nistp521",
     "curve25519-sha256", "curve25519-sha256@libssh.org", "sntrup761x25519-sha512",
     "sntrup761x25519-sha512@openssh.com"),
    "Bad SSH2 KexAlgorithms",
)
MACS = Kind(
    "MACs", "MACs",
    ("umac-64-etm@openssh.com", "umac-128-etm@openssh.com", "hmac-sha2-256-etm@openssh.com",
     "hmac-sha2-512-etm@openssh.com", "hmac-sha1-etm@openssh.com", "umac-64@openssh.com", "umac-128@openssh.com",
     "hmac-sha2-256", "hmac-sha2-512", "hmac-sha1"),
    ("hmac-sha1", "hmac-sha1-96", "hmac-sha2-256", "hmac-sha2-512", "hmac-md5", "hmac-md5-96",
     "umac-64@openssh.com", "umac-128@openssh.com", "hmac-sha1-etm@openssh.com", "hmac-sha1-96-etm@openssh.com",
     "hmac-sha2-256-etm@openssh.com", "hmac-sha2-512-etm@openssh.com", "hmac-md5-etm@openssh.com",
     "hmac-md5-96-etm@openssh.com", "umac-64-etm@openssh.com", "umac-128-etm@openssh.com"),
    "Bad SSH2 MAC spec",
)
HOST_KEYS = Kind(
    "HostKeyAlgorithms", "host key algorithms",
    ("ssh-ed25519-cert-v01@openssh.com", "ecdsa-sha2-nistp256-cert-v01@openssh.com",
     "ecdsa-sha2-nistp384-cert-v01@openssh.com", "ecdsa-sha2-nistp521-cert-v01@openssh.com",
     "sk-ssh-ed25519-cert-v01@openssh.com", "sk-ecdsa-sha2-nistp256-cert-v01@openssh.com",
     "rsa-sha2-512-cert-v01@openssh.com", "rsa-sha2-256-cert-v01@openssh.com", "ssh-ed25519",
     "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com",
     "sk-ecdsa-sha2-nistp256@openssh.com", "rsa-sha2-512", "rsa-sha2-256"),
    ("ssh-ed25519", "ssh-ed25519-cert-v01@openssh.com", "sk-ssh-ed25519@openssh.com",
     "sk-ssh-ed25519-cert-v01@openssh.com", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp256-cert-v01@openssh.com",
     "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp384-cert-v01@openssh.com", "ecdsa-sha2-nistp521",
     "ecdsa-sha2-nistp521-cert-v01@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
     "sk-ecdsa-sha2-nistp256-cert-v01@openssh.com", "webauthn-sk-ecdsa-sha2-nistp256@openssh.com", "ssh-dss",
     "ssh-dss-cert-v01@openssh.com", "ssh-rsa", "ssh-rsa-cert-v01@openssh.com", "rsa-sha2-256",
     "rsa-sha2-256-cert-v01@openssh.com", "rsa-sha2-512", "rsa-sha2-512-cert-v01@openssh.com"),
    "Bad key types",
    key_types=True,
)
#: The signature algorithms a client key may sign with (``PubkeyAcceptedKeyTypes`` before
#: OpenSSH 8.5): OpenSSH's defaults are those of HostKeyAlgorithms, over the same names.
PUBKEY = Kind("PubkeyAcceptedAlgorithms", "public key signature algorithms", HOST_KEYS.defaults, HOST_KEYS.known,
              "Bad key types", key_types=True)
#: The signature algorithms a certificate authority may have signed a host certificate with:
#: names as ``ssh -Q sig`` lists them. SHA-1 ``ssh-rsa`` is not among OpenSSH's defaults.
CA_SIGNATURES = Kind(
    "CASignatureAlgorithms", "CA signature algorithms",
    ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com",
     "sk-ecdsa-sha2-nistp256@openssh.com", "rsa-sha2-512", "rsa-sha2-256"),
    ("ssh-ed25519", "sk-ssh-ed25519@openssh.com", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
     "sk-ecdsa-sha2-nistp256@openssh.com", "webauthn-sk-ecdsa-sha2-nistp256@openssh.com", "ssh-dss", "ssh-rsa",
     "rsa-sha2-256", "rsa-sha2-512"),
    "Bad key types",
    key_types=True,
)
#: By the config keyword, lower-cased.
KINDS = {kind.keyword.lower(): kind for kind in (CIPHERS, KEX, MACS, HOST_KEYS, PUBKEY, CA_SIGNATURES)}
#: What ssh -G stops with when a key type list assembles to nothing (a ``!`` pattern, a short name).
EMPTY_LIST_ERRORS = {HOST_KEYS: "expand HostKeyAlgorithms: invalid argument",
                     PUBKEY: "fill_default_options: pubkey_accepted_algos: invalid argument",
                     CA_SIGNATURES: "fill_default_options: ca_sign_algorithms: invalid argument"}
_CERT_SUFFIX = "-cert-v01@openssh.com"


def signature_algorithms(allowed: Sequence[str] | None, supported: Iterable[str]) -> list[str]:
    """asyncssh's ``signature_algs`` for ssh's ``PubkeyAcceptedAlgorithms`` (None: OpenSSH's
    defaults): the plain signature algorithms the list names, a certificate's as its key's
    (asyncssh checks a certificate by the signature algorithm of its key). Empty when no
    key may sign at all: then ssh offers no key, and neither may the connection."""
    allowed = PUBKEY.defaults if allowed is None else allowed
    plain = dict.fromkeys(name[:-len(_CERT_SUFFIX)] if name.endswith(_CERT_SUFFIX) else name for name in allowed)
    have = set(supported)
    return [name for name in plain if name in have]

#: Short names OpenSSH accepts for plain key types, in any case (``sshkey_type_from_name``).
_KEY_SHORT_NAMES = frozenset({"rsa", "dsa", "ecdsa", "ecdsa-sk", "ed25519", "ed25519-sk"})


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern.replace("[", "[[]")) for pattern in patterns)


def _valid_name(kind: Kind, name: str) -> bool:
    if name in kind.known:
        return True
    if not kind.key_types:
        return False
    if name.lower() in _KEY_SHORT_NAMES:
        return True
    # A pattern that matches (or, negated, excludes) any key type is accepted.
    pattern = name[1:] if name.startswith("!") else name
    return any(_matches(known, (pattern,)) for known in kind.known)


def check_spec(kind: Kind, value: str, where: str) -> None:
    """Refuse a value as ssh's reader does: a ``-`` list is patterns, unchecked; otherwise
    every name up to the first empty one must be one ssh knows."""
    if value.startswith("-"):
        return
    names = value[1:] if value[:1] in ("+", "^") else value
    checked = names.split(",")
    checked = checked[:checked.index("")] if "" in checked else checked
    if not names or not all(_valid_name(kind, name) for name in checked):
        raise ConfigError(f"{where}: {kind.bad_spec} {value!r}",
                          hint=f"the {kind.what} ssh knows: {', '.join(kind.known)}")


def assemble(kind: Kind, value: str | None) -> tuple[str, ...] | None:
    """The list ssh offers for a (checked) value, as ``kex_assemble_names`` builds it: ``-``
    removes patterns from the defaults; otherwise (``+`` after the defaults, ``^`` before
    them) each name is a pattern over what ssh knows, in ``ssh -Q`` order, repeats dropped.
    None: OpenSSH's defaults, and where ssh keeps no list (nothing matched, or a ``!``
    pattern): ``ssh -G`` then prints none."""
    if not value:
        return None
    if value.startswith("-"):
        patterns = value[1:].split(",")
        return tuple(name for name in kind.defaults if not _matches(name, patterns))
    if value.startswith("+"):
        tokens = [*kind.defaults, *value[1:].split(",")]
    elif value.startswith("^"):
        tokens = [*value[1:].split(","), *kind.defaults]
    else:
        tokens = value.split(",")
    if any(token.startswith("!") for token in tokens):
        return None
    names = [name for token in tokens if token for name in kind.known if _matches(name, (token,))]
    return tuple(dict.fromkeys(names)) or None


def usable(kind: Kind, allowed: Sequence[str] | None, supported: Iterable[str], label: str) -> list[str]:
    """``allowed`` (ssh's list, in its order; None: OpenSSH's defaults) that asyncssh
    ``supported``; a ConfigError naming both when nothing is left, since ssh would not
    connect either."""
    allowed = kind.defaults if allowed is None else allowed
    have = set(supported)
    found = [name for name in allowed if name in have]
    if not found:
        raise ConfigError(
            f"{label}: none of the {kind.what} ssh would offer ({', '.join(allowed) or 'none'}) can be used "
            f"(asyncssh has {', '.join(sorted(have & set(kind.known)))})",
            hint=f"allow one of those in the {kind.keyword} line of the SSH config")
    return found


#: OpenSSH's post-quantum hybrids before 9.9 (sntrup761, which asyncssh runs only with
#: liboqs) and the one OpenSSH adopted after them (ML-KEM, which asyncssh runs without it).
_SNTRUP = ("sntrup761x25519-sha512", "sntrup761x25519-sha512@openssh.com")
_MLKEM = "mlkem768x25519-sha256"


def kex_offered(allowed: Sequence[str] | None, supported: Iterable[str], label: str) -> list[str]:
    """The key exchange methods to offer: ssh's list that asyncssh has, except that where the
    list asks for the sntrup761 hybrid and asyncssh cannot run it, the ML-KEM hybrid stands
    in its place. Both resist a future quantum computer, and OpenSSH 9.9+ offers ML-KEM
    first itself; without this, a run from a host with OpenSSH 9.2 would fall back to plain
    curve25519 against a server that offers ML-KEM."""
    have = set(supported)
    allowed = KEX.defaults if allowed is None else allowed
    asked = [name for name in allowed if name in _SNTRUP]
    if asked and _MLKEM in have and _MLKEM not in allowed and not any(name in have for name in asked):
        at = next(i for i, name in enumerate(allowed) if name in _SNTRUP)
        allowed = (*allowed[:at], _MLKEM, *allowed[at:])
    return usable(KEX, allowed, have, label)
