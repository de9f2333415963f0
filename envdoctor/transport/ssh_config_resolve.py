"""One destination's settings from OpenSSH config files, evaluated as readconf.c does.

The fallback for controllers without an ``ssh`` client (see :mod:`openssh`); every value
keeps the ``file:line`` it came from, which ``envdoctor hosts`` shows.
"""

from __future__ import annotations

import functools
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from envdoctor.errors import ConfigError
from envdoctor.transport.ssh_config import (
    SYSTEM_CONFIG,
    Line,
    include_paths,
    match_pattern,
    match_pattern_list,
    parse_jump,
    parse_port,
    read_config,
    strdelim_words,
)
from envdoctor.transport.ssh_tokens import (
    TokenContext,
    expand_identity_files,
    expand_path,
    local_account,
    tilde_expand,
)
from envdoctor.transport import algorithms
from envdoctor.transport.ssh_forwards import FORWARD_KEYWORDS, forward_line
from envdoctor.transport.ssh_values import check_value, convtime
from envdoctor.transport.target import ResolvedHost

BUILTIN = "built-in parser"
MAX_INCLUDE_DEPTH = 16
MAX_IDENTITY_FILES = 100  # SSH_MAX_IDENTITY_FILES
DEFAULT_IDENTITY_FILES = tuple(
    f"~/.ssh/{name}" for name in ("id_rsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519", "id_ed25519_sk", "id_xmss", "id_dsa")
)
DEFAULT_USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
STRICT_VALUES = {"yes": "true", "true": "true", "no": "false", "false": "false", "off": "false",
                 "ask": "ask", "accept-new": "accept-new"}
BOOLEANS = {"yes": True, "true": True, "no": False, "false": False}
#: Keywords that take exactly one argument (more is an error, as in ssh).
SINGLE = frozenset({"hostname", "port", "user", "identityfile", "identitiesonly",
                    "stricthostkeychecking", "hostkeyalias", "checkhostip", "connecttimeout",
                    "canonicalizehostname", "ciphers", "kexalgorithms", "macs", "hostkeyalgorithms",
                    "pubkeyacceptedalgorithms", "hashknownhosts", "casignaturealgorithms", "revokedhostkeys",
                    "requiredrsasize", "bindaddress", "bindinterface", "connectionattempts"})
#: Old spellings readconf.c reads as another keyword.
KEYWORD_ALIASES = {"pubkeyacceptedkeytypes": "pubkeyacceptedalgorithms"}


#: Every keyword OpenSSH 9.2 (Debian) accepts, deprecated and unsupported ones included (those
#: only warn); any other is an error unless IgnoreUnknown names it, as in readconf.c.
KNOWN_KEYWORDS = frozenset("""
addkeystoagent addressfamily afstokenpassing batchmode bindaddress bindinterface canonicaldomains
canonicalizefallbacklocal canonicalizehostname canonicalizemaxdots canonicalizepermittedcnames
casignaturealgorithms certificatefile challengeresponseauthentication checkhostip cipher ciphers
clearallforwardings compression compressionlevel connectionattempts connecttimeout controlmaster
controlpath controlpersist dsaauthentication dynamicforward enableescapecommandline enablesshkeysign
escapechar exitonforwardfailure fallbacktorsh fingerprinthash forkafterauthentication forwardagent
forwardx11 forwardx11timeout forwardx11trusted gatewayports globalknownhostsfile globalknownhostsfile2
gssapiauthentication gssapiclientidentity gssapidelegatecredentials gssapikexalgorithms gssapikeyexchange
gssapirenewalforcesrekey gssapiserveridentity gssapitrustdns hashknownhosts host hostbasedacceptedalgorithms
hostbasedauthentication hostbasedkeytypes hostkeyalgorithms hostkeyalias hostname identitiesonly
identityagent identityfile identityfile2 ignoreunknown include ipqos kbdinteractiveauthentication
kbdinteractivedevices keepalive kerberosauthentication kerberostgtpassing kexalgorithms knownhostscommand
localcommand localforward loglevel logverbose macs match nohostauthenticationforlocalhost
numberofpasswordprompts passwordauthentication permitlocalcommand permitremoteopen pkcs11provider port
preferredauthentications protocol proxycommand proxyjump proxyusefdpass pubkeyacceptedalgorithms
pubkeyacceptedkeytypes pubkeyauthentication rekeylimit remotecommand remoteforward requesttty
requiredrsasize revokedhostkeys rhostsauthentication rhostsrsaauthentication rsaauthentication
securitykeyprovider sendenv serveralivecountmax serveraliveinterval sessiontype setenv skeyauthentication
smartcarddevice stdinnull streamlocalbindmask streamlocalbindunlink stricthostkeychecking syslogfacility
tcpkeepalive tisauthentication tunnel tunneldevice updatehostkeys useprivilegedport user userknownhostsfile
userknownhostsfile2 useroaming usersh verifyhostkeydns visualhostkey xauthlocation
""".split())


