"""OpenSSH's expansions of ``~``, ``${VAR}`` and ``%`` tokens in file names of ssh_config.

``ssh -G`` prints UserKnownHostsFile already expanded but IdentityFile as written, so both
resolvers need these. The home directory is the password database's (as ssh's own
``tilde_expand_filename`` and ``%d`` use), not ``$HOME``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pwd
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from envdoctor.errors import ConfigError


@functools.cache
def local_account() -> pwd.struct_passwd:
    return pwd.getpwuid(os.getuid())


@functools.cache
def local_hostname() -> str:
    return socket.gethostname()


@dataclass(frozen=True)
class TokenContext:
    """The values of the tokens ssh expands in IdentityFile and UserKnownHostsFile."""

    hostname: str
    port: int
    remote_user: str
    original_host: str
    host_key_alias: str | None = None

    def table(self) -> dict[str, str]:
        account = local_account()
        this_host = local_hostname()
        # OpenSSH 9.2: %C hashes %l%h%p%r (no jump host), and %j does not exist yet.
        digest = hashlib.sha1(f"{this_host}{self.hostname}{self.port}{self.remote_user}".encode()).hexdigest()
        return {
            "%": "%", "C": digest, "L": this_host.split(".", 1)[0], "i": str(os.getuid()),
            "k": self.host_key_alias or self.original_host, "l": this_host, "n": self.original_host,
            "p": str(self.port), "d": account.pw_dir, "h": self.hostname, "r": self.remote_user,
            "u": account.pw_name,
        }


def tilde_expand(path: str) -> str:
    """``~`` and ``~user`` at the start, from the password database."""
    if not path.startswith("~"):
        return path
    name, sep, rest = path[1:].partition("/")
    try:
        home = local_account().pw_dir if not name else pwd.getpwnam(name).pw_dir
    except KeyError:
        raise ConfigError(f"no such user {name!r} in {path!r}") from None
    return home.rstrip("/") + "/" + rest if sep else home


def percent_dollar_expand(text: str, tokens: dict[str, str], where: str = "") -> str:
    """``${VAR}`` and ``%x`` in one pass, so that a value put in is never expanded again."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "$" and text.startswith("${", i):
            end = text.find("}", i + 2)
            if end < 0:
                raise ConfigError(f"{where or text}: unterminated ${{ in {text!r}")
            name = text[i + 2 : end]
            value = os.environ.get(name)
            if value is None:
                raise ConfigError(f"{where or text}: environment variable ${{{name}}} has no value")
            out.append(value)
            i = end + 1
        elif char == "%":
            key = text[i + 1 : i + 2]
            if key not in tokens:
                shown = f"%{key}" if key else "a trailing %"
                raise ConfigError(f"{where or text}: unknown token {shown} in {text!r}")
            out.append(tokens[key])
            i += 2
        else:
            out.append(char)
            i += 1
    return "".join(out)


def expand_path(text: str, context: TokenContext, where: str = "") -> str:
    """As ssh expands IdentityFile and UserKnownHostsFile: ``~`` first, then ``${VAR}`` and ``%x``."""
    return percent_dollar_expand(tilde_expand(text), context.table(), where)


def expand_identity_files(files: Iterable[tuple[str, str]], context: TokenContext) -> tuple[str, ...]:
    """IdentityFile names (with where each was written) expanded; ``none`` kept. One ssh cannot
    expand (``~nosuchuser``, an unset ``${VAR}``) is left out: ``ssh -G`` accepts it, and no
    such file can be offered."""
    expanded = []
    for name, where in files:
        if name == "none":
            expanded.append(name)
            continue
        try:
            expanded.append(expand_path(name, context, where))
        except ConfigError:
            continue
    return tuple(expanded)
