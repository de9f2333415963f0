"""Differential corpus: both resolvers agree with the real `ssh -G` (OpenSSH 9.2) on where a
destination goes.

Each case is an ssh_config built from a rule of ssh_config(5) (pattern matching, Match
criteria, Include, tokens, first-match-wins, ProxyJump, known-hosts files, ...). The oracle is
`ssh -G` run here on the same file; the values compared are those `envdoctor hosts` prints:
HostName, Port, User, IdentityFile (expanded, existing, in order), ProxyJump hops (each hop
resolved by `ssh -G` too), known-hosts files, StrictHostKeyChecking and ConnectTimeout.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from envdoctor.errors import ConfigError
from envdoctor.report.hosts_plan import PlanEntry, entry_document
from envdoctor.transport.openssh import HostResolver
from envdoctor.transport.ssh_config_resolve import UnresolvableError

SSH = shutil.which("ssh")
ME = getpass.getuser()


@dataclass(frozen=True)
class Case:
    id: str
    config: str
    dest: str
    user: str | None = None
    port: int | None = None
    files: dict[str, str] = field(default_factory=dict)
    #: The built-in parser refuses this case on purpose (it never runs Match exec).
    builtin_refuses: bool = False


# {d} is the case's folder; keys/ holds existing identity files id_a, id_b, id_real, "with space".
CASES = [
    Case("comment-after-host-patterns", "Host prod   # replaces staging\n  HostName 10.0.0.9\n  Port 2201\n", "staging"),
    Case("comment-after-host-patterns-own", "Host prod   # replaces staging\n  HostName 10.0.0.9\n  Port 2201\n", "prod"),
    Case("comma-is-literal-in-host", "Host gpu1,gpu2\n  HostName 10.0.0.2\n", "gpu1"),
    Case("trailing-comment-on-value", "Host a\n  Port 2201 # x\n  User bob #who\n", "a"),
    Case("first-match-wins-order", "Host a\n  User first\nHost *\n  User star\n  Port 2022\n", "a"),
    Case("catch-all-first-wins", "Host *\n  User star\nHost a\n  User mine\n  HostName 10.1.1.1\n", "a"),
    Case("negation-in-one-line-only", "Host * !bastion\n  User everyone\nHost bastion\n  HostName 10.1.1.1\n", "bastion"),
    Case("negation-other-host", "Host * !bastion\n  User everyone\nHost bastion\n  HostName 10.1.1.1\n", "web"),
    Case("question-mark-wildcard", "Host gpu-?\n  Port 2001\nHost *\n  Port 2002\n", "gpu-1"),
    Case("question-mark-one-char-only", "Host gpu-?\n  Port 2001\nHost *\n  Port 2002\n", "gpu-10"),
    Case("star-in-the-middle", "Host web-*-prod\n  User deploy\n", "web-eu-prod"),
    Case("several-patterns", "Host a b c\n  HostName 10.3.3.3\n", "b"),
    Case("equals-syntax", "Host=other\n  HostName = 10.9.9.9\n  Port=2222\n  User =eq\n", "other"),
    Case("keyword-case-insensitive", "HOST a\n  HOSTNAME 10.4.4.4\n  pOrT 2200\n", "a"),
    Case("host-pattern-case-sensitive", "Host FOO\n  Port 99\nHost foo\n  Port 98\n", "foo"),
    Case("hostname-lowercased", "Host a\n  HostName Real.Example.COM\n", "a"),
    Case("hostname-percent-h", "Host web\n  HostName %h.example.com\n", "web"),
    Case("tabs-and-indent", "Host\ta\n\tHostName\t10.5.5.5\n\t\tPort\t2201\n", "a"),
    Case("quoted-identity-file", 'Host a\n  IdentityFile "{d}/keys/with space"\n', "a"),
    Case("match-host-sees-hostname", "Host a\n  HostName %h.example\nMatch host a.example\n  Port 77\n", "a"),
    Case("match-host-comma-list", "Match host x,a,y\n  Port 71\n", "a"),
    Case("match-negated-host", "Match !host a\n  Port 72\n", "b"),
    Case("match-originalhost", "Host web\n  HostName 10.6.6.6\nMatch originalhost web\n  User orig\n", "web"),
    Case("match-user", "Host a\n  User deploy\nMatch user deploy\n  Port 2200\n", "a"),
    Case("match-user-from-command-line", "Match user ops\n  Port 2300\n", "a", user="ops"),
    Case("match-localuser", f"Match localuser {ME}\n  Port 2400\n", "a"),
    Case("match-localuser-other", "Match localuser nobody-at-all\n  Port 2401\n", "a"),
    Case("match-all", "Host a\n  User mine\nMatch all\n  User everyone\n  Port 2500\n", "a"),
    Case("match-canonical-without-canonicalisation", "Match canonical\n  Port 2600\n", "a"),
    Case("match-final-second-pass", "Host a\n  HostName real\nMatch final host real\n  Port 78\nHost real\n  User finaluser\n", "a"),
    Case("match-exec-true", 'Match exec "true"\n  Port 2700\n', "a", builtin_refuses=True),
    Case("match-exec-with-equals-and-token", 'Match exec "test %h = a"\n  Port 2701\n', "a", builtin_refuses=True),
    Case("match-exec-skipped-after-failed-criterion", 'Match host zzz exec "true"\n  Port 2702\n', "a"),
    Case("include-in-place-order", "Host a\n  Include {d}/inc/port.conf\n  Port 7\n", "a",
         files={"inc/port.conf": "Port 8\n"}),
    Case("include-glob-sorted", "Include {d}/inc/*.conf\nHost *\n  User late\n", "a",
         files={"inc/2.conf": "Host a\n  User second\n", "inc/1.conf": "Host a\n  User first\n  Port 2801\n"}),
    Case("include-inside-inactive-block", "Host other\n  Include {d}/inc/x.conf\nHost *\n  Port 2900\n", "a",
         files={"inc/x.conf": "Host a\n  Port 2901\n"}),
    Case("include-hosts-defined-inside", "Include {d}/inc/hosts.conf\n", "gpu",
         files={"inc/hosts.conf": "Host gpu\n  HostName 10.7.7.7\n  User trainer\n"}),
    Case("identity-percent-h-after-include-hostname",
         "Host a\n  IdentityFile {d}/keys/id_%h\nInclude {d}/inc/h.conf\n", "a",
         files={"inc/h.conf": "Host a\n  HostName real\n"}),
    Case("identity-missing-skipped", "Host a\n  IdentityFile {d}/keys/id_old\n  IdentityFile {d}/keys/id_a\n", "a"),
    Case("identity-accumulates-in-order",
         "Host a\n  IdentityFile {d}/keys/id_b\nHost *\n  IdentityFile {d}/keys/id_a\n", "a"),
    Case("identity-tokens", "Host a\n  User bob\n  IdentityFile {d}/keys/id_%r_%p_%n\n  Port 2022\n", "a",
         files={"keys/id_bob_2022_a": "key"}),
    Case("identity-dollar-env", "Host a\n  IdentityFile ${ENVDOCTOR_CORPUS_DIR}/keys/id_a\n", "a"),
    Case("identity-local-user-token", "Host a\n  IdentityFile {d}/keys/id_%u\n", "a", files={f"keys/id_{ME}": "key"}),
    Case("known-hosts-tokens", "Host a\n  HostName 10.0.0.9\n  Port 2201\n  UserKnownHostsFile ~/.ssh/kh/%h_%p ${HOME}/k2 %d/k3\n", "a"),
    Case("known-hosts-alias-token", "Host a\n  HostKeyAlias myalias\n  UserKnownHostsFile {d}/kh/%k %n %%h\n", "a"),
    Case("known-hosts-every-token",
         "Host a\n  HostName H.Example\n  User u\n  UserKnownHostsFile {d}/%C {d}/%i_%l_%L_%k_%n_%p_%h_%r_%u_%% %d/x\n", "a"),
    Case("error-token-unknown-to-9.2", "Host a\n  UserKnownHostsFile {d}/%j\n", "a"),
    Case("known-hosts-none", "Host a\n  UserKnownHostsFile none\n", "a"),
    Case("known-hosts-global", "Host a\n  GlobalKnownHostsFile {d}/global_kh\n", "a"),
    Case("strict-yes", "Host a\n  StrictHostKeyChecking yes\n", "a"),
    Case("strict-no", "Host a\n  StrictHostKeyChecking no\n", "a"),
    Case("strict-accept-new", "Host a\n  StrictHostKeyChecking accept-new\n", "a"),
    Case("strict-off", "Host a\n  StrictHostKeyChecking off\n", "a"),
    Case("strict-default-ask", "Host a\n  Port 22\n", "a"),
    Case("connect-timeout-seconds", "Host a\n  ConnectTimeout 5\n", "a"),
    Case("connect-timeout-units", "Host a\n  ConnectTimeout 1m30s\n", "a"),
    Case("proxyjump-alias-resolved",
         "Host target\n  HostName 10.8.8.8\n  ProxyJump bastion\nHost bastion\n  HostName 10.0.0.1\n  User jumper\n  Port 2022\n",
         "target"),
    Case("proxyjump-uri", "Host a\n  ProxyJump ssh://bob@jump:2222\n", "a"),
    Case("proxyjump-user-host-port", "Host a\n  ProxyJump alice@10.2.2.2:2200\n", "a"),
    Case("proxyjump-two-hops-first-hop-chain",
         "Host a\n  ProxyJump j1,j2\nHost j1\n  ProxyJump j0\n  HostName 10.0.1.1\nHost j2\n  ProxyJump ignored\n"
         "  HostName 10.0.1.2\nHost j0\n  User zero\n", "a"),
    Case("proxyjump-none-first", "Host a\n  ProxyJump none\nHost *\n  ProxyJump j\n", "a"),
    Case("proxycommand-before-proxyjump", "Host a\n  ProxyCommand nc %h %p\n  ProxyJump j\n", "a"),
    Case("command-line-user-port-win", "Host a\n  User cfg\n  Port 2000\n", "a", user="cli", port=2100),
    Case("user-at-host-destination", "Host a\n  User cfg\n", "a", user="given"),
    Case("real-world-defaults",
         "Host *\n  ServerAliveInterval 30\n  ControlMaster auto\n  ControlPath ~/.ssh/cm-%r@%h:%p\n"
         "  AddKeysToAgent yes\n  ForwardAgent no\n  SendEnv LANG LC_*\n  LocalForward 8080 localhost:80\n"
         "  Protocol 2\n  Compression yes\n", "a"),
    Case("ignore-unknown-before-option", "IgnoreUnknown UseKeychain,AddKeysToAgent\nHost a\n  UseKeychain yes\n  Port 2201\n", "a"),
    Case("error-unknown-option", "Host other\n  UseKeychain yes\n", "a"),
    Case("error-ignore-unknown-after-option", "Host a\n  UseKeychain yes\nIgnoreUnknown UseKeychain\n", "a"),
    Case("error-unbalanced-quote", 'Host bad"\n  Port 1\n', "a"),
    Case("error-bad-port", "Host a\n  Port notaport\n", "a"),
    Case("error-extra-arguments", "Host a\n  Port 2201 2202\n", "a"),
    Case("error-unknown-token", "Host a\n  UserKnownHostsFile ~/kh/%X\n", "a"),
]


def build(case: Case, root: Path) -> Path:
    """The case's files: config, included files, identity files."""
    (root / "keys").mkdir(parents=True)
    for name in ("id_a", "id_b", "id_real", "with space"):
        (root / "keys" / name).write_text("key")
    for name, text in case.files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{d}", str(root)))
    config = root / "ssh_config"
    config.write_text(case.config.replace("{d}", str(root)))
    return config