class UnresolvableError(ConfigError):
    """The config needs something this parser will not do (run a ``Match exec`` command)."""


@dataclass
class Evaluation:
    """The state of one pass over the config files for one destination."""

    host: str  # what Host patterns match: the name as typed, or the hostname in the final pass
    original_host: str
    final_pass: bool
    values: dict[str, tuple[object, str]] = field(default_factory=dict)
    identity_files: list[tuple[str, str]] = field(default_factory=list)
    certificate_files: list[tuple[str, str]] = field(default_factory=list)
    #: Socket paths of the forwarding lines that apply (ssh expands their % tokens).
    forward_paths: list[tuple[str, str]] = field(default_factory=list)
    want_final_pass: bool = False

    def first(self, key: str, value: object, where: str) -> None:
        self.values.setdefault(key, (value, where))


@functools.lru_cache(maxsize=256)
def _lines(path: str, identity: tuple[int, ...]) -> tuple[Line, ...]:
    return tuple(read_config(path))


def lines_of(path: str) -> tuple[Line, ...]:
    """A file's directives, parsed once per process (again if the file changes)."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return ()
    except OSError as exc:
        raise ConfigError(f"cannot read SSH config {path}: {exc.strerror}") from None
    # Not the modification time alone: its owner can set it back after a same-size edit.
    return _lines(path, (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev))


def evaluate_file(state: Evaluation, path: str, *, user_config: bool, active: bool = True, depth: int = 0,
                  never_match: bool = False) -> None:
    """One file in order; ``active`` says whether its lines before any Host/Match apply."""
    for line in lines_of(path):
        keyword, args = line.keyword, line.args
        if not line.raw.strip(" \t\r\n"):
            raise ConfigError(f"{line.where}: no argument after keyword {keyword!r}")
        if keyword == "host":
            active = not never_match and host_line_matches(state.host, args, line.where)
        elif keyword == "match":
            active = match_line(state, strdelim_words(line.raw), line.where) and not never_match
        elif keyword == "include":
            if not args:
                raise ConfigError(f"{line.where}: Include needs a file name")
            if depth >= MAX_INCLUDE_DEPTH:
                raise ConfigError(f"{line.where}: Include nested more than {MAX_INCLUDE_DEPTH} deep")
            for pattern in args:
                for included in include_paths(pattern, user_config=user_config, where=line.where):
                    # An Include inside a block that does not apply is read, but nothing in it applies.
                    evaluate_file(state, included, user_config=user_config, active=active, depth=depth + 1,
                                  never_match=never_match or not active)
        else:
            apply_keyword(state, line, active)


def host_line_matches(host: str, patterns: Sequence[str], where: str) -> bool:
    """A ``Host`` line: any pattern matches and no negated one does; a comma is a literal."""
    matched = False
    for pattern in patterns:
        if not pattern:
            raise ConfigError(f"{where}: Host has an empty pattern")
        if pattern.startswith("!"):
            if match_pattern(host, pattern[1:]):
                return False
        elif match_pattern(host, pattern):
            matched = True
    return matched


def match_line(state: Evaluation, args: Sequence[str], where: str) -> bool:
    """A ``Match`` line, as readconf.c's ``match_cfg_line``."""
    words = list(args)
    result = True
    attributes = 0
    if not words:
        raise ConfigError(f"{where}: Match needs one or more criteria")
    while words:
        attribute = words.pop(0)
        negate = attribute.startswith("!")
        name = (attribute[1:] if negate else attribute).lower()
        if name == "all":
            # readconf.c lets 'all' follow one other criterion (it then changes nothing).
            if attributes > 1 or words:
                raise ConfigError(f"{where}: Match 'all' cannot be combined with other criteria")
            return result and not negate
        attributes += 1
        if name in ("canonical", "final"):
            state.want_final_pass = state.want_final_pass or name == "final"
            if state.final_pass == negate:
                result = False
            continue
        if not words or not words[0]:
            raise ConfigError(f"{where}: Match {attribute} needs an argument")
        argument = words.pop(0)
        if name == "exec":
            if not result:
                continue  # ssh does not run the command once an earlier criterion failed
            raise UnresolvableError(
                f"{where}: 'Match exec' runs a command, which the built-in SSH config parser never does",
                hint="install the OpenSSH client (ssh) so that `ssh -G` resolves this host exactly",
            )
        if criterion(state, name, argument, where) == negate:
            result = False
    return result


