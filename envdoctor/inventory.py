"""Which hosts to look at and what each should have: ``envdoctor.toml``, SSH aliases, ``local``.

A HOST argument is, in this order: ``local``; a host or group of the inventory; a
``user@host[:port]`` or ``ssh://[user@]host[:port]`` destination, a dotted name or an IP
address (see :func:`parse_command_line_destination`); a name the user's OpenSSH config
defines (a ``Host`` pattern that is not only wildcards nor negated on its line, or ``Match
originalhost``; see :mod:`envdoctor.transport.ssh_aliases`). Anything else is a usage error
naming the nearest alias, so that a typo never turns into a connection to a wrong machine.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envdoctor.config_trust import read_trusted_file
from envdoctor.errors import ConfigError
from envdoctor.logsafe import get_logger
from envdoctor.suggestions import did_you_mean
from envdoctor.transport.target import SSHTarget

if TYPE_CHECKING:
    from envdoctor.transport.ssh_aliases import ConfigHostNames

DEFAULT_INVENTORY = "envdoctor.toml"
LOCAL = "local"

#: Keys a ``[hosts.NAME]`` table may have, with the type each must be.
HOST_KEYS: dict[str, type | tuple[type, ...]] = {
    "ssh": str,
    "venv": str,
    "requires": list,
    "models": list,
    "trust_remote_code": bool,
    "scan": list,
    "skip": list,
    "gpus": int,
}
STAGE_KEYS: dict[str, type | tuple[type, ...]] = {"host": str, "requires": list, "command": str, "skip": list}
#: Keys a ``[groups.NAME]`` table may have (the other form is ``[groups] NAME = [...]``).
GROUP_KEYS: dict[str, type | tuple[type, ...]] = {"hosts": list, "same": bool}
#: Keys whose lists hold tables as well as strings (checked by parse_waivers).
_MIXED_LISTS = ("skip",)

#: A waiver: (check id, the reason the user gave).
Waiver = tuple[str, str]


@dataclass(frozen=True)
class HostSpec:
    """One host to check, and what the user expects of it."""

    name: str
    #: None for the local machine.
    ssh: SSHTarget | None
    venv: str | None = None
    requires: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    trust_remote_code: bool = False
    #: Extra distributions whose code ``check`` scans for trust_remote_code gaps.
    scan: tuple[str, ...] = ()
    #: The user's own patch files (``--patches FILE``), beside those in ``patches/``.
    patches: tuple[str, ...] = ()
    #: Checks the user waived (``--skip``, ``skip = [...]``): reported as waived, never failing.
    skip: tuple[Waiver, ...] = ()
    #: GPUs the host must have (``gpus = N``, ``--gpus N``); None: host.gpu only informs.
    gpus: int | None = None
    #: The job trains a drafter (``--draft``, or a stage that asks for drafter facts).
    draft: bool = False
    #: Commands of the stages that run on this host: what they start is part of what the
    #: job needs from its environment (envdoctor.install.env_choice ranks environments by it).
    stage_commands: tuple[str, ...] = ()

    @property
    def is_local(self) -> bool:
        return self.ssh is None

    @property
    def destination(self) -> str:
        return "this machine" if self.ssh is None else str(self.ssh)


@dataclass(frozen=True)
class Stage:
    name: str
    host: str
    requires: tuple[str, ...]
    command: str
    skip: tuple[Waiver, ...] = ()


#: Checks that matter only to drafter training, and the stage placeholders that ask for
#: drafter facts: a stage naming either trains a drafter.
DRAFTER_CHECKS = ("model.mask-token",)
_DRAFTER_PLACEHOLDER = re.compile(r"\{(mask_token_id|mask_token_id_candidate|dflash_[a-z_]+|draft_layers)\}")


def stage_trains_drafter(stage: Stage) -> bool:
    """Whether a stage asks for drafter facts (a drafter check, or a mask/DFlash placeholder)."""
    return any(c in DRAFTER_CHECKS for c in stage.requires) or bool(_DRAFTER_PLACEHOLDER.search(stage.command))


@dataclass(frozen=True)
class Inventory:
    path: Path | None = None
    hosts: Mapping[str, HostSpec] = field(default_factory=dict)
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    stages: Mapping[str, Stage] = field(default_factory=dict)
    #: Groups marked ``same = true``: their hosts run one job, so what they have must agree
    #: (``check`` compares them as ``envdoctor diff`` does).
    same_groups: frozenset[str] = frozenset()

    def group_hosts(self, name: str) -> tuple[str, ...]:
        """The names a group stands for, nested groups expanded, each once, in order."""
        found: dict[str, None] = {}

        def add(member: str, trail: tuple[str, ...]) -> None:
            if member in trail:
                raise ConfigError(f"group {trail[0]!r} includes itself through {' -> '.join(trail + (member,))}")
            if member in self.groups:
                for inner in self.groups[member]:
                    add(inner, trail + (member,))
            else:
                found.setdefault(member)

        add(name, ())
        return tuple(found)


@dataclass(frozen=True)
class Overrides:
    """Ad-hoc settings from the command line; they apply to every host of the run."""

    venv: str | None = None
    requires: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    trust_remote_code: bool = False
    #: ``--scan DIST``: distributions to scan for trust_remote_code gaps besides the default ones.
    scan: tuple[str, ...] = ()
    skip: tuple[Waiver, ...] = ()
    gpus: int | None = None
    draft: bool = False


def parse_requirement(text: str, *, where: str) -> str:
    """Validate a PEP 508 requirement; returns it unchanged."""
    from packaging.requirements import InvalidRequirement, Requirement  # (its parser: 20 ms of start-up)

    try:
        Requirement(text)
    except InvalidRequirement as exc:
        raise ConfigError(
            f"{where}: {text!r} is not a valid requirement: {exc}",
            hint="use PEP 508 syntax, e.g. 'tiktoken' or 'transformers>=4.57,<5.16'",
        ) from None
    return text


def parse_waivers(items: Sequence[Any], *, where: str, default_reason: str) -> tuple[Waiver, ...]:
    """``skip = ["ID", {id = "ID", reason = "..."}]`` (or ``--skip ID[=REASON]``) as waivers."""
    waivers: list[Waiver] = []
    for item in items:
        if isinstance(item, str):
            check_id, _, reason = item.partition("=")
            check_id, reason = check_id.strip(), reason.strip()
        elif isinstance(item, dict):
            unknown = set(item) - {"id", "reason"}
            if unknown or not isinstance(item.get("id"), str) or not isinstance(item.get("reason", ""), str):
                raise ConfigError(f'{where}: a waiver is "ID" or {{id = "ID", reason = "why"}}, not {item!r}')
            check_id, reason = item["id"].strip(), item.get("reason", "").strip()
        else:
            raise ConfigError(f'{where}: a waiver is "ID" or {{id = "ID", reason = "why"}}, not {item!r}')
        if not check_id:
            raise ConfigError(f"{where}: a waiver names no check id")
        waivers.append((check_id, reason or default_reason))
    return tuple(waivers)


def load_inventory(path: str | os.PathLike[str] | None = None) -> Inventory:
    """Read the inventory named by ``--config``, else ``./envdoctor.toml`` if there is one."""
    if path is None:
        candidate = Path(DEFAULT_INVENTORY)
        if not candidate.is_file():
            return Inventory()
        config_path = candidate
    else:
        config_path = Path(path)
        if not config_path.is_file():
            raise ConfigError(f"config file {config_path} " + ("is not a regular file" if config_path.exists()
                                                               else "does not exist"))
    # Refused when another user could have written it: it can grant trust_remote_code.
    raw = read_trusted_file(config_path, "config file")
    import tomllib  # (only when there is a config file)

    get_logger(__name__).info("config_loaded", path=os.path.abspath(config_path))
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{config_path} is not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{config_path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {config_path}: {exc.strerror}") from None
    return _parse_inventory(data, config_path)


def _check_table(table: Any, keys: Mapping[str, type | tuple[type, ...]], where: str) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    for key, value in table.items():
        if key not in keys:
            raise ConfigError(f"{where}: unknown key {key!r}", hint=f"known keys: {', '.join(keys)}")
        expected = keys[key]
        if not isinstance(value, expected):
            kind = expected.__name__ if isinstance(expected, type) else "/".join(t.__name__ for t in expected)
            raise ConfigError(f"{where}.{key} must be a {kind}, not {type(value).__name__}")
        if isinstance(value, bool) and expected is int:
            raise ConfigError(f"{where}.{key} must be a int, not bool")
        if isinstance(value, list) and key not in _MIXED_LISTS and not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}.{key} must be a list of strings")
        if isinstance(value, list) and key not in _MIXED_LISTS and not all(v.strip() for v in value):
            raise ConfigError(f"{where}.{key} has an empty string", hint="remove it, or name what it stands for")
    return table


def _parse_inventory(data: dict[str, Any], path: Path) -> Inventory:
    unknown = set(data) - {"hosts", "groups", "stages"}
    if unknown:
        raise ConfigError(f"{path}: unknown table {sorted(unknown)[0]!r}", hint="known: hosts, groups, stages")
    hosts: dict[str, HostSpec] = {}
    hosts_raw = data.get("hosts") or {}
    if not isinstance(hosts_raw, dict):
        raise ConfigError(f"{path}: hosts must be a table of [hosts.NAME] tables")
    for name, raw in hosts_raw.items():
        where = f"{path}: hosts.{name}"
        table = _check_table(raw, HOST_KEYS, where)
        venv = table.get("venv")
        if venv is not None and not venv.startswith(("/", "~")):
            raise ConfigError(f"{where}.venv {venv!r} must be an absolute path on the host (or start with ~)",
                              hint='e.g. venv = "/root/venv_sglang211" (or "~/venv")')
        destination = table.get("ssh", name)
        hosts[name] = HostSpec(
            name=name,
            ssh=None if destination == LOCAL else parse_destination(destination, where=f"{where}.ssh"),
            venv=table.get("venv"),
            requires=tuple(parse_requirement(r, where=f"{where}.requires") for r in table.get("requires", [])),
            models=tuple(table.get("models", [])),
            trust_remote_code=table.get("trust_remote_code", False),
            scan=tuple(table.get("scan", [])),
            skip=parse_waivers(table.get("skip", []), where=f"{where}.skip", default_reason=f"waived in {path}"),
            gpus=_gpu_count(table.get("gpus"), where=f"{where}.gpus"),
        )
    groups, same_groups = _parse_groups(data.get("groups") or {}, hosts, path)
    stages: dict[str, Stage] = {}
    for name, raw in (data.get("stages") or {}).items():
        where = f"{path}: stages.{name}"
        table = _check_table(raw, STAGE_KEYS, where)
        if not table.get("command", "").strip():
            raise ConfigError(f"{where} needs a command", hint='e.g. command = "{python} -m speculators.train ..."')
        stages[name] = Stage(name, table.get("host", ""), tuple(table.get("requires", [])), table["command"],
                             parse_waivers(table.get("skip", []), where=f"{where}.skip",
                                           default_reason=f"waived for stage {name} in {path}"))
    for name, spec in hosts.items():
        commands = tuple(s.command for s in stages.values() if s.host == name)
        if commands:
            hosts[name] = replace(spec, stage_commands=commands)
    return Inventory(path, hosts, groups, stages, same_groups)


def _parse_groups(groups_raw: Any, hosts: Mapping[str, HostSpec],
                  path: Path) -> tuple[dict[str, tuple[str, ...]], frozenset[str]]:
    """``[groups] NAME = ["host", ...]``, or ``[groups.NAME]`` with ``hosts = [...]`` and
    ``same = true`` (the hosts run one job: what they have must agree)."""
    if not isinstance(groups_raw, dict):
        raise ConfigError(f"{path}: groups must be a table of lists or of [groups.NAME] tables")
    groups: dict[str, tuple[str, ...]] = {}
    same: set[str] = set()
    for name, raw in groups_raw.items():
        where = f"{path}: groups.{name}"
        if isinstance(raw, dict):
            table = _check_table(raw, GROUP_KEYS, where)
            if "hosts" not in table:
                raise ConfigError(f"{where} needs hosts", hint='e.g. hosts = ["node1", "node2"] and same = true')
            members = table["hosts"]
            if table.get("same", False):
                same.add(name)
        elif isinstance(raw, list) and all(isinstance(m, str) for m in raw):
            members = raw
        else:
            raise ConfigError(f"{where} must be a list of host names or a table with hosts = [...]")
        if name in hosts:
            raise ConfigError(f"{path}: {name!r} is both a host and a group")
        groups[name] = tuple(members)
    return groups, frozenset(same)


def _gpu_count(value: int | None, *, where: str) -> int | None:
    if value is not None and value < 0:
        raise ConfigError(f"{where} must be 0 or more, not {value}")
    return value


#: An inventory ``ssh = "..."`` value: the user is all before the last ``@``; a bare IPv6
#: address (two or more colons) has no port; a name may hold ``[`` after its first character.
#: (The command line reads the same ``host:port``, and other names as ssh reads them: see
#: :func:`parse_command_line_destination`.)
_DESTINATION = re.compile(r"^(?:(?P<user>\S+)@)?(?P<host>\[[^\]]+\]|[^:@\s\[][^:@\s]*"
                          r"|[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(?:%[\w.-]+)?)(?::(?P<port>\d+))?$")


def _parse_uri(text: str, where: str) -> SSHTarget:
    from envdoctor.transport.ssh_config import parse_port, parse_ssh_uri

    uri = "ssh://" + text[6:]
    try:
        uri_user, uri_host, port_text = parse_ssh_uri(uri)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {str(exc).replace(repr(uri), repr(mask_destination_password(uri)))}") from None
    uri_port = parse_port(port_text) if port_text else None
    if uri_port is not None and uri_port <= 0:
        raise ConfigError(f"{where}: {mask_destination_password(text)!r}: port {port_text!r} is not a port "
                          "number or service name")
    return SSHTarget(host=uri_host, user=uri_user, port=uri_port)


def mask_destination_password(text: str) -> str:
    """``ssh://user:password@host`` and ``user:password@host`` with the password as ``***``;
    any other destination unchanged (its user is no secret: whoever runs envdoctor typed it)."""
    uri = text.startswith("ssh://")
    head, at, tail = text[6:].partition("@") if uri else text.rpartition("@")
    if uri:  # the user before any ;params, percent-decoded as ssh's urldecode does
        import urllib.parse

        head = urllib.parse.unquote(head.partition(";")[0])
    name, colon, _ = head.partition(":")
    if not at or not colon:
        return text
    return ("ssh://" if uri else "") + f"{name}:***@{tail}"


def _refuse_password(target: SSHTarget, text: str, where: str) -> None:
    """A user with a ``:`` is a password in a destination: ssh would send ``user:password`` as
    the user name (no Unix account has a ``:`` in its name), so it is refused, never echoed."""
    if target.user is not None and ":" in target.user:
        shown = mask_destination_password(text)
        given = repr(shown) if shown != text else "the destination"
        raise ConfigError(
            f"{where}: {given} holds a password (user:password@): ssh takes none in a destination and would "
            f"log in as a user named {target.user.partition(':')[0] + ':***'!r}; give the user alone and log in "
            "with a key or ssh-agent")


def parse_destination(text: str, *, where: str = "host") -> SSHTarget:
    """An inventory ``ssh = "..."`` value: ``user@host[:port]``, ``host:port``,
    ``[v6addr]:port``, ``ssh://user@host:port`` or a bare alias."""
    if text[:6].lower() == "ssh://":  # a URI, as ssh's parse_uri accepts it
        target = _parse_uri(text, where)
        _refuse_password(target, text, where)
        return target
    if text.startswith("-"):
        raise ConfigError(f"{where}: {text!r} is not a host (it starts with '-')")
    match = _DESTINATION.match(text)
    if not match:
        raise ConfigError(f"{where}: {mask_destination_password(text)!r} is not a host, alias or user@host[:port]")
    port = int(match["port"]) if match["port"] else None
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"{where}: port {port} is out of range")
    host = match["host"]
    target = SSHTarget(host=host[1:-1] if host.startswith("[") else host, user=match["user"], port=port)
    _refuse_password(target, text, where)
    return target


