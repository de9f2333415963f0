"""``envdoctor hosts``: the connection plan of each destination, resolved as OpenSSH resolves
it, without connecting; like ``ssh -G`` for the whole fleet and the inventory.

Each value says where it came from: the inventory, the command line, a config ``file:line``
(found by the built-in parser when it agrees with ``ssh -G``), ``ssh -G`` alone, or a default.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass

from envdoctor.errors import ConfigError, EnvdoctorError
from envdoctor.inventory import (
    LOCAL,
    HostSpec,
    Inventory,
    mask_destination_password,
    parse_command_line_destination,
    resolve_hosts,
    ssh_config_host_names,
)
from envdoctor.logsafe import redact_secret_values
from envdoctor.transport import algorithms
from envdoctor.transport.openssh import SSH_G, HostResolver, config_file_for
from envdoctor.transport.ssh_config_resolve import resolve_builtin
from envdoctor.transport.target import ConnectionPlan, ResolvedHost, SSHOptions

EXIT_OK, EXIT_USAGE = 0, 2


@dataclass(frozen=True)
class PlanEntry:
    """One destination: its plan, or why it has none; and where its user/port were given."""

    host: str
    plan: ConnectionPlan | None = None
    error: str = ""
    given_by: str = "command line"
    #: The user and port the destination itself gave (``user@host:port``), as ``-l``/``-p``.
    user: str | None = None
    port: int | None = None


async def _plan_one(resolver: HostResolver, name: str, inventory: Inventory, ssh_config: Sequence[str]) -> PlanEntry:
    try:
        if name in inventory.hosts or name == LOCAL:
            spec = resolve_hosts([name], inventory, ssh_config_files=ssh_config)[0]
        else:
            # Any name ssh would resolve, read as check reads it (``gpu1:2222`` is host and
            # port, unless a Host line names the whole): the plan shows where it goes. (check
            # and fix also refuse a bare name the config does not define, so that a typo never
            # connects, and a host name with any other ':'.)
            target = parse_command_line_destination(
                name, named_by_config=lambda host: ssh_config_host_names(ssh_config).names_literally(host))
            spec = HostSpec(name=name, ssh=target)
        if spec.ssh is None:
            return PlanEntry(name, error=f"{name!r} is this machine: no SSH connection")
        plan = await resolver.plan(spec.ssh.host, spec.ssh.user, spec.ssh.port)
    except EnvdoctorError as exc:
        return PlanEntry(name, error=str(exc))
    given_by = f"inventory hosts.{name}.ssh" if name in inventory.hosts else "destination"
    return PlanEntry(name, plan, given_by=given_by, user=spec.ssh.user, port=spec.ssh.port)


async def connection_plans(names: Sequence[str], inventory: Inventory, options: SSHOptions) -> list[PlanEntry]:
    """Plans for every destination (groups expand to their hosts), resolved concurrently."""
    expanded: list[str] = []

    def expand(name: str, trail: tuple[str, ...]) -> None:
        if name in inventory.groups and name not in trail:
            for member in inventory.groups[name]:
                expand(member, (*trail, name))
        else:
            expanded.append(name)

    for name in names:
        expand(name, ())
    resolver = HostResolver(config_file_for(options))
    unique = list(dict.fromkeys(expanded))
    return list(await asyncio.gather(*(_plan_one(resolver, n, inventory, options.config_files) for n in unique)))


def hop_document(hop: ResolvedHost) -> dict[str, object]:
    return {"hostname": hop.hostname, "port": hop.port, "user": hop.user}


def entry_document(entry: PlanEntry) -> dict[str, object]:
    if entry.plan is None:
        return {"host": entry.host, "error": entry.error}
    target = entry.plan.target
    return {
        "host": entry.host,
        "hostname": target.hostname,
        "port": target.port,
        "user": target.user,
        "identity_files": list(target.existing_identity_files),
        "proxy_jump": [hop_document(h) for h in entry.plan.jumps] if entry.plan.jumps else None,
        "known_hosts_files": list(target.known_hosts_files),
        "strict_host_key_checking": target.strict_host_key_checking,
        "connect_timeout": target.connect_timeout,
    }


def exit_status(entries: Sequence[PlanEntry]) -> int:
    return EXIT_USAGE if any(e.plan is None for e in entries) else EXIT_OK


def shown_destination(entry: PlanEntry) -> str:
    """The ``host`` of a report: the destination exactly as given (its user is no secret: the
    user typed it), but for a password (``user:password@``), which is masked."""
    return mask_destination_password(entry.host)


def _redacted(value: object) -> object:
    """Secrets by value (tokens, key material, URL userinfo) out of every other field."""
    if isinstance(value, str):
        return redact_secret_values(value)
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    return value


def safe_document(entry: PlanEntry) -> dict[str, object]:
    document = {k: _redacted(v) for k, v in entry_document(entry).items()}
    document["host"] = shown_destination(entry)
    return document


def render_json(entries: Sequence[PlanEntry]) -> str:
    """The JSON report, already redacted (the CLI emits it as it is: see ``safe_document``)."""
    document = {"schema": 1, "command": "hosts", "exit_status": exit_status(entries),
                "hosts": [safe_document(e) for e in entries]}
    return json.dumps(document, indent=2) + "\n"


#: Field of the JSON document -> the config keyword a source is recorded under.
_SOURCE_KEYS = {"hostname": "hostname", "port": "port", "user": "user", "identity_files": "identity_files",
                "proxy_jump": "proxy", "known_hosts_files": "userknownhostsfile",
                "strict_host_key_checking": "stricthostkeychecking", "connect_timeout": "connecttimeout"}


def sources(entry: PlanEntry, config_file: str | None) -> dict[str, str]:
    """Where each value came from. With ``ssh -G`` the built-in parser names the line when it
    reaches the same value; otherwise the value is OpenSSH's alone."""
    assert entry.plan is not None
    target = entry.plan.target
    try:
        builtin = resolve_builtin(target.host, config_file=config_file, user=entry.user, port=entry.port)
    except ConfigError:
        builtin = None
    mine, theirs = entry_document(entry), None
    if builtin is not None:
        theirs = entry_document(PlanEntry(entry.host, ConnectionPlan(builtin, entry.plan.jumps)))
    found: dict[str, str] = {}
    for field, key in _SOURCE_KEYS.items():
        where = builtin.sources.get(key, "default") if builtin is not None else ""
        if field == "proxy_jump":
            same = builtin is not None and builtin.proxy_jump == target.proxy_jump
        else:
            same = theirs is not None and theirs[field] == mine[field]
        if target.resolver.startswith(SSH_G) and not same:
            where = SSH_G
        found[field] = entry.given_by if where == "command line" else where
    return found