def criterion(state: Evaluation, name: str, argument: str, where: str) -> bool:
    if name == "host":
        return match_pattern_list(hostname_so_far(state), argument, lower=True)
    if name == "originalhost":
        return match_pattern_list(state.original_host, argument, lower=True)
    if name == "user":
        return match_pattern_list(str(state.values.get("user", (local_account().pw_name, ""))[0]), argument)
    if name == "localuser":
        return match_pattern_list(local_account().pw_name, argument)
    raise ConfigError(f"{where}: unsupported Match criterion {name!r}")


def hostname_so_far(state: Evaluation) -> str:
    """What ``Match host`` sees: the HostName so far (``%h`` expanded), else the host."""
    if "hostname" not in state.values:
        return state.host
    value = str(state.values["hostname"][0])
    return value if state.final_pass else expand_hostname(value, state.host)


def expand_hostname(value: str, host: str) -> str:
    """HostName knows ``%h`` and ``%%`` only; any other token is an error, as in ssh."""

    def one(match: re.Match[str]) -> str:
        if match[1] == "h":
            return host
        if match[1] == "%":
            return "%"
        shown = f"%{match[1]}" if match[1] else "a trailing %"
        raise ConfigError(f"HostName {value!r}: unknown token {shown} (HostName knows only %h and %%)")

    return re.sub(r"%(.?)", one, value, flags=re.DOTALL)


def parse_time(text: str, where: str) -> float:
    """OpenSSH's ``convtime``: ``90``, ``1m30s``, ``2h``; more than INT_MAX seconds is invalid."""
    seconds = convtime(text)
    if seconds is None:
        raise ConfigError(f"{where}: invalid time value {text!r}")
    return float(seconds)


def jump_value(args: Sequence[str], where: str) -> str:
    """A ProxyJump value as OpenSSH 9.2 (Debian) reads it: its first word (later words are
    ignored); ``none`` in any case; otherwise every comma-separated hop must be
    ``[user@]host[:port]`` or an ``ssh://`` URI without a path."""
    text = args[0] if args else ""
    if not text:
        raise ConfigError(f"{where}: ProxyJump needs a value")
    if text.lower() == "none":
        return "none"
    for hop in text.split(","):
        try:
            parse_jump(hop)
        except ConfigError:
            raise ConfigError(f"{where}: Invalid ProxyJump {text!r}") from None
    return text


