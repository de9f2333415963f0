"""``ssh -G`` answers kept between runs, keyed by everything ssh reads to give them.

Starting ``ssh`` costs about 3.6 ms of CPU (linking OpenSSL and Kerberos), paid per host and per
run. Its answer is a pure function of: the ssh binary, the destination, ``-l``/``-p``, the
config files ssh reads (the user config from the password database's home, the system file,
and every Include found as ssh's glob finds it, ``~`` from ``$HOME``: :mod:`ssh_include`),
their contents, the environment variables they name in ``${...}``, ``$HOME``, and the local
account and host name. All of that goes into the key, so any change is a miss. A config
whose answer is not a pure function is never cached: ``Match exec`` anywhere in the files
read (runs a command) and ``CanonicalizeHostname yes`` or ``always`` (asks DNS). Nor is one
whose files cannot all be read here as ssh reads them (a file that is not a regular file,
cannot be opened, is too large, or an Include ssh refuses). Errors are never cached.

The cache is a folder of the user's (``$XDG_CACHE_HOME/envdoctor/ssh-g``, mode 0700); an
entry another user could have written is ignored, since it would decide where we connect.
``ENVDOCTOR_SSH_G_CACHE=off`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from stat import S_ISREG
from dataclasses import dataclass
from pathlib import Path

from envdoctor import user_cache
from envdoctor.errors import ConfigError
from envdoctor.transport.ssh_config import SYSTEM_CONFIG, parse_lines
from envdoctor.transport.ssh_include import glob_matches, include_pattern
from envdoctor.transport.ssh_tokens import local_account

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_ENTRIES = 4096
MAX_INCLUDE_DEPTH = 16
_DOLLAR = re.compile(r"\$\{([^}]*)\}")


@dataclass(frozen=True)
class ConfigState:
    """The digest of every input of ``ssh -G`` but the destination; None when not cacheable."""

    digest: str | None
    reason: str = ""


def config_state(ssh: str, config_file: str | None) -> ConfigState:
    """Read the config files ssh would read and hash them with the other inputs."""
    if os.environ.get("ENVDOCTOR_SSH_G_CACHE", "").lower() in ("off", "0", "no"):
        return ConfigState(None, "ENVDOCTOR_SSH_G_CACHE is off")
    digest = hashlib.sha256(b"envdoctor-ssh-g-2\0")
    try:
        stat = os.stat(ssh)
    except OSError:
        return ConfigState(None, "ssh binary not found")
    account = local_account()
    home = os.environ.get("HOME")  # (ssh's glob expands an Include's ~ from it)
    # The binary by more than its modification time, which its owner can set back.
    for part in (os.path.realpath(ssh), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev,
                 os.getuid(), os.geteuid(), account.pw_name, account.pw_dir, socket.gethostname(), home is None,
                 home):
        digest.update(f"{part}\0".encode())
    if config_file is not None:
        files = [(os.path.realpath(config_file), True)]
    else:
        files = [(os.path.join(account.pw_dir, ".ssh", "config"), True), (SYSTEM_CONFIG, False)]
    variables: set[str] = set()
    seen: set[str] = set()
    try:
        for path, user_config in files:
            reason = _walk(path, user_config, digest, variables, seen, 0)
            if reason:
                return ConfigState(None, reason)
    except (ConfigError, OSError) as exc:
        return ConfigState(None, f"config not readable here: {exc}")
    for name in sorted(variables):
        value = os.environ.get(name)
        digest.update(f"${name}={'' if value is None else value}\0{value is None}\0".encode())
    return ConfigState(digest.hexdigest())


def _read_regular(path: str) -> tuple[bytes, os.stat_result] | None:
    """A config file's bytes and status; None when absent. Opened without blocking (a FIFO
    would hang here, before ssh even runs); anything but a regular file is an OSError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    try:
        stat = os.fstat(fd)
        if not S_ISREG(stat.st_mode):
            raise OSError(f"{path} is not a regular file")
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(MAX_FILE_BYTES + 1), stat
    finally:
        os.close(fd)


def _walk(path: str, user_config: bool, digest: "hashlib._Hash", variables: set[str], seen: set[str],
          depth: int) -> str:
    """Hash one file and what it includes; a reason when the answer would not be a pure function."""
    if depth > MAX_INCLUDE_DEPTH:
        return "Include nested too deep"
    found = _read_regular(path)
    if found is None:
        digest.update(f"absent\0{path}\0".encode())
        return ""
    data, stat = found
    if len(data) > MAX_FILE_BYTES:
        return f"{path} is too large to cache"
    digest.update(f"file\0{path}\0{stat.st_uid}\0{stat.st_mode}\0{hashlib.sha256(data).hexdigest()}\0".encode())
    if path in seen:
        return ""
    seen.add(path)
    text = data.decode("utf-8", "surrogateescape")
    variables.update(_DOLLAR.findall(text))
    for line in parse_lines(text, path):
        # Any mention of exec on a Match line: however ssh splits the words, it may run it.
        if line.keyword == "match" and "exec" in line.raw.lower():
            return f"{line.where}: Match exec (ssh runs a command)"
        if line.keyword == "match" and "localnetwork" in line.raw.lower():
            return f"{line.where}: Match localnetwork (newer ssh asks the network interfaces)"
        if line.keyword == "canonicalizehostname" and line.args and line.args[0].lower() not in ("no", "false"):
            return f"{line.where}: CanonicalizeHostname (ssh asks DNS)"
        if line.keyword == "canonicalizepermittedcnames" and line.args and line.args[0].lower() != "none":
            return f"{line.where}: CanonicalizePermittedCNAMEs (ssh asks DNS)"
        if line.keyword == "include":
            for argument in line.args:
                if "%" in argument or "${" in argument:  # (newer ssh expands them, per destination)
                    return f"{line.where}: Include with % tokens or ${{VAR}} (its files depend on the destination)"
                pattern = include_pattern(argument, user_config=user_config, where=line.where)
                included = glob_matches(pattern)
                digest.update(f"include\0{pattern}\0{chr(0).join(included)}\0".encode())
                for one in included:
                    reason = _walk(one, user_config, digest, variables, seen, depth + 1)
                    if reason:
                        return reason
    return ""


def cache_folder() -> Path:
    return user_cache.folder("ssh-g")


def _entry(state: ConfigState, destination: str, user: str | None, port: int | None) -> Path:
    assert state.digest is not None
    key = hashlib.sha256(f"{state.digest}\0{destination}\0{user or ''}\0{port or ''}".encode()).hexdigest()
    return cache_folder() / f"{key[:40]}.txt"


def load(state: ConfigState, destination: str, user: str | None, port: int | None) -> str | None:
    """The cached answer, if there is one that only this user could have written."""
    if state.digest is None:
        return None
    data = user_cache.read_private(_entry(state, destination, user, port), MAX_FILE_BYTES)
    return None if data is None else data.decode("utf-8", "surrogateescape")


def store(state: ConfigState, destination: str, user: str | None, port: int | None, answer: str) -> None:
    """Keep an answer (atomically); a cache that cannot be written is only a slower next run."""
    if state.digest is None:
        return
    user_cache.write_private(_entry(state, destination, user, port), answer.encode("utf-8", "surrogateescape"))


def prune() -> None:
    """Keep the folder bounded: past MAX_ENTRIES answers, the older half goes."""
    folder = cache_folder()
    try:
        entries = list(os.scandir(folder))
        if len(entries) <= MAX_ENTRIES:
            return
        entries.sort(key=lambda e: e.stat().st_mtime)
        for entry in entries[: len(entries) // 2]:
            os.unlink(entry.path)
    except OSError:
        return
