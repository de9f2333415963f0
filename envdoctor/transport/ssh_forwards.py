"""LocalForward, RemoteForward and DynamicForward read as OpenSSH 9.2 reads them.

ssh parses every forwarding line of every file it reads, in blocks that apply or not
(readconf.c ``parse_forward``), and refuses the whole config for one it cannot parse: a
``${VAR}`` that is unset (``RemoteForward ${XDG_RUNTIME_DIR}/gnupg/S.gpg-agent ...`` run from
cron), a port 0 or above 65535, a socket path longer than ``sun_path``, a missing target.
Then, for the lines that apply, it expands ``%`` tokens in the socket paths and stops on an
unknown one. The built-in parser must refuse what ssh refuses, or it would resolve a
destination ``ssh -G`` refuses.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from envdoctor.errors import ConfigError
from envdoctor.transport.ssh_config import parse_port

FORWARD_KEYWORDS = ("localforward", "remoteforward", "dynamicforward")
FWDARG_BYTES = 255  # readconf.c's ``char fwdarg[256]``: a longer spec is cut
PATH_MAX_SUN = 108  # sizeof(sun_path) on Linux
NI_MAXHOST = 1025
PORT_STREAMLOCAL = -2
_C_SPACE = " \t\n\v\f\r"


@dataclass(frozen=True)
class Field:
    text: str
    is_path: bool


@dataclass(frozen=True)
class Forward:
    """What ssh keeps of a forwarding line: its socket paths are expanded later (``%`` tokens)."""

    paths: tuple[str, ...]


def _bytes_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def _cut(text: str, limit: int) -> str:
    return text.encode("utf-8", "surrogateescape")[:limit].decode("utf-8", "surrogateescape")


def dollar_expand(text: str) -> str | None:
    """misc.c's ``dollar_expand``: every ``${VAR}`` replaced; None for an unset or empty name
    or a missing ``}``."""
    out: list[str] = []
    at = 0
    while at < len(text):
        if text.startswith("${", at):
            end = text.find("}", at + 2)
            name = text[at + 2 : end]
            if end < 0 or not name or name not in os.environ:
                return None
            out.append(os.environ[name])
            at = end + 1
        else:
            out.append(text[at])
            at += 1
    return "".join(out)


def _fields(spec: str) -> list[Field] | None:
    """parse_fwd_field up to four times; None where parse_forward fails (trailing data)."""
    fields: list[Field] = []
    rest: str | None = spec.lstrip(_C_SPACE)
    while len(fields) < 4 and rest:
        if rest.startswith("["):
            close = rest.find("]")
            if close < 0 or rest[close + 1 : close + 2] not in (":", ""):
                return None  # (the field is left unread: trailing data)
            fields.append(Field(rest[1:close], "/" in rest[1:close]))
            rest = rest[close + 2 :]
            continue
        text: list[str] = []
        is_path = False
        at = 0
        while at < len(rest) and rest[at] != ":":
            if rest[at] == "\\":
                if at + 1 >= len(rest):
                    return None
                at += 1  # (the escaped character is taken as it is, even a '/' or ':')
            elif rest[at] == "/":
                is_path = True
            text.append(rest[at])
            at += 1
        fields.append(Field("".join(text), is_path))
        rest = rest[at + 1 :] if at < len(rest) else ""
    return None if rest else fields


def parse_forward(spec: str, *, dynamic: bool, remote: bool) -> Forward | None:
    """readconf.c's ``parse_forward``: the socket paths of a valid spec, else None."""
    expanded = dollar_expand(spec)
    fields = None if expanded is None else _fields(expanded)
    if not fields:
        return None
    f = fields
    listen_host = listen_path = connect_host = connect_path = None
    listen_port = connect_port = 0
    if len(f) == 1:
        listen_path, listen_port = (f[0].text, PORT_STREAMLOCAL) if f[0].is_path else (None, parse_port(f[0].text))
        connect_host = "socks"
    elif len(f) == 2:
        if f[0].is_path and f[1].is_path:
            listen_path, listen_port, connect_path, connect_port = f[0].text, PORT_STREAMLOCAL, f[1].text, PORT_STREAMLOCAL
        elif f[1].is_path:
            listen_port, connect_path, connect_port = parse_port(f[0].text), f[1].text, PORT_STREAMLOCAL
        else:
            listen_host, listen_port, connect_host = f[0].text, parse_port(f[1].text), "socks"
    elif len(f) == 3:
        if f[0].is_path:
            listen_path, listen_port = f[0].text, PORT_STREAMLOCAL
            connect_host, connect_port = f[1].text, parse_port(f[2].text)
        elif f[2].is_path:
            listen_host, listen_port = f[0].text, parse_port(f[1].text)
            connect_path, connect_port = f[2].text, PORT_STREAMLOCAL
        else:
            listen_port, connect_host, connect_port = parse_port(f[0].text), f[1].text, parse_port(f[2].text)
    else:
        listen_host, listen_port = f[0].text, parse_port(f[1].text)
        connect_host, connect_port = f[2].text, parse_port(f[3].text)
    if dynamic:
        if len(f) > 2:
            return None
    else:
        if len(f) < 3 and connect_path is None and listen_path is None:
            return None
        if connect_port <= 0 and connect_path is None:
            return None
    if listen_port < 0 and listen_path is None or not remote and listen_port == 0:
        return None
    for host in (listen_host, connect_host):
        if host is not None and _bytes_len(host) >= NI_MAXHOST:
            return None
    for path in (listen_path, connect_path):
        if path is not None and _bytes_len(path) >= PATH_MAX_SUN:
            return None
    return Forward(tuple(p for p in (listen_path, connect_path) if p is not None))


def forward_line(keyword: str, args: Sequence[str], where: str) -> Forward:
    """One forwarding line as process_config_line takes it; a ConfigError where ssh stops."""
    if not args or not args[0]:
        raise ConfigError(f"{where}: {keyword} is missing its argument")
    remote, dynamic = keyword == "remoteforward", keyword == "dynamicforward"
    used = 1
    spec = args[0]
    if not dynamic:
        if len(args) < 2 or not args[1]:
            if not remote:
                raise ConfigError(f"{where}: {keyword} is missing its target argument")
            dynamic = True  # (RemoteForward PORT: a SOCKS proxy on the server)
            used += len(args) >= 2
        else:
            spec, used = f"{args[0]}:{args[1]}", 2
    forward = parse_forward(_cut(spec, FWDARG_BYTES), dynamic=dynamic, remote=remote)
    if forward is None:
        raise ConfigError(f"{where}: bad forwarding specification {' '.join(args[:used])!r}"
                          + (" (an environment variable in it is not set)" if dollar_expand(spec) is None else ""))
    if len(args) > used:
        raise ConfigError(f"{where}: keyword {keyword} has extra arguments at end of line")
    return forward