def apply_keyword(state: Evaluation, line: Line, active: bool) -> None:
    """One directive: values are checked even where they do not apply (as ssh does); the
    first value obtained wins, IdentityFile accumulates."""
    keyword, args, where = line.keyword, line.args, line.where
    keyword = KEYWORD_ALIASES.get(keyword, keyword)
    if keyword not in KNOWN_KEYWORDS:
        ignored = str(state.values.get("ignoreunknown", ("", ""))[0])
        if ignored and match_pattern_list(keyword, ignored, lower=True):
            return
        raise ConfigError(f"{where}: Bad configuration option: {keyword}",
                          hint="remove it, or name it in IgnoreUnknown before it (as ssh requires)")
    check_value(keyword, args, where)
    if keyword == "ignoreunknown":
        if active and args:
            state.first(keyword, args[0], where)
        return
    if keyword in SINGLE:
        if not args or not args[0]:
            raise ConfigError(f"{where}: {keyword} needs a value")
        if len(args) > 1:
            raise ConfigError(f"{where}: keyword {keyword} has extra arguments at end of line")
    value = args[0] if args else ""
    parsed: object = value
    if keyword == "port":
        parsed = parse_port(value)
        if parsed <= 0:
            raise ConfigError(f"{where}: bad port {value!r}")
    elif keyword in ("identitiesonly", "checkhostip", "hashknownhosts"):
        if value.lower() not in BOOLEANS:
            raise ConfigError(f"{where}: {keyword} must be yes or no, not {value!r}")
        parsed = BOOLEANS[value.lower()]
    elif keyword == "stricthostkeychecking":
        if value.lower() not in STRICT_VALUES:
            raise ConfigError(f"{where}: bad StrictHostKeyChecking value {value!r}")
        parsed = STRICT_VALUES[value.lower()]
    elif keyword in ("requiredrsasize", "connectionattempts"):
        parsed = int(value)  # an integer: check_value refused anything else
    elif keyword == "connecttimeout":
        parsed = None if value == "none" else parse_time(value, where)
    elif keyword in algorithms.KINDS:
        algorithms.check_spec(algorithms.KINDS[keyword], value, where)
    elif keyword in ("userknownhostsfile", "globalknownhostsfile"):
        if not args:
            raise ConfigError(f"{where}: {keyword} needs a file name")
        if any(not a for a in args):
            raise ConfigError(f"{where}: {keyword} has an empty argument")
        if any(a.lower() == "none" for a in args) and len(args) > 1:
            raise ConfigError(f'{where}: {keyword} "none" must appear alone')
        parsed = ("none",) if args[0].lower() == "none" else tuple(args)
    elif keyword == "proxyjump":
        parsed = jump_value(args, where)  # checked where it does not apply too
    elif keyword in FORWARD_KEYWORDS:
        forward = forward_line(keyword, args, where)  # checked where it does not apply too
        if active:
            state.forward_paths.extend((path, where) for path in forward.paths)
        return
    if not active:
        return
    if keyword == "identityfile":
        if len(state.identity_files) >= MAX_IDENTITY_FILES:
            raise ConfigError(f"{where}: too many identity files (ssh takes at most {MAX_IDENTITY_FILES})")
        if all(value != known for known, _ in state.identity_files):  # ssh drops a repeat (as written)
            state.identity_files.append((value, where))
    elif keyword == "certificatefile":
        if all(value != known for known, _ in state.certificate_files):  # a repeat is dropped, as ssh does
            state.certificate_files.append((value, where))
    elif keyword == "proxyjump":
        state.first("proxy", ("jump", parsed), where)
    elif keyword == "proxycommand":
        state.first("proxy", ("command", line.raw.strip()), where)
    elif keyword == "canonicalizehostname":
        state.first(keyword, {"true": "yes", "false": "no"}.get(value.lower(), value.lower()), where)
    elif keyword == "clearallforwardings":
        state.first(keyword, value.lower() in ("yes", "true"), where)
    elif keyword in ("canonicaldomains", "canonicalizepermittedcnames") and args:
        state.first(keyword, tuple(args), where)
    elif keyword == "canonicalizemaxdots" and value.isdigit():
        state.first(keyword, int(value), where)
    elif keyword in ("controlpath", "identityagent") or keyword == "forwardagent" and value.lower() not in BOOLEANS:
        state.first(f"expand:{keyword}", value, where)
    elif keyword == "forwardagent":
        state.first(f"expand:{keyword}", "", where)  # yes/no: nothing to expand, and a later path is not used
    elif keyword == "remotecommand":
        state.first(f"expand:{keyword}", line.raw.lstrip(" \t="), where)
    elif keyword in SINGLE or keyword in ("userknownhostsfile", "globalknownhostsfile"):
        state.first(keyword, parsed, where)


