"""Property-based tests (hypothesis) of the quoting and of every parser that reads host data."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envdoctor.install.consistency import check_environment
from envdoctor.checks.packages import satisfied_by, unmet_requirements
from envdoctor.errors import ConfigError, ProbeError, TransportError
from envdoctor.engine.facts import Distribution, Environment
from envdoctor.inventory import parse_destination, parse_requirement
from envdoctor.patching.ledger import LedgerEntry, applied_patches, parse_ledger, unfinished
from envdoctor.logsafe import REDACTED, redact_secret_values, redact_text
from envdoctor.probe.program import parse_lines
from envdoctor.transport.interface import shell_join
from envdoctor.transport.ssh import retry_delays

# Any text a shell argument can carry: every code point but NUL and lone surrogates.
ARG_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)


@given(st.lists(ARG_TEXT, max_size=3), ARG_TEXT, ARG_TEXT)
def test_shell_join_refuses_nul_bytes(before, left, right):
    """An argument with a NUL byte is refused, never silently truncated."""
    with pytest.raises(TransportError):
        shell_join([*before, left + "\x00" + right])


USER = st.text(st.characters(blacklist_categories=("Cs", "Zs", "Cc"), blacklist_characters="@:[]"), min_size=1,
               max_size=12).filter(lambda s: not any(c.isspace() for c in s) and not s.startswith("-"))
# A destination that starts with "-" is refused (it would read as an option to ssh): see
# test_destination_starting_with_a_dash_is_refused.
HOST = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,20}[A-Za-z0-9])?", fullmatch=True)


@given(st.one_of(st.none(), USER), HOST, st.one_of(st.none(), st.integers(1, 65535)))
def test_destination_round_trips(user, host, port):
    """user@host:port parses back into the same user, host and port."""
    text = (f"{user}@" if user else "") + host + (f":{port}" if port else "")
    target = parse_destination(text)
    assert (target.user, target.host, target.port) == (user, host, port)


@given(st.text(max_size=60))
@example("host:0")
@example("host:99999")
@example("a@b@c")
@example("[::1]:22")
def test_destination_parser_only_ever_raises_config_error(text):
    """Any string is either a destination or a ConfigError (a one-line usage error), nothing else."""
    try:
        target = parse_destination(text)
    except ConfigError:
        return
    assert target.host and (target.port is None or 0 < target.port < 65536)


# --- probe output -------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
SECTION = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=10)


@given(st.dictionaries(SECTION, JSON_VALUES, max_size=4), st.dictionaries(SECTION, st.text(max_size=30), max_size=3),
       st.lists(st.tuples(SECTION, JSON_VALUES), max_size=5))
def test_probe_lines_round_trip(sections, errors, items):
    """What the probe emits (data, errors, streamed items, end marker) is what parse_lines returns."""
    lines = [json.dumps({"section": n, "item": i}).encode() for n, i in items]
    lines += [json.dumps({"section": n, "data": d}).encode() for n, d in sections.items()]
    lines += [json.dumps({"section": n, "error": e}).encode() for n, e in errors.items()]
    lines.append(b'{"done": true}')
    output = parse_lines(lines)
    assert output.sections == sections
    assert output.errors == errors
    expected_items: dict[str, list] = {}
    for name, item in items:
        expected_items.setdefault(name, []).append(item)
    assert output.items == expected_items


@given(st.lists(st.binary(max_size=40) | JSON_VALUES.map(lambda v: json.dumps(v).encode()), max_size=6))
@example([b"[1]", b'{"done": true}'])
@example([b'"text"', b"42"])
def test_probe_parser_turns_any_output_into_facts_or_a_probe_error(lines):
    """Garbage, foreign JSON or a torn stream from a host becomes a ProbeError, never another exception."""
    try:
        parse_lines(lines)
    except ProbeError:
        pass


# --- ledger -------------------------------------------------------------------------------

LEDGER_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
ENTRY = st.builds(
    LedgerEntry,
    op=st.sampled_from(["apply", "revert"]), phase=st.sampled_from(["intent", "done"]),
    patch=st.sampled_from(["p1", "p2"]), file=st.sampled_from(["/a.py", "/b c.py"]),
    distribution=LEDGER_TEXT, version=LEDGER_TEXT, sha256_before=LEDGER_TEXT, sha256_after=LEDGER_TEXT,
    backup=LEDGER_TEXT, time=LEDGER_TEXT, envdoctor=LEDGER_TEXT,
)


@given(st.lists(ENTRY, max_size=8), st.integers(0, 200))
def test_ledger_round_trips_and_ignores_a_torn_last_line(entries, cut):
    """Entries written one per line parse back equal; a line cut short by a kill is dropped, not fatal."""
    lines = [json.dumps(e.to_json()) + "\n" for e in entries]
    assert parse_ledger(lines) == entries
    assert parse_ledger(line.encode() for line in lines) == entries
    torn_line = json.dumps({"op": "apply", "phase": "done", "patch": "p1"})[: cut % 40]
    assert parse_ledger(("".join(lines) + torn_line).splitlines()) == entries


@given(st.lists(st.binary(max_size=60) | JSON_VALUES.map(lambda v: json.dumps(v)), max_size=8))
def test_ledger_parser_never_raises(lines):
    """Any bytes or JSON in the ledger file parse to entries (or nothing) without an exception."""
    entries = parse_ledger(lines)
    unfinished(entries)
    applied_patches(entries)


@given(st.lists(ENTRY, max_size=10))
def test_every_intent_followed_by_done_leaves_nothing_unfinished(entries):
    """Once every intent has its done line, the ledger has no unfinished work; applied follows the last op."""
    completed = []
    for entry in entries:
        completed.append(LedgerEntry(**{**entry.to_json(), "phase": "intent"}))
        completed.append(LedgerEntry(**{**entry.to_json(), "phase": "done"}))
    assert unfinished(completed) == []
    last_op = {}
    for entry in entries:
        last_op[(entry.patch, entry.file)] = entry.op
    assert set(applied_patches(completed)) == {k for k, op in last_op.items() if op == "apply"}


# --- requirements -------------------------------------------------------------------------


@given(st.text(max_size=50))
@example("tiktoken>>1")
@example("transformers>=4.57,<5.16; python_version >= '3.9'")
def test_requirement_option_is_returned_unchanged_or_a_config_error(text):
    """--require and inventory requires are accepted verbatim or refused with a ConfigError."""
    try:
        assert parse_requirement(text, where="--require") == text
    except ConfigError as exc:
        assert "not a valid requirement" in str(exc)


VERSIONS = st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(0, 30)).map(lambda t: ".".join(map(str, t)))


@given(VERSIONS, st.lists(st.tuples(st.sampled_from(["==", "!=", ">=", "<=", ">", "<", "~="]), VERSIONS),
                          min_size=1, max_size=3))
def test_satisfied_by_agrees_with_the_specifier(version, clauses):
    """A distribution satisfies a requirement exactly when its version is in the specifier set."""
    spec = ",".join(op + v for op, v in clauses)
    env = _env([_dist("pkg", version)])
    unmet = unmet_requirements(env, [f"pkg{spec}"])
    inside = SpecifierSet(spec).contains(Version(version), prereleases=True)
    assert (unmet == []) == inside
    assert satisfied_by(Requirement(f"pkg{spec}"), _dist("pkg", version)) == inside


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.text(max_size=12), st.lists(st.text(max_size=40), max_size=3)), max_size=5),
       st.dictionaries(st.sampled_from(["python_version", "sys_platform", "platform_machine", "python_full_version"]),
                       st.text(max_size=8), max_size=4))
@example([("a", ["b; python_version >= '3.8'"])], {"python_version": "not-a-version"})
@example([("a", ["b (>=1.0)", "c>=x", "d ; extra == 'x'"])], {})
def test_dependency_check_survives_any_metadata(dists, markers):
    """Requires-Dist strings and markers as a host reports them never make the consistency check raise."""
    env = _env([_dist(name or "x", "1.0", tuple(reqs)) for name, reqs in dists], markers=markers)
    check_environment(env)


def _dist(name: str, version: str, requires: tuple[str, ...] = ()) -> Distribution:
    return Distribution(name=name, version=version, requires=requires, path=f"/site/{name}.dist-info", site="/site")


def _env(dists: list[Distribution], markers: dict[str, str] | None = None) -> Environment:
    return Environment(prefix="/v", python="/v/bin/python", exists=True, runs=True,
                       markers=markers if markers is not None else {"python_version": "3.11"},
                       distributions=tuple(dists))


# --- redaction ----------------------------------------------------------------------------

TOKEN = st.from_regex(r"hf_[A-Za-z0-9]{20,40}", fullmatch=True)
FILLER = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@given(FILLER, TOKEN, FILLER)
def test_hf_tokens_are_masked_wherever_they_appear(left, token, right):
    """An hf_ token surrounded by any text (not glued to more word characters) never survives redaction."""
    assume(not (left[-1:].isalnum() or left[-1:] == "_") and not (right[:1].isalnum() or right[:1] == "_"))
    for redact in (redact_text, redact_secret_values):
        assert token not in redact(left + token + right)


@given(st.from_regex(r"[a-z]{1,10}", fullmatch=True), st.from_regex(r"[A-Za-z0-9!$%^*-]{1,20}", fullmatch=True),
       st.from_regex(r"[a-z0-9.]{1,15}(:[0-9]{1,5})?", fullmatch=True))
def test_url_passwords_are_masked(user, password, host):
    """user:password@ in a URL keeps the host and loses the password."""
    text = f"pip install --index-url https://{user}:{password}@{host}/simple pkg"
    out = redact_secret_values(text)
    assert f":{password}@" not in out and REDACTED in out and f"@{host}/simple" in out


_PIECES = st.sampled_from(["://", "@", "/", " ", "\n", "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----",
                           "hf_", "sk-", "ghp_", "mask-token", "a" * 20, "Z9" * 11, "https://u:p@h", "x:y", "_"])


@given(st.lists(_PIECES, max_size=14).map("".join))
def test_redaction_tried_only_where_a_secret_can_begin_equals_the_whole_text_substitution(text):
    """Redacting at each place a secret can begin gives what SECRET_VALUE.sub over the whole text gives."""
    from envdoctor.logsafe import SECRET_VALUE

    assert redact_secret_values(text) == SECRET_VALUE.sub(REDACTED, text)


# --- connect retry ------------------------------------------------------------------------


@given(st.integers(0, 8), st.floats(0.01, 5))
def test_retry_delays_grow_exponentially_with_bounded_jitter(retries, backoff):
    """Pause i lies between backoff*2^i and 1.5 times that, and there are exactly `retries` pauses."""
    delays = retry_delays(retries, backoff)
    assert len(delays) == retries
    for i, delay in enumerate(delays):
        assert backoff * 2**i <= delay <= 1.5 * backoff * 2**i


@given(st.one_of(st.none(), USER), HOST)
def test_destination_starting_with_a_dash_is_refused(user, host):
    """`-oProxyCommand=...`-shaped destinations never reach ssh: they are a ConfigError."""
    with pytest.raises(ConfigError, match="starts with '-'"):
        parse_destination("-" + (f"{user}@" if user else "") + host)
