"""OpenSSH client config files read the way ``ssh`` reads them, for when no ``ssh`` is installed.

The first choice is always OpenSSH itself (``ssh -G``, see :mod:`openssh`); this parser is the
fallback, and it is tested against ``ssh -G`` over a corpus of configs. It follows
readconf.c: a keyword, one optional ``=``, then arguments split like ``argv_split`` (quotes,
backslash escapes, a word starting with ``#`` ends the line); ``Host`` patterns matched one
word at a time (a comma is literal) against the name as typed; ``Match`` criteria;
``Include`` globs (relative to ``~/.ssh``) read in place; the first value obtained wins; a
second pass over the files after ``Match final`` or hostname canonicalisation, where ``Host``
matches the resolved hostname. ``Match exec`` is never run: a destination that reaches one
cannot be resolved here and says so. This module reads and matches; :mod:`ssh_config_resolve`
evaluates the directives for one destination.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from fnmatch import fnmatchcase

from envdoctor.errors import ConfigError
from envdoctor.transport.ssh_include import include_paths as _include_paths

SYSTEM_CONFIG = "/etc/ssh/ssh_config"
MAX_CONFIG_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Line:
    """One directive of a config file: keyword (lower case), its arguments, where it is."""

    keyword: str
    args: tuple[str, ...]
    raw: str  # the text after the keyword, for ProxyCommand (taken whole, as ssh does)
    where: str


def split_args(text: str, where: str) -> list[str]:
    """Words of a config line like OpenSSH's ``argv_split(..., terminate_on_comment=1)``."""
    words: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] in " \t":
            i += 1
            continue
        if text[i] == "#":
            break
        word: list[str] = []
        quote = ""
        while i < n:
            char = text[i]
            if char == "\\" and i + 1 < n and (text[i + 1] in "'\"\\" or (not quote and text[i + 1] == " ")):
                word.append(text[i + 1])
                i += 2
                continue
            if not quote and char in " \t":
                break
            if not quote and char in "\"'":
                quote = char
            elif quote and char == quote:
                quote = ""
            else:
                word.append(char)
            i += 1
        if quote:
            raise ConfigError(f"{where}: unbalanced quote", hint="close the quote or remove it")
        words.append("".join(word))
    return words


_DELIMITERS = " \t\r\n\"="


def strdelim_words(text: str) -> list[str]:
    """Words as OpenSSH's ``strdelim`` takes them, which ``Match`` uses (not argv_split): a
    ``=`` also separates, a double quote groups, an empty word or one starting with ``#`` ends
    the list."""
    words: list[str] = []
    rest: str | None = text.lstrip(" \t")
    while rest:
        cut = next((i for i, c in enumerate(rest) if c in _DELIMITERS), -1)
        if cut < 0:
            word, rest = rest, None
        elif rest[cut] == '"':
            joined = rest[:cut] + rest[cut + 1 :]
            close = joined.find('"', cut)
            if close < 0:
                break  # no matching quote: ssh sees no word
            word, rest = joined[:close], joined[close + 1 :].lstrip(" \t\r\n")
        else:
            equals = rest[cut] == "="
            word, rest = rest[:cut], rest[cut + 1 :].lstrip(" \t\r\n")
            if rest.startswith("=") and not equals:
                rest = rest[1:].lstrip(" \t\r\n")
        if not word or word.startswith("#"):
            break
        words.append(word)
    return words


#: The keyword as strdelim takes it: up to whitespace (CR and LF count), a quote or one ``=``.
_KEYWORD = re.compile(r"[ \t\r\n]*([^ \t\r\n\"=]*)[ \t\r\n]*(?:=[ \t\r\n]*)?(.*)$", re.DOTALL)


#: The last files parsed, by path and text: a run reads its config up to three times (the
#: host names for the command line, the ssh -G cache's key, the known hosts lists as written),
#: and a fleet's config of a thousand Host blocks takes some 15 ms to parse.
_PARSED: dict[tuple[str, str], tuple[Line, ...]] = {}
_PARSED_KEEP = 8


def parse_lines(text: str, path: str) -> list[Line]:
    """The directives of one file, in order (blank lines and comments dropped)."""
    key = (path, text)
    found = _PARSED.get(key)
    if found is None:
        if len(_PARSED) >= _PARSED_KEEP:
            _PARSED.clear()
        found = _PARSED[key] = tuple(_parse_lines(text, path))
    return list(found)


def _parse_lines(text: str, path: str) -> list[Line]:
    lines = []
    # Lines end at LF only, as ssh's getline: a lone CR, a form feed or U+0085 is part of a line.
    for number, line in enumerate(text.split("\n"), 1):
        where = f"{path}:{number}"
        line = line.rstrip(" \t\r\n\f")
        match = _KEYWORD.match(line)
        keyword, rest = (match[1], match[2]) if match else ("", "")
        if not keyword or keyword.startswith("#"):
            continue
        lines.append(Line(keyword.lower(), tuple(split_args(rest, where)), rest, where))
    return lines