def config_files_for(config_file: str | None) -> list[tuple[str, bool]]:
    """``-F FILE`` alone, else ``~/.ssh/config`` then the system file; (path, is user config)."""
    if config_file is not None:
        return [(config_file, True)]
    return [(tilde_expand("~/.ssh/config"), True), (SYSTEM_CONFIG, False)]


def run_pass(files: list[tuple[str, bool]], state: Evaluation) -> None:
    for path, user_config in files:
        evaluate_file(state, path, user_config=user_config)


def resolve_builtin(destination: str, *, config_file: str | None = None, user: str | None = None,
                    port: int | None = None) -> ResolvedHost:
    """Resolve one destination as ``ssh -G [-F FILE] [-l USER] [-p PORT] DESTINATION`` would."""
    check_command_line(destination, user)
    files = config_files_for(config_file)
    if config_file is not None and not lines_of(config_file) and not _readable(config_file):
        raise ConfigError(f"cannot read SSH config {config_file}")
    state = Evaluation(host=destination, original_host=destination, final_pass=False)
    if user:
        state.first("user", user, "command line")
    if port:
        state.first("port", port, "command line")
    run_pass(files, state)
    canonicalize = str(state.values.get("canonicalizehostname", ("no", ""))[0])
    # Tokens are expanded in a HostName only; the destination itself is taken as it is
    # (``fe80::1%eth0`` holds no token).
    configured = state.values.get("hostname")
    hostname = ssh_hostname(destination if configured is None else expand_hostname(str(configured[0]), destination))
    refuse_dns(state, hostname, canonicalize)
    if state.want_final_pass or canonicalize in ("yes", "always"):
        source = state.values.get("hostname", (None, "destination"))[1]
        state.values["hostname"] = (hostname, source)
        state = Evaluation(host=hostname, original_host=destination, final_pass=True, values=state.values,
                           identity_files=state.identity_files, certificate_files=state.certificate_files,
                           forward_paths=state.forward_paths)
        run_pass(files, state)
    return finish(state, destination)


def refuse_dns(state: Evaluation, hostname: str, canonicalize: str) -> None:
    """ssh canonicalises a name by asking DNS (CanonicalDomains, a name ending in ``.``, or
    CanonicalizePermittedCNAMEs); the built-in parser never does, so it says so instead of
    answering differently."""
    _, proxy = state.values.get("proxy", (("", None), ""))[0]  # type: ignore[misc]  # a pair by construction
    direct = proxy is None or str(proxy).lower() == "none"
    if numeric_address(hostname) is not None:
        return  # an address: no lookup
    domains = tuple(state.values.get("canonicaldomains", ((), ""))[0])  # type: ignore[arg-type]  # a tuple
    max_dots = int(state.values.get("canonicalizemaxdots", (1, ""))[0])  # type: ignore[call-overload]  # an int
    cnames = tuple(state.values.get("canonicalizepermittedcnames", ((), ""))[0])  # type: ignore[arg-type]
    asks = False
    if canonicalize == "always" or canonicalize == "yes" and direct:
        asks = hostname.endswith(".") or bool(domains) and domains[0].lower() != "none" and \
            hostname.count(".") <= max_dots
    if cnames and cnames[0].lower() != "none" and (direct or canonicalize == "always"):
        asks = True
    if asks:
        raise UnresolvableError(
            f"{hostname}: CanonicalizeHostname asks DNS for this name, which the built-in SSH config parser never does",
            hint="install the OpenSSH client (ssh) so that `ssh -G` resolves this host exactly")


def check_expansions(values: dict[str, tuple[object, str]], context: TokenContext,
                     forward_paths: Sequence[tuple[str, str]] = ()) -> None:
    """ssh expands ControlPath, IdentityAgent, ForwardAgent's path, RemoteCommand and the
    socket paths of the forwards that apply (unless ClearAllForwardings drops them) before
    ``ssh -G`` prints anything: a token or variable it cannot expand fails the whole command."""
    if not values.get("clearallforwardings", (False, ""))[0]:
        for path, where in forward_paths:
            _check_percent_only(path, context, where)
    for keyword in ("controlpath", "identityagent", "forwardagent", "remotecommand"):
        value, where = values.get(f"expand:{keyword}", ("", ""))
        if not value or keyword != "remotecommand" and str(value).lower() == "none":
            continue
        if keyword == "remotecommand":  # % tokens only: a ${ stays as written
            _check_percent_only(str(value), context, where)
        else:
            expand_path(str(value), context, where)


