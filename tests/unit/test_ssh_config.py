"""The fallback SSH config lexer, token expansion and known_hosts matching (pure logic)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from envdoctor.errors import ConfigError
from envdoctor.transport import known_hosts
from envdoctor.transport.openssh import parse_jump
from envdoctor.transport.ssh_aliases import config_host_names
from envdoctor.transport.ssh_config import match_pattern_list, parse_lines, split_args
from envdoctor.transport.ssh_tokens import TokenContext, local_account, percent_dollar_expand


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("prod   # replaces staging", ["prod"]),
        ("2201 # x", ["2201"]),
        ('"with space" b', ["with space", "b"]),
        ("a\\ b c", ["a b", "c"]),
        ("'single # not a comment'", ["single # not a comment"]),
        ('exec "test %h = a"', ["exec", "test %h = a"]),
        ("gpu1,gpu2", ["gpu1,gpu2"]),
        ("a#b", ["a#b"]),
    ],
)
def test_split_args_like_openssh(text, words):
    """Words split as argv_split does: quotes, backslash escapes, a word starting with # ends the line."""
    assert split_args(text, "f:1") == words


def test_unbalanced_quote_names_file_and_line():
    """An unbalanced quote is a ConfigError naming the file and line."""
    with pytest.raises(ConfigError, match=r"^cfg:2: unbalanced quote"):
        parse_lines('Host ok\nHost bad"\n', "cfg")


def test_keyword_equals_and_comments():
    """`Key=value`, `Key = value` and comment lines are read as ssh reads them."""
    lines = parse_lines("# top\nHost=other\n  HostName = 10.0.0.1\n\tPort\t22 # c\n", "cfg")
    assert [(l.keyword, l.args, l.where) for l in lines] == [
        ("host", ("other",), "cfg:2"), ("hostname", ("10.0.0.1",), "cfg:3"), ("port", ("22",), "cfg:4")]


def test_pattern_lists_negation_wins():
    """In a pattern list a matching negated pattern wins over any positive one."""
    assert match_pattern_list("web1", "web*,!web2")
    assert not match_pattern_list("web2", "web*,!web2")
    assert match_pattern_list("A.example", "a.*", lower=True)


def test_tokens_expand_in_one_pass(monkeypatch):
    """`${VAR}` and `%x` expand once: a `%` inside an environment value stays as it is."""
    monkeypatch.setenv("ENVDOCTOR_T", "x%hy")
    context = TokenContext("host.example", 2201, "bob", "alias")
    tokens = context.table()
    assert percent_dollar_expand("${ENVDOCTOR_T}/%h_%p_%r_%n_%%", tokens) == "x%hy/host.example_2201_bob_alias_%"
    assert tokens["d"] == local_account().pw_dir
    with pytest.raises(ConfigError, match="unknown token %X"):
        percent_dollar_expand("~/%X", tokens)
    with pytest.raises(ConfigError, match="has no value"):
        percent_dollar_expand("${ENVDOCTOR_UNSET_VARIABLE}", tokens)


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("ssh://bob@jump:2222", ("jump", "bob", 2222)),
        ("alice@j2", ("j2", "alice", None)),
        ("alice@[10.2.2.2]:2200", ("10.2.2.2", "alice", 2200)),
        ("bastion", ("bastion", None, None)),
    ],
)
def test_proxyjump_hops(text, spec):
    """ProxyJump hops: URIs, user@host:port and ssh -G's bracketed form."""
    hop = parse_jump(text)
    assert (hop.host, hop.user, hop.port) == spec


def test_bad_proxyjump_hop_is_refused():
    """A hop with a bad port is a ConfigError, not a connection to somewhere else."""
    with pytest.raises(ConfigError):
        parse_jump("user@host:notaport")


KEY_A = "ssh-ed25519 " + base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519" + b"A" * 36).decode()
KEY_B = "ssh-ed25519 " + base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519" + b"B" * 36).decode()