def ssh_g(config: Path, dest: str, user: str | None = None, port: int | None = None) -> dict[str, list[str]] | None:
    """The oracle: `ssh -G` output as key -> values; None when ssh refuses the config."""
    argv = [SSH, "-G", "-F", str(config)] + (["-l", user] if user else []) + (["-p", str(port)] if port else [])
    proc = subprocess.run([*argv, dest], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)
    if proc.returncode != 0:
        return None
    values: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition(" ")
        values.setdefault(key, []).append(value)
    return values


def expand_identity(path: str, out: dict[str, list[str]], dest: str) -> str:
    """The tokens this corpus uses in IdentityFile (ssh -G prints them unexpanded)."""
    for token, value in (("%h", out["hostname"][0]), ("%p", out["port"][0]), ("%r", out["user"][0]),
                         ("%n", dest), ("%u", ME), ("${ENVDOCTOR_CORPUS_DIR}", os.environ["ENVDOCTOR_CORPUS_DIR"])):
        path = path.replace(token, value)
    return os.path.expanduser(path) if path.startswith("~/") else path


def oracle_hops(config: Path, jump: str | None, depth: int = 0) -> list[dict[str, object]]:
    """ProxyJump hops as ssh builds them: `ssh -J first... -W last`, so the first hop's own
    ProxyJump comes before it and the later hops' own ProxyJump is overridden."""
    if not jump or jump == "none" or depth > 5:
        return []
    hops = []
    for index, hop in enumerate(jump.split(",")):
        text = hop[len("ssh://"):] if hop.startswith("ssh://") else hop
        user, _, hostport = text.rpartition("@")
        if hostport.startswith("["):  # ssh -G prints a hop with a port as user@[host]:port
            host, _, port = hostport[1:].partition("]")
            port = port.lstrip(":")
        else:
            host, _, port = hostport.partition(":")
        out = ssh_g(config, host, user or None, int(port) if port else None)
        assert out is not None
        if index == 0:
            hops += oracle_hops(config, out.get("proxyjump", [None])[0], depth + 1)
        hops.append({"hostname": out["hostname"][0], "port": int(out["port"][0]), "user": out["user"][0]})
    return hops