def _check_percent_only(text: str, context: TokenContext, where: str) -> None:
    tokens = context.table()
    for found in re.finditer(r"%(.?)", text.replace("%%", ""), flags=re.DOTALL):
        if found[1] not in tokens:
            raise ConfigError(f"{where}: unknown token %{found[1]} in {text!r}")


def numeric_address(name: str) -> str | None:
    """An IP address in the numeric form ssh's getnameinfo gives it; None for a name."""
    try:
        info = socket.getaddrinfo(name, None, flags=socket.AI_NUMERICHOST)
        return socket.getnameinfo(info[0][4], socket.NI_NUMERICHOST)[0]
    except (OSError, UnicodeError, ValueError):
        return None


def ssh_hostname(name: str) -> str:
    """The host name as ssh ends with it: an IP address in its numeric form (``127.1`` is
    ``127.0.0.1``; the case of an IPv6 address kept when only case differs), else lower case
    (but for a name with ``%`` or ``:``)."""
    numeric = numeric_address(name)
    if numeric is None:
        # ssh.c's is_addr_fast: a name with a '%' or ':' (``gpu1:2222``) counts as an address
        # and keeps its case, even when it is none.
        return name if "%" in name or ":" in name else name.lower()
    return name if numeric.lower() == name.lower() else numeric


#: What ssh refuses in a host name and a user given on its command line (ssh.c's valid_hostname
#: and valid_ruser; Debian's OpenSSH 9.2 also refuses a comma in the host).
BAD_HOST_CHARS = frozenset("'`\"$\\;&<>|(){},")
BAD_USER_CHARS = frozenset("'`\";&<>|(){}")


def check_command_line(destination: str, user: str | None) -> None:
    if destination.startswith("-") or any(c in BAD_HOST_CHARS or c.isspace() or not c.isprintable()
                                          for c in destination):
        raise ConfigError(f"{destination!r}: hostname contains invalid characters")
    if user is not None and (user.startswith("-") or user.endswith("\\") or any(c in BAD_USER_CHARS for c in user)
                             or re.search(r"\s-", user)):
        raise ConfigError(f"{user!r}: remote username contains invalid characters")


def _readable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.R_OK)


def key_type_list(kind: algorithms.Kind, value: str | None, sources: Mapping[str, str]) -> tuple[str, ...] | None:
    """``HostKeyAlgorithms`` or ``PubkeyAcceptedAlgorithms`` assembled; where it leaves no key
    type (a ``!`` pattern, a short name such as ``RSA``, no name), ``ssh -G`` stops
    ("expand HostKeyAlgorithms: invalid argument", and likewise for the other)."""
    assembled = algorithms.assemble(kind, value)
    if value and assembled is None:
        raise ConfigError(f"{sources.get(kind.keyword.lower(), 'ssh config')}: {kind.keyword} {value!r} leaves "
                          f"no key type (ssh -G: {algorithms.EMPTY_LIST_ERRORS[kind]})",
                          hint=f"name key types without '!' (ssh -Q {kind.keyword} lists them)")
    return assembled


