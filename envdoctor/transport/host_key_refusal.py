"""Why a host key was refused, in ssh's words (sshconnect.c, ``check_host_key``).

Pure: it gets the key the host presented (its type and fingerprint) and what known_hosts
says of the name it was looked up under. A key that differs from the one known_hosts
holds is ssh's "REMOTE HOST IDENTIFICATION HAS CHANGED", with the offending file and line
and the ``ssh-keygen -R`` that removes it; ``--accept-new`` is never the advice there (it
records unknown keys only, so it would fail the same way). An unknown key is another
problem, whose advice is ``--accept-new`` or ``ssh HOST`` once.
"""

from __future__ import annotations

import shlex

from envdoctor.errors import HostKeyChangedError, HostKeyError
from envdoctor.transport.known_hosts import HostKeys, KnownKey

#: sshkey_type()'s names, by the key type written in known_hosts or sent by the host.
_TYPE_NAMES = {
    "ssh-rsa": "RSA", "ssh-dss": "DSA", "ssh-ed25519": "ED25519", "sk-ssh-ed25519@openssh.com": "ED25519-SK",
    "sk-ecdsa-sha2-nistp256@openssh.com": "ECDSA-SK", "ssh-xmss@openssh.com": "XMSS",
    "rsa-sha2-256": "RSA", "rsa-sha2-512": "RSA",
}


def type_name(key_type: str) -> str:
    """``ED25519`` for ``ssh-ed25519``, as ssh names a key's type in its messages."""
    plain = key_type.removesuffix("-cert-v01@openssh.com")
    name = _TYPE_NAMES.get(plain) or ("ECDSA" if plain.startswith("ecdsa-sha2-") else plain)
    return f"{name}-CERT" if plain != key_type else name


def _place(key: KnownKey) -> tuple[str, str]:
    """(file, line) of a known_hosts entry (``where`` is ``file:line``)."""
    path, _, line = key.where.rpartition(":")
    return path, line


def offending(keys: HostKeys, presented_type: str) -> list[KnownKey]:
    """The entries a presented key contradicts: those of its own type (the one ssh names), or
    every trusted entry when none is of that type."""
    same = [k for k in keys.trusted if type_name(k.key_type) == type_name(presented_type)]
    return same or list(keys.trusted)


def removal_commands(name: str, entries: list[KnownKey]) -> list[str]:
    """``ssh-keygen -R NAME -f FILE`` for each file holding an offending entry, quoted for a
    shell (``[host]:port`` holds glob characters)."""
    files = dict.fromkeys(_place(k)[0] for k in entries)
    return [f"ssh-keygen -R {shlex.quote(name)} -f {shlex.quote(path)}" for path in files]


def changed_key(label: str, name: str, presented_type: str, fingerprint: str, keys: HostKeys) -> HostKeyChangedError:
    """The host presented a key other than the one(s) known_hosts lists for ``name``."""
    entries = offending(keys, presented_type)
    first = entries[0]
    more = f" (and {len(entries) - 1} more line(s))" if len(entries) > 1 else ""
    commands = " and ".join(f"`{c}`" for c in removal_commands(name, entries))
    return HostKeyChangedError(
        f"REMOTE HOST IDENTIFICATION HAS CHANGED for {label}: it sent the {type_name(presented_type)} key "
        f"{fingerprint}, and known_hosts holds another key for {name} "
        f"(Offending {type_name(first.key_type)} key in {first.where}{more})",
        hint=f"someone may be intercepting the connection, or the host was reinstalled; only once you have checked "
             f"that {fingerprint} is the host's key (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub on it), remove the "
             f"old key with {commands} and connect again",
    )


def not_certified(label: str, name: str, presented_type: str, fingerprint: str, keys: HostKeys) -> HostKeyError:
    """The host presented a plain key where known_hosts trusts only a certificate authority for it."""
    authority = keys.cert_authorities[0].where
    return HostKeyError(
        f"host key of {label} is not certified: it sent the plain {type_name(presented_type)} key {fingerprint}, "
        f"and known_hosts trusts only the @cert-authority in {authority} for {name}",
        hint="check the host's HostCertificate in its sshd_config, or ask whoever runs that authority",
    )


def unknown_key(label: str, name: str, presented_type: str, fingerprint: str, files: str, why: str) -> HostKeyError:
    """known_hosts has no entry at all for ``name``: a host never connected to."""
    return HostKeyError(
        f"host key of {label} is unknown: No {type_name(presented_type)} host key is known for {name} "
        f"(it sent {fingerprint}; looked up in {files or 'no file'}; {why})",
        hint="check the fingerprint out of band; if it is the host's, pass --accept-new to record it "
             "(or run `ssh HOST` once)",
    )