def oracle(case: Case, config: Path) -> dict[str, object] | None:
    out = ssh_g(config, case.dest, case.user, case.port)
    if out is None:
        return None
    identities = [expand_identity(p, out, case.dest) for p in out.get("identityfile", [])]
    timeout = out["connecttimeout"][0]
    known = out.get("userknownhostsfile", [""])[0].split() + out.get("globalknownhostsfile", [""])[0].split()
    return {
        "host": case.dest,
        "hostname": out["hostname"][0],
        "port": int(out["port"][0]),
        "user": out["user"][0],
        "identity_files": [p for p in identities if p != "none" and os.path.isfile(p)],
        "proxy_jump": oracle_hops(config, out.get("proxyjump", [None])[0]) or None,
        "known_hosts_files": [f for f in known if f != "none"],
        "strict_host_key_checking": out["stricthostkeychecking"][0],
        "connect_timeout": None if timeout == "none" else float(timeout),
    }


def resolve(config: Path, case: Case, ssh: str | None) -> dict[str, object]:
    resolver = HostResolver(str(config), ssh=ssh)
    plan = asyncio.run(resolver.plan(case.dest, case.user, case.port))
    return entry_document(PlanEntry(case.dest, plan))


@pytest.fixture(autouse=True)
def corpus_env(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVDOCTOR_CORPUS_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))  # every answer from ssh -G itself