def finish(state: Evaluation, destination: str) -> ResolvedHost:
    """Defaults and expansions, after every file was read (so a later HostName counts for ``%h``)."""
    values = state.values
    sources: dict[str, str] = {}

    def get(key: str, default: object) -> object:
        value, where = values.get(key, (default, "default"))
        sources[key] = where
        return value

    if "hostname" in values:  # tokens are expanded in a HostName only, never in the destination
        hostname = ssh_hostname(expand_hostname(str(get("hostname", destination)), destination))
    else:
        hostname, sources["hostname"] = ssh_hostname(destination), "destination"
    port = int(get("port", 22))  # type: ignore[call-overload]  # an int by construction
    user = str(get("user", local_account().pw_name))
    kind, proxy = get("proxy", ("", None))  # type: ignore[misc]  # a pair by construction
    jump = proxy if kind == "jump" and proxy != "none" else None
    alias = get("hostkeyalias", None)
    alias = str(alias).lower() if alias else None  # ssh lowercases it
    context = TokenContext(hostname, port, user, destination, str(alias) if alias else None)
    identity_raw = state.identity_files or [(f, "default") for f in DEFAULT_IDENTITY_FILES]
    identity = expand_identity_files(identity_raw, context)
    sources["identity_files"] = ", ".join(dict.fromkeys(where for _, where in identity_raw))
    user_known = tuple(
        f if f == "none" else expand_path(f, context, sources.get("userknownhostsfile", ""))
        for f in get("userknownhostsfile", DEFAULT_USER_KNOWN_HOSTS)  # type: ignore[attr-defined]  # a tuple
    )
    # ssh expands neither ~ nor tokens in GlobalKnownHostsFile (``ssh -G`` prints it as written).
    global_known = tuple(get("globalknownhostsfile", DEFAULT_GLOBAL_KNOWN_HOSTS))  # type: ignore[call-overload]  # a tuple
    timeout = get("connecttimeout", None)
    attempts = int(get("connectionattempts", 1))  # type: ignore[call-overload]  # an int by construction
    if attempts < 1:
        raise ConfigError(f"{sources['connectionattempts']}: Invalid number of ConnectionAttempts")  # (ssh.c's words)
    check_expansions(values, context, state.forward_paths)
    agent, agent_where = values.get("expand:identityagent", (None, ""))
    if agent is not None and agent != "none":
        agent = expand_path(str(agent), context, agent_where)  # as ssh -G prints it
    if jump:
        last = parse_jump(jump.rsplit(",", 1)[-1])  # ssh refuses a last hop that is the destination itself
        if last.host == hostname and (last.port or 22) == port and (last.user or user) == user:
            raise ConfigError(f"{sources.get('proxy', destination)}: ProxyJump loop: {destination} jumps through itself")
    return ResolvedHost(
        host=destination, hostname=hostname, port=port, user=user,
        identity_files=identity, identities_only=bool(get("identitiesonly", False)),
        certificate_files=expand_identity_files(state.certificate_files, context),
        proxy_jump=tuple(jump.split(",")) if jump else None,
        proxy_command=str(proxy) if kind == "command" and proxy != "none" else None,
        user_known_hosts_files=user_known, global_known_hosts_files=global_known,
        strict_host_key_checking=str(get("stricthostkeychecking", "ask")),
        host_key_alias=str(alias) if alias else None, check_host_ip=bool(get("checkhostip", False)),
        identity_agent=str(agent) if agent is not None else None,
        hash_known_hosts=bool(get("hashknownhosts", False)),
        revoked_host_keys=str(get("revokedhostkeys", "")) or None,
        required_rsa_size=int(get("requiredrsasize", 1024)),  # type: ignore[call-overload]  # an int by construction
        bind_address=str(get("bindaddress", "")) or None,
        bind_interface=str(get("bindinterface", "")) or None,
        connect_timeout=float(timeout) if timeout is not None else None,  # type: ignore[arg-type]  # float or None
        connection_attempts=attempts,
        ciphers=algorithms.assemble(algorithms.CIPHERS, get("ciphers", None)),  # type: ignore[arg-type]  # a str or None
        kex_algorithms=algorithms.assemble(algorithms.KEX, get("kexalgorithms", None)),  # type: ignore[arg-type]
        macs=algorithms.assemble(algorithms.MACS, get("macs", None)),  # type: ignore[arg-type]
        host_key_algorithms=key_type_list(algorithms.HOST_KEYS, get("hostkeyalgorithms", None), sources),  # type: ignore[arg-type]
        pubkey_algorithms=key_type_list(algorithms.PUBKEY, get("pubkeyacceptedalgorithms", None), sources),  # type: ignore[arg-type]
        ca_signature_algorithms=key_type_list(algorithms.CA_SIGNATURES, get("casignaturealgorithms", None), sources),  # type: ignore[arg-type]
        resolver=BUILTIN, sources=sources,
    )
