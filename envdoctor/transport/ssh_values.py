"""The values OpenSSH 9.2's readconf.c checks for keywords the built-in parser does not use.

ssh refuses a whole config for a bad value anywhere in it (``Compression maybe`` in a block
that never applies, ``ServerAliveInterval 10 20``), so the built-in parser must refuse it
too or it would resolve a destination ``ssh -G`` refuses. The tables are readconf.c's
(``parse_flag``, ``parse_int``, ``parse_time``, ``parse_string`` and its multistate lists);
RekeyLimit and TunnelDevice are read as readconf.c reads them; forwarding lines are
:mod:`ssh_forwards`'s; algorithm lists and ForwardAgent have their own modules.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from envdoctor.errors import ConfigError

FLAG = ("true", "false", "yes", "no")
YES_NO_ASK = (*FLAG, "ask")
#: keyword -> the words it accepts (any case).
MULTISTATE: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        ("gssapiauthentication", "gssapidelegatecredentials", "forwardx11", "forwardx11trusted",
         "exitonforwardfailure", "gatewayports", "passwordauthentication", "kbdinteractiveauthentication",
         "challengeresponseauthentication", "skeyauthentication", "tisauthentication",
         "hostbasedauthentication", "identitiesonly", "batchmode", "checkhostip", "tcpkeepalive", "keepalive",
         "clearallforwardings", "enablesshkeysign", "nohostauthenticationforlocalhost", "hashknownhosts",
         "permitlocalcommand", "visualhostkey", "stdinnull", "forkafterauthentication", "proxyusefdpass",
         "canonicalizefallbacklocal", "streamlocalbindunlink", "enableescapecommandline"), FLAG),
    "pubkeyauthentication": (*FLAG, "unbound", "host-bound"),
    "dsaauthentication": (*FLAG, "unbound", "host-bound"),
    "stricthostkeychecking": (*YES_NO_ASK, "off", "accept-new"),
    "compression": ("yes", "no"),
    "verifyhostkeydns": YES_NO_ASK,
    "updatehostkeys": YES_NO_ASK,
    "addressfamily": ("inet", "inet6", "any"),
    "controlmaster": (*FLAG, "auto", "ask", "autoask"),
    "tunnel": (*FLAG, "ethernet", "point-to-point"),
    "requesttty": (*FLAG, "force", "auto"),
    "sessiontype": ("none", "subsystem", "default"),
    "canonicalizehostname": (*FLAG, "always"),
    "loglevel": ("quiet", "fatal", "error", "info", "verbose", "debug", "debug1", "debug2", "debug3"),
    "syslogfacility": ("daemon", "user", "auth", "authpriv", *(f"local{n}" for n in range(8))),
}
INTEGER = frozenset({"connectionattempts", "numberofpasswordprompts", "serveralivecountmax",
                     "canonicalizemaxdots", "requiredrsasize"})
TIME = frozenset({"forwardx11timeout", "serveraliveinterval", "connecttimeout"})
STRING = frozenset({"pkcs11provider", "smartcarddevice", "xauthlocation", "kbdinteractivedevices", "hostname",
                    "hostkeyalias", "user", "preferredauthentications", "bindaddress", "bindinterface",
                    "controlpath", "revokedhostkeys", "ignoreunknown", "securitykeyprovider", "identityfile",
                    "identityfile2", "certificatefile"})
_TIME_PART = re.compile(r"[ \t\n\r\f\v]*\+?(\d+)([smhdwSMHDW]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
INT_MAX = 2**31 - 1


def convtime(text: str) -> int | None:
    """OpenSSH's ``convtime``: seconds, or None when ``text`` is not a time (or exceeds INT_MAX)."""
    total, position = 0, 0
    if not text:
        return None
    while position < len(text):
        match = _TIME_PART.match(text, position)
        if match is None or int(match[1]) >= INT_MAX:
            return None
        total += int(match[1]) * _UNITS[match[2].lower()]
        if total > INT_MAX:
            return None
        position = match.end()
    return total


_DOMAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_ENV_NAME = re.compile(r"[A-Za-z0-9_]+")  # misc.c valid_env_name
DIGESTS = ("md5", "sha1", "sha256", "sha384", "sha512")