@pytest.mark.skipif(SSH is None, reason="the OpenSSH client (the oracle) is not installed")
@pytest.mark.parametrize("resolver", ["ssh -G", "built-in"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_resolver_agrees_with_ssh_g(case: Case, resolver: str, tmp_path: Path) -> None:
    """Each resolver reaches the host, port, user, keys, jump hops, known-hosts files, host-key
    policy and timeout `ssh -G` reaches; where `ssh -G` refuses the config, so does the resolver."""
    config = build(case, tmp_path)
    expected = oracle(case, config)
    use_ssh = SSH if resolver == "ssh -G" else None
    if expected is None:
        with pytest.raises(ConfigError):
            resolve(config, case, use_ssh)
        return
    if case.builtin_refuses and use_ssh is None:
        with pytest.raises(UnresolvableError, match="Match exec"):
            resolve(config, case, use_ssh)
        return
    assert resolve(config, case, use_ssh) == expected


def test_corpus_covers_the_rules():
    """The corpus is large enough to mean something and exercises each keyword envdoctor uses."""
    text = "\n".join(c.config + "".join(c.files.values()) for c in CASES).lower()
    assert len(CASES) >= 40
    for keyword in ("hostname", "port", "user", "identityfile", "proxyjump", "userknownhostsfile",
                    "globalknownhostsfile", "stricthostkeychecking", "hostkeyalias", "connecttimeout",
                    "include", "match exec", "match originalhost", "match localuser", "match final"):
        assert keyword in text, keyword


def test_cli_says_which_resolver_and_falls_back_without_ssh(run_cli, tmp_path: Path) -> None:
    """`-v` names the resolver; without `ssh` on PATH the built-in parser gives the same plan and
    refuses (exit 2, one line) a destination that needs `Match exec`."""
    case = next(c for c in CASES if c.id == "proxyjump-two-hops-first-hop-chain")
    config = build(case, tmp_path / "case")
    (tmp_path / "case" / "ssh_config").write_text(config.read_text() + 'Match originalhost needs-exec exec "true"\n  Port 1\n')
    with_ssh = run_cli("-v", "hosts", "a", "--ssh-config", str(config), "--format", "json")
    assert with_ssh.exit_status == 0, with_ssh.stderr
    assert "ssh -G" in with_ssh.stderr
    empty = tmp_path / "no-ssh-here"
    empty.mkdir()
    without = run_cli("-v", "hosts", "a", "needs-exec", "--ssh-config", str(config), "--format", "json",
                      env={"PATH": str(empty)})
    assert "built-in parser" in without.stderr
    assert without.exit_status == 2
    plans = {h["host"]: h for h in json.loads(without.stdout)["hosts"]}
    assert plans["a"] == json.loads(with_ssh.stdout)["hosts"][0]
    assert "Match exec" in plans["needs-exec"]["error"]


@pytest.mark.skipif(SSH is None, reason="the OpenSSH client (the oracle) is not installed")
def test_builtin_keyword_table_is_ssh_s(tmp_path: Path) -> None:
    """Every keyword the built-in parser accepts, ssh accepts too; ones it refuses, ssh refuses."""
    from envdoctor.transport.ssh_config_resolve import KNOWN_KEYWORDS

    config = tmp_path / "config"
    words = sorted(KNOWN_KEYWORDS - {"host", "match", "include"})
    config.write_text("Host zz\n" + "".join(f"  {word} x\n" for word in words))
    proc = subprocess.run([SSH, "-G", "-F", str(config), "a"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert "Bad configuration option" not in proc.stderr, proc.stderr
    config.write_text("Host zz\n  usekeychain yes\n  channeltimeout x\n")
    proc = subprocess.run([SSH, "-G", "-F", str(config), "a"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.stderr.count("Bad configuration option") == 2
    assert not {"usekeychain", "channeltimeout"} & KNOWN_KEYWORDS


AGENT_LINES = ["none", "SSH_AUTH_SOCK", "$SSH_AUTH_SOCK", "~/agent-%h-%p.sock", "${ENVDOCTOR_CORPUS_DIR}/a.sock",
               "/run/agent %r.sock", None]


@pytest.mark.skipif(SSH is None, reason="the OpenSSH client (the oracle) is not installed")
@pytest.mark.parametrize("resolver", ["ssh -G", "built-in"])
@pytest.mark.parametrize("line", AGENT_LINES)
def test_identity_agent_is_what_ssh_g_prints(line: str | None, resolver: str, tmp_path: Path) -> None:
    """IdentityAgent as `ssh -G` prints it (tokens, ~ and ${VAR} expanded; none, SSH_AUTH_SOCK
    and $VAR as written; nothing when unset), from either resolver: it picks the agent socket."""
    config = tmp_path / "config"
    config.write_text("Host a\n  HostName 10.0.0.5\n  Port 2200\n  User u\n"
                      + (f"  IdentityAgent \"{line}\"\n" if line else ""))
    expected = (ssh_g(config, "a") or {}).get("identityagent", [None])[0]
    plan = asyncio.run(HostResolver(str(config), ssh=SSH if resolver == "ssh -G" else None).plan("a", None, None))
    assert plan.target.identity_agent == expected


@pytest.mark.skipif(SSH is None, reason="the OpenSSH client (the oracle) is not installed")
@pytest.mark.parametrize("resolver", ["ssh -G", "built-in"])
def test_certificate_files_are_those_ssh_g_lists(resolver: str, tmp_path: Path) -> None:
    """CertificateFile lines, in order, repeats dropped, across blocks (they accumulate as
    IdentityFile does), expanded as the IdentityFile tokens are."""
    config = tmp_path / "config"
    config.write_text("Host a\n  HostName 10.0.0.5\n  User u\n  CertificateFile ~/c-%h-%r.pub\n"
                      "  CertificateFile ${ENVDOCTOR_CORPUS_DIR}/x.pub\nHost *\n  CertificateFile ~/c-%h-%r.pub\n"
                      "  CertificateFile /abs/%n.pub\n")
    out = ssh_g(config, "a")
    assert out is not None
    expected = tuple(expand_identity(p, out, "a") for p in out["certificatefile"])
    plan = asyncio.run(HostResolver(str(config), ssh=SSH if resolver == "ssh -G" else None).plan("a", None, None))
    assert plan.target.certificate_files == expected
    assert len(expected) == 3


@pytest.mark.skipif(SSH is None, reason="the OpenSSH client (the oracle) is not installed")
@pytest.mark.parametrize("resolver", ["ssh -G", "built-in"])
@pytest.mark.parametrize("text", ["", "Host a\n  HashKnownHosts yes\n", "Host *\n  HashKnownHosts no\nHost a\n  HashKnownHosts yes\n",
                                  "Match host a\n  HashKnownHosts true\n"])
def test_hash_known_hosts_is_what_ssh_g_says(text: str, resolver: str, tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(text + "Host a\n  HostName 10.0.0.5\n")
    expected = (ssh_g(config, "a") or {})["hashknownhosts"][0] == "yes"
    plan = asyncio.run(HostResolver(str(config), ssh=SSH if resolver == "ssh -G" else None).plan("a", None, None))
    assert plan.target.hash_known_hosts is expected


@pytest.mark.skipif(SSH is None, reason="the OpenSSH client (the oracle) is not installed")
@pytest.mark.parametrize("resolver", ["ssh -G", "built-in"])
@pytest.mark.parametrize("value", [None, "+ssh-rsa", "-rsa-sha2-*", "^ssh-rsa", "ssh-ed25519", "bogus", "RSA", "!ssh-rsa"])
def test_ca_signature_algorithms_are_what_ssh_g_assembles(value: str | None, resolver: str, tmp_path: Path) -> None:
    """CASignatureAlgorithms from either resolver is the list `ssh -G` prints (None: OpenSSH's
    defaults); a value ssh -G refuses is a config error."""
    from envdoctor.transport import algorithms

    config = tmp_path / "config"
    config.write_text("Host a\n  HostName 10.0.0.5\n" + (f"  CASignatureAlgorithms {value}\n" if value else ""))
    out = ssh_g(config, "a")
    planned = HostResolver(str(config), ssh=SSH if resolver == "ssh -G" else None).plan("a", None, None)
    if out is None or "casignaturealgorithms" not in out:  # refused, or (RSA, !ssh-rsa) warned of, and no list
        with pytest.raises(ConfigError):
            asyncio.run(planned)
        return
    got = asyncio.run(planned).target.ca_signature_algorithms or algorithms.CA_SIGNATURES.defaults
    assert ",".join(got) == out["casignaturealgorithms"][0]


@pytest.mark.skipif(SSH is None, reason="the OpenSSH client (the oracle) is not installed")
@pytest.mark.parametrize("resolver", ["ssh -G", "built-in"])
@pytest.mark.parametrize("value", [None, "/etc/ssh/revoked_keys", "~/krl-%h", "${HOME}/krl", "relative/krl"])
def test_revoked_host_keys_file_is_what_ssh_g_prints(value: str | None, resolver: str, tmp_path: Path) -> None:
    """RevokedHostKeys as written: OpenSSH 9.2 expands neither ~, tokens nor variables in it."""
    config = tmp_path / "config"
    config.write_text("Host a\n  HostName 10.0.0.5\n" + (f"  RevokedHostKeys {value}\n" if value else ""))
    expected = (ssh_g(config, "a") or {}).get("revokedhostkeys", [None])[0]
    plan = asyncio.run(HostResolver(str(config), ssh=SSH if resolver == "ssh -G" else None).plan("a", None, None))
    assert plan.target.revoked_host_keys == expected


@pytest.mark.skipif(SSH is None, reason="the OpenSSH client (the oracle) is not installed")
@pytest.mark.parametrize("resolver", ["ssh -G", "built-in"])
@pytest.mark.parametrize("value", [None, "2048", "4096", "512"])
def test_required_rsa_size_is_what_ssh_g_prints(value: str | None, resolver: str, tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host a\n  HostName 10.0.0.5\n" + (f"  RequiredRSASize {value}\n" if value else ""))
    expected = int((ssh_g(config, "a") or {})["requiredrsasize"][0])
    plan = asyncio.run(HostResolver(str(config), ssh=SSH if resolver == "ssh -G" else None).plan("a", None, None))
    assert plan.target.required_rsa_size == expected


@pytest.mark.skipif(SSH is None, reason="the OpenSSH client (the oracle) is not installed")
@pytest.mark.parametrize("resolver", ["ssh -G", "built-in"])
@pytest.mark.parametrize("lines", ["", "  BindAddress 127.0.0.2\n", "  BindInterface lo\n  BindAddress 10.1.1.1\n"])
def test_bind_settings_are_what_ssh_g_prints(lines: str, resolver: str, tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host a\n  HostName 10.0.0.5\n" + lines)
    out = ssh_g(config, "a") or {}
    plan = asyncio.run(HostResolver(str(config), ssh=SSH if resolver == "ssh -G" else None).plan("a", None, None))
    assert (plan.target.bind_address, plan.target.bind_interface) == (
        out.get("bindaddress", [None])[0], out.get("bindinterface", [None])[0])
