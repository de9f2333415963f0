"""The files an ``Include`` names, found as ssh finds them (readconf.c, then glob(3)).

ssh anchors a relative argument at ``~/.ssh`` (in a user config) or ``/etc/ssh`` (in the
system one, where a ``~`` is an error), then calls ``glob(pattern, GLOB_TILDE)``. That glob
expands ``~`` and ``~/`` from ``$HOME`` (the password database only when HOME is unset),
unlike everything else in ssh, which uses the password database's home: with
``HOME=/tmp/ci`` the user config is still ``/root/.ssh/config`` but its ``Include
extra.conf`` is ``/tmp/ci/.ssh/extra.conf``. ``~user`` is that user's home (the pattern is
kept as written for an unknown user); a backslash quotes the next character; matches are
sorted bytewise.
"""

from __future__ import annotations

import glob
import os
import pwd

from envdoctor.errors import ConfigError


def glob_tilde(pattern: str) -> str:
    """A leading ``~`` or ``~user`` replaced as OpenSSH's glob (GLOB_TILDE) replaces it."""
    if not pattern.startswith("~"):
        return pattern
    name, slash, rest = pattern[1:].partition("/")
    if not name:
        home = os.environ.get("HOME")
        if home is None or os.getuid() != os.geteuid():
            home = pwd.getpwuid(os.getuid()).pw_dir
    else:
        try:
            home = pwd.getpwnam(name).pw_dir
        except KeyError:
            return pattern  # (glob then looks for a file named so, and finds none)
    return home + slash + rest


def include_pattern(argument: str, *, user_config: bool, where: str = "") -> str:
    """The glob ssh runs for one Include argument."""
    if argument.startswith("~") and not user_config:
        raise ConfigError(f"{where or 'Include'}: bad include path {argument} (a system config cannot use ~)")
    if not argument.startswith(("/", "~")):
        argument = ("~/.ssh/" if user_config else "/etc/ssh/") + argument
    return glob_tilde(argument)


def _python_glob(pattern: bytes) -> bytes:
    """OpenSSH's glob quotes a character with a backslash; Python's glob has brackets for it."""
    out = bytearray()
    at = 0
    while at < len(pattern):
        char = pattern[at : at + 1]
        if char == b"\\" and at + 1 < len(pattern):
            at += 1
            char = pattern[at : at + 1]
            out += glob.escape(char) if char != b"/" else char
        else:
            out += char
        at += 1
    return bytes(out)


def glob_matches(pattern: str) -> list[str]:
    """Existing paths that match, sorted as ssh sorts them (strcmp on the bytes)."""
    found = glob.glob(_python_glob(os.fsencode(pattern)))
    return [os.fsdecode(path) for path in sorted(found)]


def include_paths(argument: str, *, user_config: bool, where: str = "") -> list[str]:
    """The files one Include argument reads, in order."""
    return glob_matches(include_pattern(argument, user_config=user_config, where=where))
