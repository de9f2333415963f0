"""A larger adversarial corpus: `envdoctor hosts --format json`, run as a user runs it, agrees
with the real `ssh -G` (OpenSSH 9.2) on every field it prints, with `ssh` on PATH and with the
built-in parser forced (no `ssh` on PATH).

Each case is one ssh_config (plus included and identity files) and the destinations typed
against it, built from a rule of ssh_config(5) / readconf.c: lexing (comments, quotes, `=`,
CRLF, tabs, case), Host and Match evaluation, Include, tokens and `${ENV}`, ProxyJump and
ProxyCommand, IdentityFile, known-hosts files, StrictHostKeyChecking, ConnectTimeout, Port,
CanonicalizeHostname (offline cases only) and the errors ssh refuses. The oracle is `ssh -G -F
FILE DEST` on the same files; where it fails, envdoctor must give that destination a one-line
`error` and exit 2. Nothing here resolves a name over the network.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import Launch

SSH = shutil.which("ssh")
ME = getpass.getuser()
HOME = pwd.getpwuid(os.getuid()).pw_dir


@dataclass(frozen=True)
class Case:
    id: str
    config: str
    dests: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)
    #: Destinations the built-in parser refuses on purpose (it never runs Match exec).
    builtin_refuses: tuple[str, ...] = ()
    #: Files (relative to the case folder) made group-writable.
    group_writable: tuple[str, ...] = ()
    #: A value ssh checks that the built-in parser does not (cipher names, forwarding specs...):
    #: a known gap, expected to fail with the built-in parser.
    builtin_gap: str = ""


def C(id: str, config: str, *dests: str, **kw) -> Case:  # a short constructor for the table
    return Case(id, config, dests or ("a",), **kw)


# {d} is the case's folder (also $HOME for the run); keys/ holds id_a, id_b, "with space".
CASES = [
    # --- lexing -------------------------------------------------------------------------
    C("crlf-line-endings", "Host a\r\n  HostName 10.0.0.1\r\n  Port 2201\r\n  User crlf\r\n"),
    C("tabs-form-feed-blank", "\n\t\n# c\n   # indented comment\nHost\ta\t\n\tPort\t2202\f\n\t\tUser\tt\n"),
    C("equals-forms", "Host=a\nPort=2203\nUser = eq\nHostName =10.0.0.3\nHost b\nPort= 2204\n", "a", "b"),
    C("double-equals-is-bad-port", "Host a\n  Port==2205\n"),
    C("keyword-uppercase", "HOST a\nHOSTNAME 10.0.0.4\nPORT 2206\nUSER Upper\n"),
    C("quoted-values", 'Host "a"\n  HostName "10.0.0.5"\n  User \'bob\'\n  Port "2207"\n'),
    C("quoted-word-with-space-in-host", 'Host "a b" c\n  Port 2208\n', "a", "c"),
    C("escaped-space-in-identity", "Host a\n  IdentityFile {d}/keys/with\\ space\n"),
    C("trailing-comments", "Host a # comment\n  Port 2209 # the port\n  User u # who\n  HostName 10.0.0.9 #h\n"),
    C("hash-inside-word-is-not-comment", "Host a\n  User u#x\n"),
    C("hash-glued-to-port-is-bad", "Host a\n  Port 2210#x\n"),
    C("keyword-without-argument", "Host a\n  Port\n"),
    C("keyword-with-only-comment", "Host a\n  User # nobody\n"),
    C("empty-quoted-host-pattern", 'Host ""\n  Port 1\n'),
    C("unbalanced-quote-elsewhere", 'Host other\n  User "x\nHost a\n  Port 2211\n'),
    C("extra-arguments-user", "Host a\n  User one two\n"),
    C("extra-arguments-hostname", "Host a\n  HostName h1 h2\n"),
    C("extra-arguments-other-keyword", "Host a\n  ServerAliveInterval 10 20\n"),
    C("utf8-comment-and-value", "# café\nHost a\n  User ünïcode\n"),
    # --- Host patterns ------------------------------------------------------------------
    C("first-match-wins-across-blocks", "Host a\n  Port 2212\nHost a\n  Port 2213\n  User second\n"),
    C("global-section-before-host", "Port 2214\nUser top\nHost a\n  Port 9\n  User later\n", "a", "zz"),
    C("star-then-specific", "Host *\n  User star\nHost a\n  User mine\n  HostName 10.1.1.1\n", "a", "x"),
    C("negation-only-never-matches", "Host !a\n  Port 2215\n", "a", "b"),
    C("negation-with-star", "Host * !a !b\n  Port 2216\n", "a", "b", "c"),
    C("negated-pattern-wildcard", "Host !gpu-* *\n  User nongpu\n", "gpu-1", "cpu-1"),
    C("negation-order-irrelevant", "Host b !b\n  Port 2217\n", "b"),
    C("question-marks", "Host n??e\n  Port 2218\n", "node", "nde", "nodes"),
    C("bracket-is-literal", "Host gpu[1-2]\n  Port 2219\nHost *\n  Port 2220\n", "gpu1", "gpu[1-2]"),
    C("comma-literal-in-host", "Host a,b\n  Port 2221\n", "a", "a,b"),
    C("host-case-sensitive", "Host Web\n  Port 2222\nHost web\n  Port 2223\n", "web", "Web", "WEB"),
    C("pattern-matches-typed-name-not-hostname", "Host a\n  HostName real\nHost real\n  Port 2224\n"),
    C("trailing-dot-name", "Host a.\n  Port 2225\n", "a.", "a"),
    C("star-alone-and-other", "Host * a\n  User both\n"),
    C("ipv4-pattern", "Host 10.0.0.*\n  User tenner\n", "10.0.0.7", "10.0.1.7"),
    # --- destinations -------------------------------------------------------------------
    C("user-at-destination-beats-config", "Host a\n  User cfg\n  Port 2226\n", "given@a", "a"),
    C("uri-destination", "Host a\n  User cfg\n  Port 2227\n", "ssh://u@a:2300", "ssh://a", "ssh://u@a"),
    C("ipv6-destination", "Host ::1\n  User six\n", "::1", "u@::1"),
    C("ipv6-uppercase-kept", "Host *\n  Port 2228\n", "FE80::1"),
    C("ipv4-short-form-normalised", "Host *\n  Port 2229\n", "127.1"),
    C("uppercase-destination-lowercased", "Host *\n  User x\n", "MiXeD.Example"),
    C("at-sign-in-user", "Host x\n  Port 2230\n", "u@v@x"),
    # --- HostName -----------------------------------------------------------------------
    C("hostname-percent-h", "Host *.lan\n  HostName %h.example.org\n", "gpu.lan"),
    C("hostname-percent-percent", "Host a\n  HostName 10.0.0.%%\n"),
    C("hostname-unknown-token-fails", "Host a\n  HostName %p.example\n"),
    C("hostname-uppercase-lowered", "Host a\n  HostName GPU.Example.ORG\n"),
    C("hostname-ipv6", "Host a\n  HostName 0:0::1\n"),
    C("hostname-first-wins", "Host a\n  HostName 10.0.0.10\nHost *\n  HostName 10.0.0.11\n", "a", "b"),
    # --- Match --------------------------------------------------------------------------
    C("match-host-uses-hostname", "Host a\n  HostName 10.2.0.1\nMatch host 10.2.0.*\n  Port 2231\n", "a", "b"),
    C("match-host-before-hostname", "Match host a\n  Port 2232\nHost a\n  HostName other\n"),
    C("match-host-case-insensitive", "Match host WEB\n  Port 2233\n", "web"),
    C("match-host-negated-list", "Match host !a,*\n  Port 2234\n", "a", "b"),
    C("match-originalhost", "Host a\n  HostName 10.3.0.1\nMatch originalhost a\n  User orig\n", "a"),
    C("match-originalhost-negated", "Match !originalhost a\n  User nota\n", "a", "b"),
    C("match-user-cli", "Match user ops\n  Port 2235\n", "ops@a", "dev@a"),
    C("match-user-from-config", "Host a\n  User deploy\nMatch user deploy\n  HostName 10.4.0.1\n", "a"),
    C("match-user-case-sensitive", "Match user Ops\n  Port 2236\n", "ops@a", "Ops@a"),
    C("match-localuser", f"Match localuser {ME}\n  Port 2237\nMatch localuser nobody-xyz\n  User never\n"),
    C("match-all", "Match all\n  User everyone\n"),
    C("match-not-all", "Match !all\n  User nobody\nHost *\n  User somebody\n"),
    C("match-all-combined-is-error", "Match host a all\n  Port 1\n"),
    C("match-all-with-comment", "Match all # everything\n  Port 2238\n"),
    C("match-canonical-no-canon", "Match canonical\n  Port 2239\nMatch !canonical\n  User notcanon\n"),
    C("match-final", "Host a\n  HostName real\nMatch final host real\n  Port 2240\nHost real\n  User finaluser\n"),
    C("match-not-final", "Match !final\n  User firstpass\nMatch final\n  User finalpass\n"),
    C("match-final-reads-hostname", "Host a\n  HostName REAL.lan\nMatch final host real.lan\n  User lowered\n"),
    C("match-final-host-block-sees-hostname", "Host a\n  HostName b\nMatch final\nHost b\n  Port 2241\n"),
    C("match-equals-separator", "Match host=a\n  Port 2242\n"),
    C("match-unknown-criterion", "Match color blue\n  Port 1\n"),
    C("match-missing-argument", "Match host\n  Port 1\n"),
    C("match-exec-true", 'Match exec "true"\n  Port 2243\nHost *\n  User after\n', builtin_refuses=("a",)),
    C("match-exec-false", 'Match exec "false"\n  Port 1\n', builtin_refuses=("a",)),
    C("match-exec-token-equals", 'Match exec "test %h = a"\n  Port 2244\n', "a", "b", builtin_refuses=("a", "b")),
    C("match-exec-skipped", 'Match host zzz exec "exit 1"\n  Port 1\nHost *\n  Port 2245\n'),
    C("match-localuser-wildcard", "Match localuser *\n  User star\n"),
    # --- Include ------------------------------------------------------------------------
    C("include-absolute", "Include {d}/inc/a.conf\nHost *\n  Port 2246\n", files={"inc/a.conf": "Host a\n  Port 2247\n"}),
    C("include-glob-order", "Include {d}/inc/*.conf\n", "a",
      files={"inc/20.conf": "Host a\n  User twenty\n", "inc/10.conf": "Host a\n  User ten\n  Port 2248\n"}),
    C("include-nested", "Include {d}/inc/one.conf\n", "a",
      files={"inc/one.conf": "Include {d}/inc/two.conf\nHost a\n  User one\n", "inc/two.conf": "Host a\n  Port 2249\n"}),
    C("include-in-inactive-host", "Host zz\n  Include {d}/inc/x.conf\nHost *\n  Port 2250\n", "a",
      files={"inc/x.conf": "Host a\n  Port 1\n"}),
    C("include-in-active-host", "Host a\n  Include {d}/inc/x.conf\n  User after\n", "a", "b",
      files={"inc/x.conf": "Port 2251\nHost b\n  User inb\n"}),
    C("include-match-does-not-leak", "Host a\n  Include {d}/inc/m.conf\n  User kept\n", "a",
      files={"inc/m.conf": "Match host nothing\n  Port 1\n"}),
    C("include-in-match", "Match originalhost a\n  Include {d}/inc/x.conf\n", "a", "b",
      files={"inc/x.conf": "Port 2252\n"}),
    C("include-no-match-is-fine", "Include {d}/inc/none-*.conf\nInclude nothing-here-xyz.conf\nHost a\n  Port 2253\n"),
    C("include-tilde", "Include ~/no-such-dir-xyz/*.conf\nHost a\n  Port 2254\n"),
    C("include-several-args", "Include {d}/inc/p.conf {d}/inc/u.conf\n", "a",
      files={"inc/p.conf": "Port 2255\n", "inc/u.conf": "User inc\n"}),
    C("include-group-writable-refused", "Include {d}/inc/gw.conf\n", files={"inc/gw.conf": "Port 2256\n"},
      group_writable=("inc/gw.conf",)),
    C("include-self-loop", "Include {d}/ssh_config\nHost a\n  Port 2257\n"),
    C("include-bad-line-inside", "Include {d}/inc/bad.conf\n", files={"inc/bad.conf": "Host a\n  Port x\n"}),
    C("include-bad-line-inactive", "Host zz\n  Include {d}/inc/bad.conf\n", files={"inc/bad.conf": "Bogus yes\n"}),
    C("include-hostname-then-percent-h", "Host a\n  IdentityFile {d}/keys/id_%h\nInclude {d}/inc/h.conf\n",
      files={"inc/h.conf": "Host a\n  HostName real\n", "keys/id_real": "key"}),
    # --- IdentityFile -------------------------------------------------------------------
    C("identity-order-and-missing", "Host a\n  IdentityFile {d}/keys/id_b\n  IdentityFile {d}/keys/missing\n"
      "Host *\n  IdentityFile {d}/keys/id_a\n"),
    C("identity-duplicates", "Host a\n  IdentityFile {d}/keys/id_a\n  IdentityFile {d}/keys/id_b\n"
      "  IdentityFile {d}/keys/id_a\n"),
    C("identity-none", "Host a\n  IdentityFile none\n  IdentityFile {d}/keys/id_a\n"),
    C("identity-tokens", "Host a\n  HostName 10.5.0.1\n  User bob\n  Port 2258\n"
      "  IdentityFile {d}/keys/%r-%p-%n-%h\n  IdentityFile {d}/keys/%u-%i\n  IdentityFile {d}/keys/%C\n"
      "  IdentityFile {d}/keys/%k\n  IdentityFile %d/x-%l-%L\n  IdentityFile {d}/keys/pct%%\n",
      files={"keys/bob-2258-a-10.5.0.1": "k", f"keys/{ME}-{os.getuid()}": "k", "keys/a": "k", "keys/pct%": "k"}),
    C("identity-alias-token", "Host a\n  HostKeyAlias MyAlias\n  IdentityFile {d}/keys/%k\n",
      files={"keys/myalias": "k", "keys/MyAlias": "k"}),
    C("identity-env", "Host a\n  IdentityFile ${HOME}/keys/id_a\n  IdentityFile ${ENVDOCTOR_CORPUS_DIR}/keys/id_b\n"),
    C("identity-tilde-and-defaults", "Host a\n  IdentityFile ~/no-such-key-xyz\nHost b\n  Port 2259\n", "a", "b"),
    C("identity-relative-path", "Host a\n  IdentityFile keys/id_a\n"),
    C("identity-identities-only", "Host a\n  IdentitiesOnly yes\n  IdentityFile {d}/keys/id_a\n"),
    C("identity-quoted-space", 'Host a\n  IdentityFile "{d}/keys/with space"\n'),
    C("identity-in-inactive-block-ignored", "Host zz\n  IdentityFile {d}/keys/id_b\nHost a\n  IdentityFile {d}/keys/id_a\n"),
    C("identity-percent-h-final-pass", "Host a\n  HostName B.lan\n  IdentityFile {d}/keys/%h\nMatch final\n",
      files={"keys/b.lan": "k"}),
    # --- known hosts --------------------------------------------------------------------
    C("known-none", "Host a\n  UserKnownHostsFile none\n  GlobalKnownHostsFile none\n"),
    C("known-none-uppercase", "Host a\n  UserKnownHostsFile NONE\n"),
    C("known-none-with-others-fails", "Host a\n  UserKnownHostsFile none {d}/kh\n"),
    C("known-multiple", "Host a\n  UserKnownHostsFile {d}/kh1 ~/kh2 ${HOME}/kh3\n  GlobalKnownHostsFile {d}/g1 {d}/g2\n"),
    C("known-first-line-wins", "Host a\n  UserKnownHostsFile {d}/first\nHost *\n  UserKnownHostsFile {d}/second\n", "a", "b"),
    C("known-tokens", "Host a\n  HostName 10.6.0.1\n  Port 2260\n  User kh\n  HostKeyAlias Alias1\n"
      "  UserKnownHostsFile {d}/%h_%p {d}/%k {d}/%n {d}/%r {d}/%C %d/%u_%i %%\n"),
    C("known-unset-env-fails", "Host a\n  UserKnownHostsFile ${ENVDOCTOR_SURELY_UNSET_XYZ}/kh\n"),
    C("known-unknown-token-fails", "Host a\n  UserKnownHostsFile {d}/%T\n"),
    C("known-global-tilde-raw", "Host a\n  GlobalKnownHostsFile ~/global_kh\n"),
    C("known-global-first-wins", "GlobalKnownHostsFile {d}/g1\nGlobalKnownHostsFile {d}/g2\n"),
    # --- StrictHostKeyChecking ----------------------------------------------------------
    *[C(f"strict-{v}", f"Host a\n  StrictHostKeyChecking {v}\n")
      for v in ("yes", "no", "ask", "accept-new", "off", "true", "false", "YES", "Accept-New", "maybe")],
    C("strict-first-wins", "Host a\n  StrictHostKeyChecking accept-new\nHost *\n  StrictHostKeyChecking yes\n", "a", "b"),
    # --- ConnectTimeout -----------------------------------------------------------------
    *[C(f"timeout-{i}", f"Host a\n  ConnectTimeout {v}\n")
      for i, v in enumerate(("none", "0", "5", "1m30s", "2h", "1w", "10S", "3M", "5x", "-1", "99999999999", "1d2h", "NONE", "1.5"))],
    C("timeout-first-wins", "Host a\n  ConnectTimeout 7\nHost *\n  ConnectTimeout 9\n", "a", "b"),
    # --- Port ---------------------------------------------------------------------------
    *[C(f"port-{i}", f"Host a\n  Port {v}\n")
      for i, v in enumerate(("ssh", "0", "65535", "65536", "022", "+22", "-22", "http", "no-such-service-xyz", " 2261"))],
    C("port-uri-beats-config", "Host a\n  Port 2262\n", "ssh://a:2263", "a"),
    # --- ProxyJump / ProxyCommand ------------------------------------------------------
    C("jump-alias-resolved", "Host t\n  HostName 10.8.0.1\n  ProxyJump bastion\nHost bastion\n  HostName 10.0.0.1\n"
      "  User jumper\n  Port 2264\n", "t"),
    C("jump-uri", "Host a\n  ProxyJump ssh://bob@jump.lan:2265\n"),
    C("jump-uri-no-user-no-port", "Host a\n  ProxyJump ssh://jump.lan\n"),
    C("jump-user-host-port", "Host a\n  ProxyJump alice@10.2.2.2:2266\n"),
    C("jump-ipv6", "Host a\n  ProxyJump [::1]:2267\n"),
    C("jump-numeric-no-port", "Host a\n  ProxyJump 10.9.9.9\n"),
    C("jump-three-hops", "Host a\n  ProxyJump j1,u2@j2:2268,ssh://j3\nHost j1\n  ProxyJump j0\n  HostName 10.0.1.1\n"
      "Host j2\n  ProxyJump ignored\nHost j3\n  HostName 10.0.1.3\nHost j0\n  User zero\n"),
    C("jump-none", "Host a\n  ProxyJump none\nHost * !j\n  ProxyJump j\n", "a", "b"),
    C("jump-none-uppercase", "Host a\n  ProxyJump NONE\nHost *\n  ProxyJump j\n"),
    C("jump-trailing-comment", "Host a\n  ProxyJump j1 # via j1\n"),
    C("jump-equals", "Host a\n  ProxyJump=j2\n"),
    C("jump-uri-with-path-fails", "Host a\n  ProxyJump ssh://j/path\n"),
    C("jump-bad-port-fails", "Host a\n  ProxyJump j:99999\n"),
    C("jump-invalid-in-inactive-block", "Host zz\n  ProxyJump ssh://j/path\nHost a\n  Port 2269\n"),
    C("jump-after-proxycommand", "Host a\n  ProxyCommand nc %h %p\n  ProxyJump j\n"),
    C("proxycommand-none-blocks-jump", "Host a\n  ProxyCommand none\nHost *\n  ProxyJump j\n"),
    C("jump-then-proxycommand", "Host a\n  ProxyJump j\n  ProxyCommand nc %h %p\n"),
    C("jump-loop-to-itself-fails", "Host a\n  ProxyJump a\n"),
    C("jump-hop-port-overrides", "Host a\n  ProxyJump j:2270\nHost j\n  Port 1\n  User hopuser\n"),
    C("jump-hop-with-match", "Host a\n  ProxyJump j\nMatch originalhost j\n  HostName 10.7.0.1\n  Port 2271\n"),
    # --- other keywords: values ssh checks ------------------------------------------------
    C("real-world-defaults", "Host *\n  ServerAliveInterval 30\n  ServerAliveCountMax 3\n  ControlMaster auto\n"
      "  ControlPath ~/.ssh/cm-%r@%h:%p\n  ControlPersist 10m\n  AddKeysToAgent yes\n  ForwardAgent no\n"
      "  SendEnv LANG LC_*\n  LocalForward 8080 localhost:80\n  Protocol 2\n  Compression yes\n  LogLevel ERROR\n"
      "  HashKnownHosts yes\n  TCPKeepAlive yes\n  AddressFamily inet\n  VisualHostKey no\n  BatchMode yes\n"),
    C("unknown-keyword-fails", "Host zz\n  UseKeychain yes\n"),
    C("ignore-unknown", "IgnoreUnknown UseKeychain,Foo*\nHost a\n  UseKeychain yes\n  FooBar 1\n  Port 2272\n"),
    C("ignore-unknown-too-late", "Host a\n  UseKeychain yes\nIgnoreUnknown UseKeychain\n"),
    C("ignore-unknown-inactive-still-counts", "Host zz\n  IgnoreUnknown UseKeychain\nHost a\n  UseKeychain yes\n"),
    C("deprecated-and-unsupported", "Host a\n  UseRoaming no\n  RSAAuthentication yes\n  Cipher des\n  Port 2273\n"),
    C("bad-flag-value", "Host zz\n  Compression maybe\n"),
    C("bad-int-value", "Host a\n  ServerAliveInterval soon\n"),
    C("bad-loglevel", "Host a\n  LogLevel LOUD\n"),
    C("bad-addressfamily", "Host a\n  AddressFamily inet5\n"),
    C("forwardagent-path-ok", "Host a\n  ForwardAgent /tmp/agent.sock\n  Port 2274\n"),
    C("checkhostip-alias", "Host a\n  CheckHostIP yes\n  HostKeyAlias Shared\n  Port 2275\n"),
    C("bad-identitiesonly", "Host a\n  IdentitiesOnly perhaps\n"),
    # --- CanonicalizeHostname (no DNS: no CanonicalDomains, or too many dots) ------------
    C("canon-yes-final-pass", "CanonicalizeHostname yes\nHost a\n  HostName B\nHost b\n  Port 2276\n"),
    C("canon-match-canonical", "CanonicalizeHostname yes\nMatch canonical\n  User canon\n"),
    C("canon-always-dots", "CanonicalizeHostname always\nCanonicalDomains example.org\nHost *\n  HostName a.b.c.d\n"
      "Match canonical host a.b.c.d\n  Port 2277\n"),
    C("canon-bad-value", "CanonicalizeHostname perhaps\n"),
    C("canon-no", "CanonicalizeHostname no\nMatch canonical\n  Port 1\n"),
    # --- second round: forms found while fixing the first ------------------------------
    C("match-exec-equals-form", "Match exec=true\n  Port 2278\n", builtin_refuses=("a",)),
    C("match-host-equals-exec", 'Match host=zz exec="exit 3"\n  Port 1\nHost *\n  Port 2279\n'),
    C("match-originalhost-case", "Match originalhost A\n  Port 2280\n", "a", "A"),
    C("match-user-negated-list", "Match user !root,*\n  Port 2281\n", "root@a", "bob@a"),
    C("match-trailing-comment", "Match host a # only a\n  Port 2282\n", "a", "b"),
    C("canon-true", "CanonicalizeHostname true\nHost a\n  HostName B.lan.example.org\nHost b.lan.example.org\n  Port 2283\n"),
    C("jump-service-port", "Host a\n  ProxyJump j:ssh\n"),
    C("jump-service-port-extra", "Host a\n  ProxyJump i:ssh,j\n"),
    C("host-without-patterns", "Host\n  Port 1\n"),
    C("port-equals-nothing", "Host a\n  Port=\n"),
    C("known-empty-quoted", 'Host a\n  UserKnownHostsFile ""\n'),
    C("identity-empty-quoted", 'Host a\n  IdentityFile ""\n'),
    C("strict-empty-quoted", 'Host a\n  StrictHostKeyChecking ""\n'),
    C("timeout-plus-sign", "Host a\n  ConnectTimeout +5\n"),
    C("user-percent-tokens-raw", "Host a\n  User %u-%h\n"),
    C("hostname-with-equals", 'Host a\n  HostName "a=b"\n'),
    C("uri-ipv6-destination", "Host ::1\n  Port 2284\n", "ssh://u@[::1]:2300", "ssh://[::1]"),
    C("uri-trailing-slash", "Host a\n  Port 2285\n", "ssh://a/"),
    C("include-glob-with-directory", "Include {d}/inc/*\n", files={"inc/sub/x.conf": "Port 1\n", "inc/a.conf": "Port 2286\n"}),
    C("include-quoted-space", 'Include "{d}/inc dir/x.conf"\n', files={"inc dir/x.conf": "Port 2287\n"}),
    C("identity-too-many", "Host a\n" + "".join(f"  IdentityFile {{d}}/keys/k{n}\n" for n in range(101))),
    C("identity-too-many-inactive", "Host zz\n" + "".join(f"  IdentityFile {{d}}/keys/k{n}\n" for n in range(101))),
    C("known-hosts-many-lines", "Host a\n  GlobalKnownHostsFile none\n  UserKnownHostsFile {d}/k1\n"
      "Host *\n  UserKnownHostsFile {d}/k2\n  GlobalKnownHostsFile {d}/g\n", "a", "b"),
    C("jump-hop-alias-user-port", "Host a\n  ProxyJump hopper@jh:2288,j2\nHost jh\n  HostName 10.0.9.1\n  User ignored\n"
      "Host j2\n  User two\n  Port 2289\n"),
    C("hostname-trailing-dot-address", "Host a\n  HostName 127.0.0.1.\n"),
    C("negated-host-then-match-all", "Host !a\n  User nota\nMatch all\n  User all\n", "a", "b"),
    C("ignore-unknown-pattern-case", "IgnoreUnknown USEKEYCHAIN\nHost a\n  UseKeychain yes\n  Port 2290\n"),
    C("deprecated-globalknownhostsfile2", "Host a\n  GlobalKnownHostsFile2 /x\n  UserKnownHostsFile2 /y\n  Port 2291\n"),
    C("connect-timeout-in-match-final", "Host a\n  HostName b\nMatch final host b\n  ConnectTimeout 11\n"),
    C("strict-in-included-file", "Include {d}/inc/s.conf\nHost *\n  StrictHostKeyChecking yes\n", "a", "b",
      files={"inc/s.conf": "Host a\n  StrictHostKeyChecking accept-new\n"}),
    # --- third round: ProxyJump's words, token-expanded keywords, hand-parsed values ----------
    C("jump-space-after-comma", "Host a\n  ProxyJump j1, j2\n"),
    C("jump-two-words", "Host a\n  ProxyJump j1 j2\n"),
    C("jump-comment-with-comma", "Host a\n  ProxyJump j1 # a,b\n"),
    C("jump-none-comment", "Host a\n  ProxyJump none # direct\nHost * !j\n  ProxyJump j\n"),
    C("jump-empty-hop", "Host a\n  ProxyJump j1,,j2\n"),
    C("jump-trailing-comma", "Host a\n  ProxyJump j1,\n"),
    C("proxycommand-equals-none", "Host a\n  ProxyCommand=none\n  ProxyJump j\n"),
    C("hostname-empty-quoted", 'Host a\n  HostName ""\n'),
    C("user-at-in-config", "Host a\n  User u@corp\n"),
    C("identity-tilde-user", "Host a\n  IdentityFile ~root/x\n"),
    C("identity-tilde-no-such-user", "Host a\n  IdentityFile ~nosuchuserxyz/x\n  IdentityFile {d}/keys/id_a\n"),
    C("known-tilde-no-such-user", "Host a\n  UserKnownHostsFile ~nosuchuserxyz/x\n"),
    C("hostname-set-in-match-final", "Match final\n  HostName %h.y\n"),
    C("match-exec-in-inactive-include", "Host zz\n  Include {d}/inc/e.conf\n", files={"inc/e.conf": 'Match exec "true"\n  Port 1\n'},
      builtin_refuses=("a",)),
    C("match-empty-quoted", 'Match host ""\n  Port 1\n'),
    C("host-star-and-not-star", "Host * !*\n  Port 1\n"),
    C("localcommand-unknown-token-ok", "Host a\n  LocalCommand echo %z\n  PermitLocalCommand yes\n"),
    C("remotecommand-unknown-token", "Host a\n  RemoteCommand echo %z\n"),
    C("controlpath-unknown-token", "Host a\n  ControlPath /tmp/%z\n"),
    C("controlpath-inactive-token-ok", "Host zz\n  ControlPath /tmp/%z\n"),
    C("identityagent-unset-env", "Host a\n  IdentityAgent ${ENVDOCTOR_SURELY_UNSET_XYZ}\n"),
    C("identityagent-bad-legacy-name", "Host a\n  IdentityAgent $1abc\n"),
    C("valid-hand-parsed-values", "Host a\n  IPQoS af21 cs1\n  AddKeysToAgent confirm 5m\n  ControlPersist 10m\n"
      "  StreamLocalBindMask 0177\n  FingerprintHash sha256\n  EscapeChar ^A\n  CanonicalDomains example.org lan\n"
      "  IdentityAgent $SSH_AUTH_SOCK\n  ForwardAgent ${HOME}/agent\n  ControlPath ~/.ssh/cm-%C\n"
      "  RemoteCommand echo %h ${X}\n  Port 2302\n"),
    C("valid-hand-parsed-values-2", "Host a\n  IPQoS 0x10\n  AddKeysToAgent 1h\n  ControlPersist yes\n  EscapeChar none\n"
      "  IdentityAgent SSH_AUTH_SOCK\n  ForwardAgent yes\n  Port 2303\n"),
    C("bad-ipqos", "Host a\n  IPQoS loud\n"),
    C("bad-ipqos-three", "Host a\n  IPQoS af11 af12 af13\n"),
    C("bad-addkeystoagent", "Host a\n  AddKeysToAgent sometimes\n"),
    C("bad-addkeystoagent-yes-time", "Host a\n  AddKeysToAgent yes 5m\n"),
    C("bad-fingerprinthash", "Host a\n  FingerprintHash md4\n"),
    C("bad-streamlocalbindmask", "Host a\n  StreamLocalBindMask 999\n"),
    C("bad-controlpersist", "Host a\n  ControlPersist soon\n"),
    C("bad-escapechar", "Host a\n  EscapeChar abc\n"),
    C("bad-canonicaldomains", "Host a\n  CanonicalDomains bad..x\n"),
    C("lone-cr-line-endings", "Host a\rPort 2304\r\nHost b\n  Port 2305\n", "a", "b"),
    C("cr-between-keyword-and-value", "Host a\n  Port\r2306\n"),
    C("cr-inside-value", "Host a\n  Port 2307\rUser x\n"),
    C("nel-and-line-separator-in-line", "Host a\n  User u\u0085Port\n  HostName h\u2028x\n"),
    C("form-feed-mid-line", "Host a\n  Port 2308\fUser x\n"),
    C("bad-localforward", "Host a\n  LocalForward nonsense\n"),
    C("bad-ciphers", "Host a\n  Ciphers nosuchcipher\n"),
    C("bad-rekeylimit", "Host a\n  RekeyLimit lots\n"),
    C("bad-tunneldevice", "Host a\n  TunnelDevice x:y:z\n"),
]


def build(case: Case, root: Path) -> Path:
    """The case's files under root (also its $HOME): config, included files, identity files."""
    (root / "keys").mkdir(parents=True)
    for name in ("id_a", "id_b", "with space"):
        (root / "keys" / name).write_text("key")
    for name, text in case.files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{d}", str(root)))
    for name in case.group_writable:
        os.chmod(root / name, 0o664)
    config = root / "ssh_config"
    config.write_text(case.config.replace("{d}", str(root)))
    return config