def render_text(entries: Sequence[PlanEntry], config_file: str | None, resolver: str) -> str:
    """The text report, already redacted: each destination as given, every other line
    scrubbed of secrets by value."""
    return "".join(
        line if line in headings else redact_secret_values(line)
        for headings in [{shown_destination(e) + "\n" for e in entries}]
        for line in _text_lines(entries, config_file, resolver).splitlines(keepends=True)
    )


def _text_lines(entries: Sequence[PlanEntry], config_file: str | None, resolver: str) -> str:
    lines = []
    for entry in entries:
        if entry.plan is None:
            lines += [shown_destination(entry), f"  error: {entry.error}", ""]
            continue
        doc, where = entry_document(entry), sources(entry, config_file)
        jumps = " -> ".join(f"{h['user']}@{h['hostname']}:{h['port']}" for h in doc["proxy_jump"] or [])  # type: ignore[attr-defined]  # a list here
        timeout = doc["connect_timeout"]
        rows = [
            ("hostname", str(doc["hostname"])), ("port", str(doc["port"])), ("user", str(doc["user"])),
            ("identity files", " ".join(doc["identity_files"]) or "(none that exist)"),  # type: ignore[arg-type]  # a list
            ("proxy command", entry.plan.target.proxy_command) if entry.plan.target.proxy_command and not jumps
            else ("proxy jump", jumps or "none"),
            ("known hosts files", " ".join(doc["known_hosts_files"]) or "none"),  # type: ignore[arg-type]  # a list
            ("strict host keys", str(doc["strict_host_key_checking"])),
            ("connect timeout", f"{timeout:g}s" if isinstance(timeout, float) else "none (envdoctor waits 15s)"),
        ]
        lines.append(shown_destination(entry))
        for (label, value), field in zip(rows, _SOURCE_KEYS):
            lines.append(f"  {label:<18} {value}    [{where[field]}]")
        lines += [f"  {label:<18} {value}    [{entry.plan.target.resolver or 'ssh -G'}]"
                  for label, value in _extra_rows(entry.plan.target)]
        lines.append("")
    lines.append(f"resolved by {resolver}; config: {config_file or 'ssh default files (~/.ssh/config, /etc/ssh/ssh_config)'}")
    return "\n".join(lines) + "\n"


def _extra_rows(target: ResolvedHost) -> list[tuple[str, str]]:
    """Settings that decide the login or the host key check, shown only when the config sets
    them (the JSON document keeps its fixed fields)."""
    rows = []
    if target.identity_agent is not None:
        rows.append(("identity agent", target.identity_agent))
    if target.certificate_files:
        rows.append(("certificate files", " ".join(target.existing_certificate_files) or "(none that exist)"))
    if target.host_key_alias:
        rows.append(("host key alias", target.host_key_alias))
    if target.revoked_host_keys:
        rows.append(("revoked host keys", target.revoked_host_keys))
    if target.ca_signature_algorithms is not None and \
            tuple(target.ca_signature_algorithms) != algorithms.CA_SIGNATURES.defaults:
        rows.append(("CA signatures", ",".join(target.ca_signature_algorithms)))
    if target.required_rsa_size != 1024:
        rows.append(("required RSA size", str(target.required_rsa_size)))
    bind = [target.bind_address] if target.bind_address else []
    if target.bind_interface:
        bind.append(f"(interface {target.bind_interface}: not applied)")
    if bind:
        rows.append(("bind", " ".join(bind)))
    if target.hash_known_hosts:
        rows.append(("hash known hosts", "yes (a key accepted is recorded under a hashed name)"))
    return rows


def hosts_report(names: Sequence[str], inventory: Inventory, options: SSHOptions, fmt: str) -> tuple[str, int]:
    """The rendered report and the exit status of ``envdoctor hosts``."""
    entries = asyncio.run(connection_plans(names, inventory, options))
    if fmt == "json":
        return render_json(entries), exit_status(entries)
    resolver = HostResolver(config_file_for(options)).resolver
    return render_text(entries, config_file_for(options), resolver), exit_status(entries)