def check_agent_path(value: str, where: str) -> None:
    """readconf.c's parse_agent_path: every ``${VAR}`` set, a legacy ``$VAR`` a valid name."""
    for name in re.findall(r"\$\{([^}]*)\}", value):
        if name not in os.environ:
            raise ConfigError(f"{where}: invalid environment expansion {value!r} (${{{name}}} is not set)")
    if "${" in value and value.count("${") != len(re.findall(r"\$\{[^}]*\}", value)):
        raise ConfigError(f"{where}: invalid environment expansion {value!r}")
    if value.startswith("$") and not value.startswith("${") and not _ENV_NAME.fullmatch(value[1:]):
        raise ConfigError(f"{where}: invalid environment name {value!r}")


IPQOS = frozenset({"none", *(f"af{a}{b}" for a in "1234" for b in "123"), *(f"cs{n}" for n in range(8)), "ef", "le",
                   "lowdelay", "throughput", "reliability"})


def _ipqos(text: str) -> bool:
    """misc.c's parse_ipqos: a name, or a number 0-255 (C ``strtol`` base 0: 0x.., 0..)."""
    if text.lower() in IPQOS:
        return True
    try:
        number = int(text, 0) if not re.fullmatch(r"0[0-7]+", text) else int(text, 8)
    except ValueError:
        return False
    return 0 <= number <= 255


def check_special(keyword: str, args: Sequence[str], where: str) -> None:
    """Keywords readconf.c parses by hand that are cheap to check exactly."""
    value = args[0] if args else ""
    bad = False
    if keyword == "controlpersist":
        bad = value not in ("no", "false", "yes", "true") and convtime(value) is None
    elif keyword == "streamlocalbindmask":
        found = re.match(r"[ \t\n\r\f\v]*([+-]?)([0-7]+)", value)
        bad = found is None or found[1] == "-" and int(found[2], 8) != 0 or int(found[2], 8) > 0o777
    elif keyword == "fingerprinthash":
        bad = value not in DIGESTS
    elif keyword == "escapechar":
        bad = not (value == "none" or len(value) == 1
                   or len(value) == 2 and value[0] == "^" and 64 <= ord(value[1]) < 128)
    elif keyword == "canonicaldomains":
        if any(a.lower() == "none" for a in args) and len(args) > 1:
            raise ConfigError(f'{where}: {keyword} "none" must appear alone')
        bad = any(a.lower() != "none" and (not _DOMAIN.fullmatch(a) or ".." in a) for a in args)
    elif keyword == "identityagent" or keyword == "forwardagent" and value.lower() not in FLAG:
        check_agent_path(value, where)
    elif keyword == "ipqos":
        if len(args) > 2:
            raise ConfigError(f"{where}: keyword {keyword} has extra arguments at end of line")
        bad = not args or any(not _ipqos(a) for a in args)
        args = args[:1]
    elif keyword == "addkeystoagent":
        if len(args) > 2:
            raise ConfigError(f"{where}: keyword {keyword} has extra arguments at end of line")
        state = value.lower() if value.lower() in (*YES_NO_ASK, "confirm") else None
        if state == "confirm" and len(args) == 2:
            bad = convtime(args[1]) is None
        elif state is None and len(args) == 1:
            bad = convtime(value) is None
        else:
            bad = state is None or len(args) == 2
        args = args[:1]
    if bad or not value and keyword != "canonicaldomains":
        raise ConfigError(f"{where}: bad {keyword} value {value!r}")
    if len(args) > 1 and keyword != "canonicaldomains":
        raise ConfigError(f"{where}: keyword {keyword} has extra arguments at end of line")


LLONG_MAX, LLONG_MIN = 2**63 - 1, -(2**63)
_SCALES = {c: 1024**n for n, c in enumerate("BKMGTPE")}