def run_ssh_g(config: Path, dest: str, env: dict[str, str], cwd: Path, *extra: str) -> dict[str, list[str]] | None:
    """The oracle: `ssh -G` output as key -> values; None when ssh refuses."""
    proc = subprocess.run([SSH, "-G", "-F", str(config), *extra, dest], check=False, capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=30, env=env, cwd=cwd)
    if proc.returncode != 0:
        return None
    values: dict[str, list[str]] = {}
    for line in proc.stdout.decode("utf-8", "surrogateescape").split("\n"):  # ssh ends a setting at LF only
        key, _, value = line.partition(" ")
        values.setdefault(key, []).append(value)
    return values


def host_arg(dest: str) -> str:
    """The host part of a destination as ssh takes it (%n)."""
    if dest.startswith("ssh://"):
        rest = dest[6:].rpartition("@")[2]
        return rest[1:].partition("]")[0] if rest.startswith("[") else rest.partition(":")[0]
    return dest.rpartition("@")[2]


def expand(text: str, out: dict[str, list[str]], dest: str, env: dict[str, str]) -> str:
    """ssh's expansion of an IdentityFile (ssh -G prints it as written): ~, then ${VAR} and %x."""
    if text.startswith("~/") or text == "~":
        text = HOME + text[1:]
    this = socket.gethostname()
    hostname, port, user = out["hostname"][0], out["port"][0], out["user"][0]
    tokens = {"%": "%", "h": hostname, "p": port, "r": user, "n": host_arg(dest), "u": ME, "d": HOME,
              "i": str(os.getuid()), "l": this, "L": this.split(".")[0],
              "k": out.get("hostkeyalias", [host_arg(dest)])[0],
              "C": hashlib.sha1(f"{this}{hostname}{port}{user}".encode()).hexdigest()}
    text = re.sub(r"\$\{([^}]*)\}", lambda m: env[m[1]], text)
    return re.sub(r"%(.)", lambda m: tokens[m[1]], text)


