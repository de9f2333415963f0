"""known_hosts files read as OpenSSH reads them, and the host-key policy of a connection.

Pure: keys stay ``(type, blob)`` pairs, so this module needs no asyncssh. The name a key is
looked up under is HostKeyAlias when set, else ``host`` (port 22) or ``[host]:port``
(sshconnect.c's ``get_hostfile_hostname_ipaddr``); patterns are comma lists with ``*``,
``?`` and ``!``, or hashed ``|1|salt|hmac``. ``@revoked`` keys are collected from every file
and every line, whatever host or port they name: a key revoked anywhere is never trusted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from envdoctor.transport.ssh_config import match_pattern

MAX_KNOWN_HOSTS_BYTES = 16 * 1024 * 1024

#: The policies a connection can have (see :func:`host_key_policy`).
STRICT, ACCEPT_NEW, NO_CHECK = "strict", "accept-new", "no-check"


@dataclass(frozen=True)
class KnownKey:
    """One key line: its marker (``""``, ``cert-authority`` or ``revoked``), key and place."""

    marker: str
    key_type: str
    blob: bytes
    where: str

    @property
    def openssh(self) -> str:
        return f"{self.key_type} {base64.b64encode(self.blob).decode()}"


@dataclass(frozen=True)
class HostKeys:
    """What the known_hosts files say about one name."""

    name: str
    trusted: tuple[KnownKey, ...] = ()
    cert_authorities: tuple[KnownKey, ...] = ()
    #: Every @revoked key of every file read, whatever host it names.
    revoked: tuple[KnownKey, ...] = ()
    unreadable: tuple[str, ...] = field(default_factory=tuple)

    @property
    def known(self) -> bool:
        """Whether the host has any entry: then a key that is not listed is a *changed* key."""
        return bool(self.trusted or self.cert_authorities)

    def is_revoked(self, blob: bytes) -> bool:
        return any(k.blob == blob for k in self.revoked)


def lookup_name(hostname: str, port: int, host_key_alias: str | None) -> str:
    if host_key_alias:
        return host_key_alias
    return hostname if port == 22 else f"[{hostname}]:{port}"


class _HmacSha1:
    """HMAC-SHA1 under one key, its padded key blocks hashed once (RFC 2104): a lookup then
    costs two hash copies, under half of a one-shot HMAC through OpenSSL."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > 64:
            key = hashlib.sha1(key).digest()
        key = key.ljust(64, b"\0")
        self._inner = hashlib.sha1(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha1(bytes(b ^ 0x5C for b in key))

    def digest(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


def _decode_hashed(entry: str) -> tuple[bytes, bytes] | None:
    """(salt, HMAC-SHA1) of a hashed host field ``|1|salt|hmac``; None if it is not one."""
    parts = entry.split("|")
    if len(parts) != 4 or parts[1] != "1":
        return None
    try:
        return base64.b64decode(parts[2]), base64.b64decode(parts[3])
    except (binascii.Error, ValueError):
        return None


def _hashed_matches(entry: str, name: str) -> bool:
    decoded = _decode_hashed(entry)
    return decoded is not None and hmac.compare_digest(hmac.digest(decoded[0], name.encode(), "sha1"), decoded[1])


def patterns_match(patterns: str, name: str) -> bool:
    """A host field: hashed, or a comma list where a negated match wins (``match_hostname``)."""
    if patterns.startswith("|"):
        return _hashed_matches(patterns, name)
    name = name.lower()
    found = False
    for pattern in patterns.lower().split(","):
        negated = pattern.startswith("!")
        if match_pattern(name, pattern[1:] if negated else pattern):
            if negated:
                return False
            found = True
    return found


#: The only field separators of a known_hosts line (hostfile.c, sshkey_read): not \v, \f,
#: \r, \x1c-\x1f, \x85 nor U+2028, which str.split() would also split at.
_BLANKS = " \t"
#: What b64_pton skips inside a key blob: C's isspace(), nothing else.
_C_SPACE = str.maketrans("", "", " \t\n\v\f\r")
_MARKERS = {"@cert-authority": "cert-authority", "@revoked": "revoked"}


def _skip_blanks(line: str, at: int) -> int:
    while at < len(line) and line[at] in _BLANKS:
        at += 1
    return at


def _field_end(line: str, at: int) -> int:
    """Where the field starting at ``at`` ends: the next space or tab (strcspn(" \t"))."""
    ends = [i for i in (line.find(" ", at), line.find("\t", at)) if i >= 0]
    return min(ends) if ends else len(line)


def _marker(line: str, at: int) -> tuple[str, int] | None:
    """hostfile.c's check_markers: ``@cert-authority`` or ``@revoked``, case-sensitive, ended
    by the line's first space (else its first tab); one marker at most. None: an invalid marker."""
    marker = ""
    while line.startswith("@", at):
        if marker:
            return None
        end = line.find(" ", at)
        if end < 0:
            end = line.find("\t", at)
        if end < 0 or end <= at + 1 or end >= at + 32:
            return None
        marker = _MARKERS.get(line[at:end], "")
        if not marker:
            return None
        at = _skip_blanks(line, end)
    return marker, at


def _revocation_anyway(line: str, at: int) -> tuple[str, int] | None:
    """A line OpenSSH skips for its marker (``@REVOKED``, ``@revoked\thost ... comment``) that
    still says ``@revoked``: its key is revoked all the same (refusing is the safe side)."""
    end = _field_end(line, at)
    if line[at:end].lower() != "@revoked":
        return None
    return "revoked", _skip_blanks(line, end)


def parse_line(line: str, where: str) -> tuple[str, str, KnownKey] | None:
    """``[@marker] patterns type base64 [comment]``, split as hostfile.c splits it (at spaces
    and tabs only); None for blank, comment or malformed lines (OpenSSH skips those too)."""
    line = line.partition("\0")[0]  # C string functions end the line at a NUL byte
    at = _skip_blanks(line, 0)
    if at == len(line) or line[at] == "#":
        return None
    found = _marker(line, at) or _revocation_anyway(line, at)
    if found is None:
        return None
    marker, at = found
    end = _field_end(line, at)
    patterns = line[at:end]
    at = _skip_blanks(line, end)
    end = _field_end(line, at)
    key_type = line[at:end]
    at = _skip_blanks(line, end)
    if not key_type or at == len(line) or line[at] == "#":
        return None
    try:  # b64_pton skips C whitespace (a CRLF file's \r too), and nothing else
        blob = base64.b64decode(line[at:_field_end(line, at)].translate(_C_SPACE), validate=True)
    except (binascii.Error, ValueError):
        return None
    if not blob:
        return None
    return marker, patterns, KnownKey(marker, key_type, blob, where)


@dataclass(frozen=True)
class KnownHostsFile:
    """The key lines of one file, indexed for lookups by name.

    ``by_name`` holds the lines whose host field is a plain comma list (no ``*``, ``?``,
    ``!`` or hash), under each lower-cased name; ``others`` are the positions of every other
    line, matched pattern by pattern. A fleet of 1,000 hosts sharing one known_hosts then
    costs one dictionary lookup per host, not 1,000 pattern matches."""

    entries: tuple[tuple[str, str, KnownKey], ...]
    by_name: dict[str, tuple[int, ...]]
    others: tuple[int, ...]
    revoked: tuple[KnownKey, ...]
    #: Hashed lines (``|1|salt|hmac``) as (position, HMAC key state, hmac), decoded once:
    #: with HashKnownHosts every line is one, and each lookup costs an HMAC per line.
    hashed: tuple[tuple[int, _HmacSha1, bytes], ...] = ()

    @classmethod
    def of(cls, entries: list[tuple[str, str, KnownKey]]) -> KnownHostsFile:
        by_name: dict[str, list[int]] = {}
        others, revoked, hashed = [], [], []
        for position, (marker, patterns, key) in enumerate(entries):
            if marker == "revoked":
                revoked.append(key)
            elif patterns.startswith("|"):
                decoded = _decode_hashed(patterns)
                if decoded is not None:
                    hashed.append((position, _HmacSha1(decoded[0]), decoded[1]))
            elif any(c in patterns for c in "*?!"):
                others.append(position)
            else:
                for name in dict.fromkeys(patterns.lower().split(",")):
                    by_name.setdefault(name, []).append(position)
        return cls(tuple(entries), {k: tuple(v) for k, v in by_name.items()}, tuple(others), tuple(revoked),
                   tuple(hashed))

    def matching(self, name: str) -> list[tuple[str, KnownKey]]:
        """(marker, key) of the non-revoked lines that name ``name``, in file order."""
        found = list(self.by_name.get(name.lower(), ()))
        found += [p for p in self.others if patterns_match(self.entries[p][1], name)]
        if self.hashed:
            raw = name.encode()
            found += [p for p, keyed, digest in self.hashed if hmac.compare_digest(keyed.digest(raw), digest)]
        if self.others or self.hashed:
            found.sort()
        return [(self.entries[p][0], self.entries[p][2]) for p in found]


#: Parsed files by path and stat, for a fleet whose every host reads the same known_hosts.
_PARSED: dict[str, tuple[tuple[int, ...], KnownHostsFile]] = {}
#: A file written this recently may change again within its timestamp's resolution
#: (git's racy-timestamp rule): it is parsed again each time.
_SETTLED_SECONDS = 2.0
_EMPTY = KnownHostsFile((), {}, (), ())


def read_file(path: str) -> KnownHostsFile:
    """The key lines of one file; a missing file has none. Raises OSError if unreadable."""
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            state = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            cached = _PARSED.get(path)
            if cached is not None and cached[0] == state:
                return cached[1]
            data = handle.read(MAX_KNOWN_HOSTS_BYTES)
    except FileNotFoundError:
        return _EMPTY
    entries = []
    # Lines end at "\n" alone, as getline() ends them: not at the other breaks str.splitlines()
    # knows (\v, \f, \x1c-\x1e, \x85, U+2028, U+2029), which OpenSSH reads as part of a line.
    for number, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
        parsed = parse_line(line, f"{path}:{number}")
        if parsed is not None:
            entries.append(parsed)
    parsed_file = KnownHostsFile.of(entries)
    if time.time() - max(info.st_mtime_ns, info.st_ctime_ns) / 1e9 > _SETTLED_SECONDS:
        _PARSED[path] = (state, parsed_file)
    return parsed_file


def host_keys(files: Sequence[str], name: str) -> HostKeys:
    """Look ``name`` up in ``files`` (``none`` entries skipped)."""
    trusted, authorities, revoked, unreadable = [], [], [], []
    for path in files:
        if path == "none":
            continue
        try:
            parsed = read_file(path)
        except OSError:
            unreadable.append(path)
            continue
        revoked += parsed.revoked
        for marker, key in parsed.matching(name):
            (authorities if marker == "cert-authority" else trusted).append(key)
    return HostKeys(name, tuple(trusted), tuple(authorities), tuple(revoked), tuple(unreadable))


def host_key_policy(strict: str, *, accept_new: bool, allow_no_check: bool) -> tuple[str, str]:
    """The policy for an unknown key, and why. A changed or revoked key is refused under every
    policy. The config's ``StrictHostKeyChecking no`` counts only with the confirmation flag
    (else it is treated as ``yes``, the safe reading); ``ask`` is ``yes`` (nobody is there to
    answer); ``--accept-new`` lifts ``yes``/``ask``/an unconfirmed ``no`` to accept-new."""
    if strict == "false" and allow_no_check:
        return NO_CHECK, "StrictHostKeyChecking no, confirmed by --insecure-no-host-key-check"
    if accept_new:
        return ACCEPT_NEW, "--accept-new"
    if strict == "accept-new":
        return ACCEPT_NEW, "StrictHostKeyChecking accept-new"
    if strict == "false":
        return STRICT, "StrictHostKeyChecking no is not honoured without --insecure-no-host-key-check"
    return STRICT, f"StrictHostKeyChecking {'yes' if strict == 'true' else strict}"


def record_file(user_known_hosts_files: Iterable[str]) -> str | None:
    """Where an accepted key is written: the first UserKnownHostsFile, unless it is ``none`` or
    still holds a ``%`` (never create a file literally named after a token)."""
    first = next(iter(user_known_hosts_files), None)
    if first is None or first == "none" or "%" in first or not os.path.isabs(first):
        return None
    return first


def hashed_name(name: str, salt: bytes | None = None) -> str:
    """``name`` as HashKnownHosts writes it: ``|1|`` base64(salt) ``|`` base64(HMAC-SHA1(salt, name)),
    a fresh 20-byte salt each time (what ``ssh-keygen -H`` and ``ssh-keygen -F`` read)."""
    salt = os.urandom(20) if salt is None else salt
    digest = hmac.new(salt, name.encode(), "sha1").digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def record_key(path: str, name: str, key_line: str, *, hashed: bool = False) -> None:
    """Append ``name key`` to ``path`` (created 0600 in a 0700 folder), as accept-new does; the
    name hashed when the host's HashKnownHosts says so (so no host name is written in clear)."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as out:
        out.write(f"{hashed_name(name) if hashed else name} {key_line}\n")