#: The contract's ``host:port`` on the command line (DESIGN: HOST is ``user@host[:port]``): a
#: name without ``:`` or a bracketed address, then a port number. (A bare IPv6 address has
#: several colons and no port, as in the inventory.)
_HOST_PORT = re.compile(r"^(?P<host>\[[^\]]+\]|[^:\[\]]+):(?P<port>\d+)$")


def parse_command_line_destination(text: str, *, where: str = "host",
                                   named_by_config: Callable[[str], bool] = lambda name: False) -> SSHTarget:
    """A destination given on the command line: an ``ssh://[user@]host[:port]`` URI (lower-case
    scheme, as ssh's strncmp), else ``[user@]host[:port]`` split at the last ``@``, as the
    contract promises. ``ssh`` itself would read ``gpu1:2222`` as the host name ``gpu1:2222``
    and fail to look it up; envdoctor keeps its documented meaning (host ``gpu1``, port 2222),
    except where the SSH config names the whole ``gpu1:2222`` itself, without wildcards, in a
    Host line or ``Match originalhost`` (``named_by_config``): then, as for ssh, that block
    decides. (``Host gpu*`` also matches the name ``gpu1:2222`` in ssh, which would then
    connect to port 22; it was written for ``gpu1``, so the port given is kept.) Any other ``:`` stays in the
    host name, as ssh reads it (commands that connect refuse it: :func:`port_in_host_name`).
    What ssh refuses (invalid characters, an empty user, a leading ``-``) is a ConfigError,
    and so is an empty host and a password."""
    if text.startswith("ssh://"):
        target = _parse_uri(text, where)
    else:
        if text.startswith("-"):
            raise ConfigError(f"{where}: {text!r} is not a host (it starts with '-')")
        user, at, host = text.rpartition("@")
        if at and not user:
            raise ConfigError(f"{where}: {text!r} has an empty user name before '@'")
        target = SSHTarget(host=host, user=user if at else None)
        match = _HOST_PORT.match(host)
        if match and not named_by_config(host):
            port = int(match["port"])
            if not 0 < port < 65536:
                raise ConfigError(f"{where}: port {port} is out of range")
            name = match["host"]
            target = SSHTarget(host=name[1:-1] if name.startswith("[") else name, user=target.user, port=port)
    if not target.host:
        raise ConfigError(f"{where}: {mask_destination_password(text)!r} names no host")
    _refuse_password(target, text, where)
    # What ssh refuses in a command-line host and user (its valid_hostname, valid_ruser).
    from envdoctor.transport.ssh_config_resolve import check_command_line  # (loaded to resolve anyway)

    try:
        check_command_line(target.host, target.user)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return target