def oracle_hops(config: Path, jump: str | None, env: dict[str, str], cwd: Path, depth: int = 0) -> list[dict]:
    """ProxyJump hops as ssh builds them (`ssh -J first,... -W target last`): the first hop's
    own ProxyJump comes before it; the later hops' own ProxyJump is overridden."""
    if not jump or jump == "none":
        return []
    assert depth < 6, "jump chain too deep for the oracle"
    hops = []
    for index, hop in enumerate(jump.split(",")):
        extra: list[str] = []
        if hop.startswith("ssh://"):
            target = hop
        else:
            user, _, hostport = hop.rpartition("@")
            if hostport.startswith("["):
                host, _, port = hostport[1:].partition("]")
                port = port.lstrip(":")
            else:
                host, _, port = hostport.partition(":")
            target = host
            extra = (["-l", user] if user else []) + (["-p", port] if port else [])
        out = run_ssh_g(config, target, env, cwd, *extra)
        assert out is not None, hop
        if index == 0:
            hops += oracle_hops(config, out.get("proxyjump", [None])[0], env, cwd, depth + 1)
        hops.append({"hostname": out["hostname"][0], "port": int(out["port"][0]), "user": out["user"][0]})
    return hops


def oracle(config: Path, dest: str, env: dict[str, str], cwd: Path) -> dict[str, object] | None:
    out = run_ssh_g(config, dest, env, cwd)
    if out is None:
        return None
    identities = [expand(p, out, dest, env) for p in out.get("identityfile", [])]
    timeout = out["connecttimeout"][0]
    known = [f for key in ("userknownhostsfile", "globalknownhostsfile") for f in out.get(key, [""])[0].split()]
    return {
        "host": dest,
        "hostname": out["hostname"][0],
        "port": int(out["port"][0]),
        "user": out["user"][0],
        "identity_files": [p for p in identities if p != "none" and os.path.isfile(os.path.join(cwd, p))],
        "proxy_jump": oracle_hops(config, out.get("proxyjump", [None])[0], env, cwd) or None,
        "known_hosts_files": [f for f in known if f != "none"],
        "strict_host_key_checking": out["stricthostkeychecking"][0],
        "connect_timeout": None if timeout == "none" else float(timeout),
    }


