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

import glob
import os
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

from envdoctor.errors import ConfigError
from envdoctor.transport.ssh_tokens import local_account, tilde_expand

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


_KEYWORD = re.compile(r"[ \t]*([^ \t\"=]*)[ \t]*(?:=[ \t]*)?(.*)$", re.DOTALL)


def parse_lines(text: str, path: str) -> list[Line]:
    """The directives of one file, in order (blank lines and comments dropped)."""
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{path}:{number}"
        line = line.rstrip(" \t\r\f")
        match = _KEYWORD.match(line)
        keyword, rest = (match[1], match[2]) if match else ("", "")
        if not keyword or keyword.startswith("#"):
            continue
        lines.append(Line(keyword.lower(), tuple(split_args(rest, where)), rest, where))
    return lines


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
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ConfigError(f"cannot read SSH config {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"SSH config {path} is larger than {MAX_CONFIG_BYTES} bytes")
    return parse_lines(data.decode("utf-8", "surrogateescape"), path)


def include_paths(pattern: str, *, user_config: bool) -> list[str]:
    """The files an ``Include`` names: ``~`` expanded, relative to ``~/.ssh`` (or ``/etc/ssh``
    in the system file), glob-sorted."""
    pattern = tilde_expand(pattern)
    if not pattern.startswith("/"):
        base = os.path.join(local_account().pw_dir, ".ssh") if user_config else "/etc/ssh"
        pattern = os.path.join(base, pattern)
    return sorted(glob.glob(pattern))
