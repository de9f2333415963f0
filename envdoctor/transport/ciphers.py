"""Which ciphers a connection offers: those ``ssh`` would offer (``Ciphers``), cheapest first.

``ssh -G`` prints the list ssh assembles from ``Ciphers`` (``+`` appends to OpenSSH's
defaults, ``-`` removes patterns from them, ``^`` puts names first); without an ``ssh``
binary, :func:`assemble` does the same as OpenSSH 9's ``kex_assemble_names``. The user's
list is the policy: envdoctor offers no cipher outside it. Within it, when this CPU has AES
instructions, the AES-GCM ciphers are offered first: asyncssh runs chacha20-poly1305 as
two cipher calls and a MAC per packet from Python, about 1 ms more CPU per host than
AES-GCM, which fleet runs pay on every host; both are authenticated encryption, and the
server still picks from the same allowed set.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Sequence

from envdoctor.errors import ConfigError

#: OpenSSH 9's default cipher list, in its order (``ssh -G -F /dev/null x | grep ^ciphers``).
OPENSSH_DEFAULT = ("chacha20-poly1305@openssh.com", "aes128-ctr", "aes192-ctr", "aes256-ctr",
                   "aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
#: What OpenSSH 9 knows, in ``ssh -Q cipher`` order: a name outside it is "Bad SSH2 cipher spec".
OPENSSH_ORDER = ("3des-cbc", "aes128-cbc", "aes192-cbc", "aes256-cbc", "aes128-ctr", "aes192-ctr", "aes256-ctr",
                 "aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com")
OPENSSH_KNOWN = frozenset(OPENSSH_ORDER)
_AEAD_GCM = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")


def check_spec(value: str, where: str) -> None:
    """Refuse a ``Ciphers`` value as ssh's reader does: a ``-`` list is patterns, unchecked;
    otherwise every name up to the first empty one must be a cipher ssh knows."""
    if value.startswith("-"):
        return
    names = value[1:] if value[:1] in ("+", "^") else value
    checked = names.split(",")
    checked = checked[:checked.index("")] if "" in checked else checked
    if not names or any(name not in OPENSSH_KNOWN for name in checked):
        raise ConfigError(f"{where}: Bad SSH2 cipher spec {value!r}",
                          hint=f"the ciphers ssh knows: {', '.join(sorted(OPENSSH_KNOWN))}")


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern.replace("[", "[[]")) for pattern in patterns)


def assemble(value: str | None) -> tuple[str, ...] | None:
    """The list ssh offers for a (checked) ``Ciphers`` value, as ``kex_assemble_names``
    builds it: ``-`` removes patterns from the defaults; otherwise (``+`` after the
    defaults, ``^`` before them) each name is a pattern over what ssh knows, in ``ssh -Q
    cipher`` order, repeats dropped. None: OpenSSH's defaults, and where ssh keeps no list
    (nothing matched, or a ``!`` pattern): ``ssh -G`` then prints none."""
    if not value:
        return None
    if value.startswith("-"):
        patterns = value[1:].split(",")
        return tuple(name for name in OPENSSH_DEFAULT if not _matches(name, patterns))
    if value.startswith("+"):
        tokens = [*OPENSSH_DEFAULT, *value[1:].split(",")]
    elif value.startswith("^"):
        tokens = [*value[1:].split(","), *OPENSSH_DEFAULT]
    else:
        tokens = value.split(",")
    if any(token.startswith("!") for token in tokens):
        return None
    names = [name for token in tokens if token for name in OPENSSH_ORDER if _matches(name, (token,))]
    return tuple(dict.fromkeys(names)) or None


@functools.lru_cache(maxsize=1)
def aes_instructions() -> bool:
    """Whether this CPU has AES instructions (x86 ``aes``, Arm ``aes`` in /proc/cpuinfo).
    Unknown (no /proc): no, and ssh's own order is kept."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip().lower() in ("flags", "features"):
                    return bool(re.search(r"(?:^|\s)aes(?:\s|$)", value))
    except OSError:
        pass
    return False


def offered(allowed: Sequence[str] | None, supported: Sequence[str], label: str) -> list[str]:
    """The ciphers to offer, in order: ``allowed`` (ssh's list; None: OpenSSH's defaults)
    that asyncssh ``supported``, AES-GCM first when the CPU has AES instructions."""
    allowed = OPENSSH_DEFAULT if allowed is None else allowed
    usable = [name for name in allowed if name in set(supported)]
    if not usable:
        raise ConfigError(
            f"{label}: none of the ciphers ssh would offer ({', '.join(allowed) or 'none'}) can be used "
            f"(asyncssh has {', '.join(sorted(set(supported) & OPENSSH_KNOWN))})",
            hint="allow one of those in the Ciphers line of the SSH config")
    if aes_instructions():
        usable.sort(key=lambda name: name not in _AEAD_GCM)  # stable: otherwise the user's order
    return usable