def _c_div(a: int, b: int) -> int:
    """C's integer division (toward zero)."""
    return -(-a // b) if (a < 0) != (b < 0) else a // b


def scan_scaled(text: str) -> int | None:
    """OpenBSD's ``scan_scaled`` (``1.5G``, ``100K``, ``0``), as readconf.c's RekeyLimit uses it:
    the number, or None where it fails (a second sign or '.', more than 20 digits, overflow,
    an unknown unit or a letter after it)."""
    at, sign, digits, fract_digits, whole, fpart = 0, 0, 0, 0, 0, 0
    while at < len(text) and text[at] in " \t\n\v\f\r":
        at += 1
    while at < len(text) and text[at] in "+-":
        if sign:
            return None
        sign = -1 if text[at] == "-" else 1
        at += 1
    while at < len(text) and (text[at] in "0123456789."):
        if text[at] == ".":
            if fract_digits:
                return None
            fract_digits = 1
        elif fract_digits:
            if fract_digits < 20:  # (MAX_DIGITS - 1: further fractional digits are ignored)
                fract_digits += 1
                fpart = fpart * 10 + int(text[at])
                if fpart > LLONG_MAX:
                    return None
        else:
            digits += 1
            whole = whole * 10 + int(text[at])
            if digits >= 21 or whole > LLONG_MAX:
                return None
        at += 1
    whole *= sign or 1
    if at == len(text):
        return whole
    scale = _SCALES.get(text[at].upper())
    if scale is None or text[at + 1 : at + 2].isascii() and text[at + 1 : at + 2].isalnum():
        return None
    if whole > _c_div(LLONG_MAX, scale) or whole < _c_div(LLONG_MIN, scale):
        return None
    whole *= scale
    while fpart >= _c_div(LLONG_MAX, scale):
        fpart //= 10
        fract_digits -= 1
    fpart *= scale
    for _ in range(fract_digits - 1):
        fpart //= 10
    return whole - fpart if sign == -1 else whole + fpart


def check_rekey_limit(args: Sequence[str], where: str) -> None:
    """``RekeyLimit default|SIZE [TIME|none]``: a size of 16 bytes or more (or 0), a time."""
    value = args[0] if args else ""
    if not value:
        raise ConfigError(f"{where}: RekeyLimit is missing its argument")
    size = 0 if value == "default" else scan_scaled(value)
    if size is None or size != 0 and size < 16:
        raise ConfigError(f"{where}: bad RekeyLimit {value!r} (a size such as 1G, at least 16 bytes, or default)")
    if len(args) > 1 and args[1] != "none" and (not args[1] or convtime(args[1]) is None):
        raise ConfigError(f"{where}: invalid time value {args[1]!r} for RekeyLimit")
    if len(args) > 2:
        raise ConfigError(f"{where}: keyword rekeylimit has extra arguments at end of line")


TUNID_MAX = 0x7FFFFFFF - 2


def _tun(text: str) -> bool:
    return text.lower() == "any" or bool(re.fullmatch(r"[ \t\n\r\f\v]*[+-]?\d+", text)) and 0 <= int(text) <= TUNID_MAX


def check_tunnel_device(args: Sequence[str], where: str) -> None:
    """``TunnelDevice local[:remote]``: each ``any`` or a number (misc.c's ``a2tun``)."""
    value = args[0] if args else ""
    if not value:
        raise ConfigError(f"{where}: TunnelDevice is missing its argument")
    local, colon, remote = value.partition(":")
    if not _tun(local) or colon and not _tun(remote):
        raise ConfigError(f"{where}: bad TunnelDevice {value!r} (any or a number, then optionally :any or :number)")
    if len(args) > 1:
        raise ConfigError(f"{where}: keyword tunneldevice has extra arguments at end of line")


def check_value(keyword: str, args: Sequence[str], where: str) -> None:
    """Refuse what ssh refuses for this keyword's arguments (one line, naming file:line)."""
    if keyword == "rekeylimit":
        check_rekey_limit(args, where)
    elif keyword == "tunneldevice":
        check_tunnel_device(args, where)
    if keyword in ("controlpersist", "streamlocalbindmask", "fingerprinthash", "escapechar", "canonicaldomains",
                   "identityagent", "forwardagent", "ipqos", "addkeystoagent"):
        check_special(keyword, args, where)
    kind = ("multistate" if keyword in MULTISTATE else "int" if keyword in INTEGER else "time" if keyword in TIME
            else "string" if keyword in STRING else "")
    if not kind:
        return
    value = args[0] if args else ""
    if not value:
        raise ConfigError(f"{where}: {keyword} is missing its argument")
    if kind == "multistate" and value.lower() not in MULTISTATE[keyword]:
        raise ConfigError(f"{where}: unsupported {keyword} value {value!r} (one of {', '.join(MULTISTATE[keyword])})")
    if kind == "int" and not re.fullmatch(r"[ \t\n\r\f\v]*\+?\d+", value) or kind == "int" and int(value) > INT_MAX:
        raise ConfigError(f"{where}: {keyword} needs a whole number, not {value!r}")
    if kind == "time" and value != "none" and convtime(value) is None:
        raise ConfigError(f"{where}: invalid time value {value!r} for {keyword}")
    if len(args) > 1:
        raise ConfigError(f"{where}: keyword {keyword} has extra arguments at end of line")