def parse_port(text: str) -> int:
    """OpenSSH's ``a2port``: a number 0-65535 (strtonum) or a TCP service name; -1 if neither."""
    if re.fullmatch(r"[ \t\n\r\f\v]*[+-]?\d+", text):
        number = int(text)
        return number if 0 <= number <= 65535 else -1
    try:
        return socket.getservbyname(text, "tcp")
    except (OSError, UnicodeError):
        return -1


_DOMAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def parse_ssh_uri(text: str) -> tuple[str | None, str, str | None]:
    """``ssh://[user[;params]@]host[:port][/]`` as OpenSSH's ``parse_uri`` reads it: (user, host,
    port as written). The host must be a domain name or IPv4 address (ssh refuses ``[v6]`` in
    a URI); a path is refused. Raises ConfigError naming what is wrong."""
    rest = text[6:]
    user = None
    if "@" in rest:
        user, _, rest = rest.partition("@")  # the first @, as ssh's strchr
        user = user.split(";", 1)[0]
        if not user:
            raise ConfigError(f"{text!r}: the ssh:// URI has an empty user name")
        import urllib.parse  # (only for a URI's user, as ssh's urldecode)

        user = urllib.parse.unquote(user)
    if rest.startswith("["):
        host, close, after = rest[1:].partition("]")
        if not close or after[:1] not in ("", ":", "/"):
            raise ConfigError(f"{text!r}: unbalanced [ in the ssh:// URI")
        delimiter, rest = after[:1], after[1:]
    else:
        cut = next((i for i, c in enumerate(rest) if c in ":/"), len(rest))
        host, delimiter, rest = rest[:cut], rest[cut : cut + 1], rest[cut + 1 :]
    if not _DOMAIN.fullmatch(host) or ".." in host:
        raise ConfigError(f"{text!r}: {host!r} is not a host name ssh takes in an ssh:// URI (no IPv6 there)")
    host = host.removesuffix(".")
    port = None
    if delimiter == ":":
        port, _, rest = rest.partition("/")
    if rest:
        raise ConfigError(f"{text!r}: an ssh:// destination has no path")
    return user, host, port


@dataclass(frozen=True)
class JumpSpec:
    """One ProxyJump hop as written: ``[user@]host[:port]`` or ``ssh://[user@]host[:port]``."""

    host: str
    user: str | None = None
    port: int | None = None


def parse_jump(text: str) -> JumpSpec:
    """One hop as ssh reads it: an ``ssh://`` URI (parse_uri), else ``[user@]host[:port]``."""
    if text.startswith("ssh://"):
        user, host, port_text = parse_ssh_uri(text)
    else:
        user, _, hostport = text.rpartition("@")
        port_text = ""
        if hostport.startswith("["):
            host, _, after = hostport[1:].partition("]")
            port_text = after.removeprefix(":")
        else:
            host, _, port_text = hostport.partition(":")
    port = parse_port(port_text) if port_text else None  # a number or a service name, as ssh's a2port
    if not host or host.startswith("-") or port is not None and port <= 0:
        raise ConfigError(f"ProxyJump hop {text!r} is not [user@]host[:port] or ssh://[user@]host[:port]")
    return JumpSpec(host, user or None, port)


def match_pattern(name: str, pattern: str) -> bool:
    """OpenSSH's ``match_pattern``: ``*`` and ``?`` only (no character classes), case as given."""
    escaped = pattern.replace("[", "[[]")
    return fnmatchcase(name, escaped)


def match_pattern_list(name: str, patterns: str, *, lower: bool = False) -> bool:
    """``match_pattern_list``: comma-separated, ``!`` negates and any negated match wins."""
    if lower:
        name, patterns = name.lower(), patterns.lower()
    found = False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        if match_pattern(name, pattern[1:] if negated else pattern):
            if negated:
                return False
            found = True
    return found


def read_config(path: str) -> list[Line]:
    """The directives of a file; a file that does not exist has none."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except (FileNotFoundError, IsADirectoryError):  # ssh reads a folder a glob names as empty
        return []
    except OSError as exc:
        raise ConfigError(f"cannot read SSH config {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"SSH config {path} is larger than {MAX_CONFIG_BYTES} bytes")
    return parse_lines(data.decode("utf-8", "surrogateescape"), path)


def include_paths(pattern: str, *, user_config: bool, where: str = "") -> list[str]:
    """The files an ``Include`` argument names, as ssh's glob finds them (``~`` is ``$HOME``
    there: :mod:`ssh_include`)."""
    return _include_paths(pattern, user_config=user_config, where=where)


def lines_read(files: list[tuple[str, bool]], *, max_depth: int = 16) -> list[Line]:
    """Every directive of the files ssh reads, Includes in place, whether it applies or not
    (``(path, is user config)`` files; a file or Include that cannot be read adds nothing)."""
    found: list[Line] = []

    def read(path: str, user_config: bool, depth: int) -> None:
        try:
            lines = read_config(path)
        except ConfigError:
            return
        for line in lines:
            found.append(line)
            if line.keyword == "include" and depth < max_depth:
                for argument in line.args:
                    try:
                        included = include_paths(argument, user_config=user_config)
                    except ConfigError:
                        continue
                    for one in included:
                        read(one, user_config, depth + 1)

    for path, user_config in files:
        read(path, user_config, 0)
    return found