def _is_ip_address(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def port_in_host_name(text: str, target: SSHTarget) -> str | None:
    """Why a command that connects refuses a command-line destination whose host name still
    holds a ``:`` (not an IP address, not ``host:port``): ssh would look up that whole name,
    which is never what was meant. The message says how to give a port. None: no ``:``."""
    host = target.host
    if ":" not in host or _is_ip_address(host):
        return None
    given = repr(mask_destination_password(text))
    if text[:6].lower() == "ssh://":
        return f"{given}: the scheme is ssh:// in lower case (ssh reads {given} as a host name)"
    user = f"{target.user}@" if target.user else ""
    return (f"{given}: {host!r} is not a host name nor host:port (a port is a number: "
            f"{user}HOST:PORT, [ADDRESS]:PORT or ssh://{user}HOST:PORT)")


def ssh_config_host_names(ssh_config_files: Sequence[str]) -> ConfigHostNames:
    from envdoctor.transport.ssh_aliases import config_host_names  # (only for names that are not local)

    """The names the SSH config defines: ``--ssh-config`` alone (like ``ssh -F``), else
    ``~/.ssh/config`` (in the password database's home, as ssh reads it) and the system file."""
    from envdoctor.transport.ssh_config import SYSTEM_CONFIG
    from envdoctor.transport.target import user_config_path

    if ssh_config_files:
        files = [(str(f), True) for f in ssh_config_files]
    else:
        files = [(user_config_path(), True), (SYSTEM_CONFIG, False)]
    return config_host_names(files)


def looks_like_address(name: str) -> bool:
    """A dotted name or an IP address: ssh would try it as it is, so it needs no alias."""
    return "." in name.strip(".") or ":" in name or name.startswith("ssh://")


def resolve_hosts(
    names: Sequence[str],
    inventory: Inventory,
    overrides: Overrides = Overrides(),
    *,
    ssh_config_files: Sequence[str] = (),
) -> list[HostSpec]:
    """Turn HOST arguments into specs, expanding groups and applying the ad-hoc options."""
    if not names:
        names = [LOCAL]
    alias_patterns: ConfigHostNames | None = None
    specs: dict[str, HostSpec] = {}

    def add(name: str, trail: tuple[str, ...]) -> None:
        nonlocal alias_patterns
        if name in trail:
            raise ConfigError(f"group {trail[0]!r} includes itself through {' -> '.join(trail + (name,))}")
        if name in inventory.groups:
            for member in inventory.groups[name]:
                add(member, trail + (name,))
            return
        if name in specs:
            return
        if name in inventory.hosts:
            specs[name] = inventory.hosts[name]
        elif name == LOCAL:
            specs[name] = HostSpec(name=LOCAL, ssh=None)
        elif "@" in name or looks_like_address(name):
            def config_names() -> ConfigHostNames:
                nonlocal alias_patterns
                if alias_patterns is None:
                    alias_patterns = ssh_config_host_names(ssh_config_files)
                return alias_patterns

            def named(host: str) -> bool:
                return config_names().names(host)

            def named_literally(host: str) -> bool:  # ``Host gpu1:2222``: ssh uses that block, and so do we
                return config_names().names_literally(host)

            target = parse_command_line_destination(name, named_by_config=named_literally)
            refusal = port_in_host_name(name, target)
            if refusal is not None and not named_literally(target.host):
                raise ConfigError(refusal)
            if "@" not in name and not looks_like_address(target.host) and not named(target.host):
                if target.host in inventory.hosts or target.host in inventory.groups:
                    raise ConfigError(f"{name!r}: {target.host!r} is a host or group of the inventory; give it "
                                      "without a port (its ssh = \"...\" line says where it is)")
                unknown(target.host, given=name)  # ``ct20:22``: a bare name with a port is still a typo
            specs[name] = HostSpec(name=name, ssh=target)
        else:
            if alias_patterns is None:
                alias_patterns = ssh_config_host_names(ssh_config_files)
            if not alias_patterns.names(name):
                unknown(name)
            specs[name] = HostSpec(name=name, ssh=parse_command_line_destination(name))

    def unknown(name: str, *, given: str = "") -> None:
        assert alias_patterns is not None
        where = f"in {inventory.path}" if inventory.path else "in an envdoctor.toml"
        raise ConfigError(
            f"unknown host {name!r}{f' (in {given!r})' if given else ''}: not a host or group {where} and not a "
            "Host in your SSH config" + did_you_mean(name, [*alias_patterns.literal_names, *inventory.hosts,
                                                             *inventory.groups]),
            hint="add it to envdoctor.toml or ~/.ssh/config, or give user@host[:port] or ssh://[user@]host[:port]",
        )

    for name in names:
        add(name, ())
    return [_apply(spec, overrides) for spec in specs.values()]


def _apply(spec: HostSpec, overrides: Overrides) -> HostSpec:
    return replace(
        spec,
        venv=overrides.venv or spec.venv,
        requires=_unique(spec.requires + overrides.requires),
        models=_unique(spec.models + overrides.models),
        trust_remote_code=spec.trust_remote_code or overrides.trust_remote_code,
        scan=_unique(spec.scan + overrides.scan),
        skip=spec.skip + overrides.skip,
        gpus=overrides.gpus if overrides.gpus is not None else spec.gpus,
        draft=spec.draft or overrides.draft,
    )


def _unique(items: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


#: Segments of a stage's command that only set up the shell before the job starts.
_SETUP_PROGRAMS = frozenset({"cd", "export", "source", ".", "set", "ulimit", "echo", "true", "mkdir", "unset", "umask"})
#: Words that run the next word as the program (``env A=1 python ...``, ``nohup python ...``).
_PROGRAM_WRAPPERS = frozenset({"env", "nohup", "exec", "time", "nice", "stdbuf", "setsid", "numactl"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class StageCommand:
    """What a stage's shell command starts: the folder it runs in (the ``cd DIR`` before the
    job, joined as the shell would; None: the login folder), and the words of the segment that
    runs the job, from its program on (``A=1``, ``env`` and ``nohup`` left out)."""

    workdir: str | None
    words: tuple[str, ...]

    @property
    def program(self) -> str:
        return self.words[0] if self.words else ""


def parse_stage_command(command: str) -> StageCommand:
    """The working folder and the job's words of a stage command (``cd /job && {python} x.py``).
    A command the shell lexer cannot split has no words."""
    import shlex

    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return StageCommand(None, ())
    workdir: str | None = None
    segment: list[str] = []
    for token in [*tokens, ";"]:
        if token and set(token) <= set("&;|()"):
            words = _program_words(segment)
            segment = []
            if not words:
                continue
            if words[0] == "cd":
                target = words[1] if len(words) > 1 else "~"
                workdir = target if workdir is None or target.startswith(("/", "~")) else f"{workdir.rstrip('/')}/{target}"
                continue
            if words[0] in _SETUP_PROGRAMS:
                continue
            return StageCommand(workdir, tuple(words))
        else:
            segment.append(token)
    return StageCommand(workdir, ())


def _program_words(words: list[str]) -> list[str]:
    index = 0
    while index < len(words) and (_ASSIGNMENT.match(words[index]) or words[index] in _PROGRAM_WRAPPERS
                                  or (index and words[index - 1] == "env" and words[index].startswith("-"))):
        index += 1
    return words[index:]