def hashed(name: str) -> str:
    salt = b"0123456789abcdefghij"
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def test_known_hosts_lookup(tmp_path):
    """Names are matched plain, hashed, with [host]:port and patterns; @revoked counts for any host."""
    path = tmp_path / "known_hosts"
    path.write_text(
        f"# comment\n{hashed('[10.0.0.1]:2201')} {KEY_A}\nweb*,!web2 {KEY_B}\n"
        f"@revoked [elsewhere]:1 {KEY_B}\n@cert-authority *.example {KEY_A}\nnot a key line\n"
    )
    blob_b = base64.b64decode(KEY_B.split()[1])
    name = known_hosts.lookup_name("10.0.0.1", 2201, None)
    assert name == "[10.0.0.1]:2201"
    found = known_hosts.host_keys([str(path)], name)
    assert [k.openssh for k in found.trusted] == [KEY_A] and found.known
    assert known_hosts.host_keys([str(path)], "10.0.0.1").known is False  # port 22 is another name
    assert known_hosts.host_keys([str(path)], "web1").trusted and not known_hosts.host_keys([str(path)], "web2").known
    assert known_hosts.host_keys([str(path)], "gpu.example").cert_authorities
    assert found.is_revoked(blob_b)
    assert known_hosts.lookup_name("10.0.0.1", 2201, "myalias") == "myalias"


@pytest.mark.parametrize(
    ("strict", "accept_new", "allow_no", "policy"),
    [
        ("true", False, False, known_hosts.STRICT),
        ("ask", False, False, known_hosts.STRICT),
        ("accept-new", False, False, known_hosts.ACCEPT_NEW),
        ("true", True, False, known_hosts.ACCEPT_NEW),
        ("false", False, False, known_hosts.STRICT),
        ("false", True, False, known_hosts.ACCEPT_NEW),
        ("false", False, True, known_hosts.NO_CHECK),
    ],
)
def test_host_key_policy(strict, accept_new, allow_no, policy):
    """StrictHostKeyChecking from the config, --accept-new over it, `no` only when confirmed."""
    assert known_hosts.host_key_policy(strict, accept_new=accept_new, allow_no_check=allow_no)[0] == policy


def test_accepted_keys_never_go_to_a_token_named_file():
    """accept-new writes to the first UserKnownHostsFile only when it is a real, expanded path."""
    assert known_hosts.record_file(["/home/u/.ssh/kh/h_22", "/x"]) == "/home/u/.ssh/kh/h_22"
    assert known_hosts.record_file(["/home/u/.ssh/kh/%h_%p"]) is None
    assert known_hosts.record_file(["none"]) is None


def test_alias_guard_reads_host_and_match_originalhost(tmp_path):
    """Literal Host and Match originalhost names count; a negation only excludes within its own line."""
    config = tmp_path / "config"
    config.write_text("Host prod   # replaces staging\nHost * !bastion\nHost bastion\nHost gpu-*\n"
                      "Match originalhost mo,!bad exec \"true\"\n")
    names = config_host_names([(str(config), True)])
    assert names.names("prod") and names.names("bastion") and names.names("mo") and names.names("gpu-01")
    assert not names.names("staging") and not names.names("replaces") and not names.names("bad")
    assert not names.names("anything")  # `*` alone names nothing


def test_unknown_host_guard_in_resolve_hosts(tmp_path):
    """check/fix accept inventory names, defined aliases, dotted names, IPs and user@host; a typo
    is refused with the nearest alias."""
    from envdoctor.inventory import load_inventory, resolve_hosts

    config = tmp_path / "config"
    config.write_text("Host * !bastion\n  User x\nHost bastion\n  HostName 10.0.0.1\n"
                      "Match originalhost gpu-train\n  HostName 10.0.0.2\n")
    inventory = load_inventory(None)
    for name in ("bastion", "gpu-train", "db.internal", "10.1.2.3", "root@anything", "ssh://u@h:2222"):
        assert resolve_hosts([name], inventory, ssh_config_files=[str(config)])[0].ssh is not None, name
    with pytest.raises(ConfigError, match=r"unknown host 'gpu-trian'.*did you mean 'gpu-train'"):
        resolve_hosts(["gpu-trian"], inventory, ssh_config_files=[str(config)])


def test_a_config_parsed_again_is_the_same_and_its_own_list():
    """parse_lines keeps what it parsed (a run reads its config three times): equal lines, a fresh list."""
    from envdoctor.transport.ssh_config import parse_lines

    text = "Host a\n  HostName 10.0.0.1\n# note\nHost b\n  Port 2222\n"
    first = parse_lines(text, "/cfg")
    first.append(first[0])
    again = parse_lines(text, "/cfg")
    assert [ln.where for ln in again] == ["/cfg:1", "/cfg:2", "/cfg:4", "/cfg:5"]
    assert parse_lines(text, "/other")[0].where == "/other:1"
