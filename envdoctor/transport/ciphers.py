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

import functools
import re
from collections.abc import Sequence

from envdoctor.transport import algorithms

#: OpenSSH 9's default cipher list, in its order (``ssh -G -F /dev/null x | grep ^ciphers``).
OPENSSH_DEFAULT = algorithms.CIPHERS.defaults
#: What OpenSSH 9 knows, in ``ssh -Q cipher`` order: a name outside it is "Bad SSH2 cipher spec".
OPENSSH_ORDER = algorithms.CIPHERS.known
OPENSSH_KNOWN = frozenset(OPENSSH_ORDER)
_AEAD_GCM = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")


def check_spec(value: str, where: str) -> None:
    """Refuse a ``Ciphers`` value as ssh's reader does (see :func:`algorithms.check_spec`)."""
    algorithms.check_spec(algorithms.CIPHERS, value, where)


def assemble(value: str | None) -> tuple[str, ...] | None:
    """The list ssh offers for a (checked) ``Ciphers`` value (see :func:`algorithms.assemble`)."""
    return algorithms.assemble(algorithms.CIPHERS, value)


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
    usable = algorithms.usable(algorithms.CIPHERS, allowed, supported, label)
    if aes_instructions():
        usable.sort(key=lambda name: name not in _AEAD_GCM)  # stable: otherwise the user's order
    return usable