def envdoctor_hosts(launch: Launch, config: Path, dests: tuple[str, ...], env: dict[str, str], cwd: Path):
    proc = launch(["hosts", *dests, "--ssh-config", str(config), "--format", "json"], env, cwd, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    document = json.loads(proc.stdout)
    return proc.exit_status, document


def disagreements(case: Case, root: Path, resolver: str, launch: Launch) -> list[str]:
    """Every way `envdoctor hosts` differs from the oracle on this case (empty: agreement)."""
    config = build(case, root)
    env = {**os.environ, "HOME": str(root), "ENVDOCTOR_CORPUS_DIR": str(root),
           "XDG_CACHE_HOME": str(root / "xdg-cache")}
    env.pop("ENVDOCTOR_SSH_G_CACHE", None)
    expected = {dest: oracle(config, dest, env, root) for dest in case.dests}
    run_env = dict(env)
    if resolver == "built-in":
        no_ssh = root / "no-ssh-bin"
        no_ssh.mkdir()
        run_env["PATH"] = str(no_ssh)
    runs = [envdoctor_hosts(launch, config, case.dests, run_env, root)]
    if resolver == "ssh -G":
        runs.append(envdoctor_hosts(launch, config, case.dests, run_env, root))  # the second from the cache
    problems = []
    for status, document in runs:
        entries = dict(zip(case.dests, document["hosts"]))  # in the order given (an ssh:// user is masked)
        any_error = False
        for dest in case.dests:
            got = entries.get(dest)
            want = expected[dest]
            if got is None:
                problems.append(f"{dest}: missing from the output")
                continue
            if "error" in got:
                any_error = True
                if "\n" in got["error"] or not got["error"]:
                    problems.append(f"{dest}: error is not one line: {got['error']!r}")
                if want is not None and not (resolver == "built-in" and dest in case.builtin_refuses):
                    problems.append(f"{dest}: envdoctor refused ({got['error']}) but ssh -G resolves it")
                elif want is not None and "Match exec" not in got["error"]:
                    problems.append(f"{dest}: refused without naming Match exec: {got['error']}")
                continue
            if want is None:
                problems.append(f"{dest}: ssh -G refuses it but envdoctor resolved it: {got}")
                continue
            got = {**got, "host": dest}
            for key in want:
                if got.get(key) != want[key]:
                    problems.append(f"{dest}: {key}: envdoctor {got.get(key)!r} != ssh -G {want[key]!r}")
        if status != (2 if any_error else 0):
            problems.append(f"exit status {status} with errors={any_error}")
    return problems


def pairs() -> list:
    """Every (case, resolver); a known gap of the built-in parser is a strict xfail (it must keep failing
    until the gap is closed, then the mark goes)."""
    params = []
    for case in CASES:
        for resolver in ("ssh -G", "built-in"):
            marks = [pytest.mark.xfail(strict=True, reason=case.builtin_gap)] if resolver == "built-in" and \
                case.builtin_gap else []
            params.append(pytest.param(case, resolver, id=f"{case.id}-{resolver}", marks=marks))
    return params


@pytest.mark.skipif(SSH is None, reason="the OpenSSH client (the oracle) is not installed")
@pytest.mark.parametrize(("case", "resolver"), pairs())
def test_hosts_json_agrees_with_ssh_g(case: Case, resolver: str, tmp_path: Path, launch_cli: Launch) -> None:
    """`envdoctor hosts --format json` gives each destination `ssh -G`'s values, or (ssh refusing) a one-line error and exit 2."""
    assert disagreements(case, tmp_path, resolver, launch_cli) == []


def test_corpus_is_large_and_unique() -> None:
    """The corpus has 250 configs or more, more destination pairs still, and unique ids."""
    assert len({c.id for c in CASES}) == len(CASES) >= 250
    assert sum(len(c.dests) for c in CASES) >= 290


@pytest.mark.parametrize("text", ["Match exec=true\n  Port 1\n", 'Match host=x !exec="false"\n',
                                  "CanonicalizeHostname true\n", "CanonicalizePermittedCNAMEs *.a:*.b\n"])
def test_impure_forms_are_not_cached(tmp_path: Path, text: str) -> None:
    """A config whose answer runs a command (`Match exec=cmd`) or asks DNS (canonicalisation) is never cached."""
    from envdoctor.transport import ssh_g_cache

    config = tmp_path / "config"
    config.write_text(text)
    assert ssh_g_cache.config_state(SSH or "/usr/bin/ssh", str(config)).digest is None


@pytest.mark.parametrize(("text", "dest"), [
    ("CanonicalizeHostname yes\nCanonicalDomains example.org\n", "gpu"),
    ("CanonicalizeHostname always\nCanonicalDomains example.org\nProxyJump j\n", "gpu"),
    ("CanonicalizeHostname true\n", "gpu.example.org."),
    ("CanonicalizePermittedCNAMEs *.a:*.b\n", "gpu"),
])
def test_builtin_refuses_what_needs_dns(tmp_path: Path, text: str, dest: str) -> None:
    """Where ssh would ask DNS to canonicalise a name, the built-in parser refuses in one line instead of guessing."""
    from envdoctor.transport.ssh_config_resolve import UnresolvableError, resolve_builtin

    config = tmp_path / "config"
    config.write_text(text)
    with pytest.raises(UnresolvableError, match="CanonicalizeHostname asks DNS"):
        resolve_builtin(dest, config_file=str(config))


@pytest.mark.parametrize(("text", "dest"), [
    ("CanonicalizeHostname yes\nCanonicalDomains example.org\n", "gpu.a.example"),  # more dots than the maximum
    ("CanonicalizeHostname yes\nCanonicalDomains example.org\nProxyJump j\n", "gpu"),  # proxied, not 'always'
    ("CanonicalizeHostname yes\nCanonicalDomains example.org\n", "10.0.0.1"),  # an address
])
def test_builtin_canonicalises_offline_cases(tmp_path: Path, text: str, dest: str) -> None:
    """Canonicalisation ssh does without DNS is resolved by the built-in parser as ssh does."""
    from envdoctor.transport.ssh_config_resolve import resolve_builtin

    config = tmp_path / "config"
    config.write_text(text)
    assert resolve_builtin(dest, config_file=str(config)).hostname == dest


@pytest.mark.parametrize(("text", "host", "user", "port"), [
    ("::1", "::1", None, None), ("u@fe80::1", "fe80::1", "u", None), ("u@v@x", "x", "u@v", None),
    ("ssh://u;opt=1@h:ssh", "h", "u", 22), ("ssh://%41@h/", "h", "A", None), ("[::1]:2222", "::1", None, 2222),
])
def test_destinations_read_as_ssh_reads_them(text: str, host: str, user: str | None, port: int | None) -> None:
    """A bare IPv6 address, the last `@` splitting user from host, and ssh:// URIs as parse_uri reads them."""
    from envdoctor.inventory import parse_destination

    target = parse_destination(text)
    assert (target.host, target.user, target.port) == (host, user, port)


@pytest.mark.parametrize("text", ["ssh://[::1]", "ssh://h/path", "ssh://@h", "ssh://h:0", "ssh://a..b"])
def test_uris_ssh_refuses_are_refused(text: str) -> None:
    """An ssh:// URI ssh refuses (IPv6 host, path, empty user, port 0, bad name) is a one-line ConfigError."""
    from envdoctor.errors import ConfigError
    from envdoctor.inventory import parse_destination

    with pytest.raises(ConfigError) as caught:
        parse_destination(text)
    assert "\n" not in str(caught.value)
