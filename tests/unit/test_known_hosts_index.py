"""The known_hosts index answers exactly as matching every line's patterns in turn does."""

from __future__ import annotations

import base64
import hashlib
import hmac

from hypothesis import given, settings
from hypothesis import strategies as st

from envdoctor.transport import known_hosts
from envdoctor.transport.known_hosts import KnownHostsFile, KnownKey, patterns_match

NAMES = ["gpu1", "GPU1", "gpu2", "[gpu1]:2222", "10.0.0.1", "bastion", "g", ""]
PATTERNS = NAMES + ["gpu*", "!gpu2", "*", "?pu1", "[gpu1]:*", "!*", "GPU?"]


def hashed(name: str, salt: bytes) -> str:
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def linear(entries, name):
    """The lookup without an index: every non-revoked line's patterns, in file order."""
    return [(m, k) for m, patterns, k in entries if m != "revoked" and patterns_match(patterns, name)]


field = st.one_of(
    st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=3).map(",".join),
    st.tuples(st.sampled_from(NAMES), st.binary(min_size=20, max_size=20)).map(lambda t: hashed(t[0].lower(), t[1])),
)
line = st.tuples(st.sampled_from(["", "cert-authority", "revoked"]), field)


@settings(max_examples=400, deadline=None)
@given(st.lists(line, max_size=12), st.sampled_from(NAMES))
def test_index_matches_the_linear_scan(lines, name):
    """Lookups through the index return the lines a pattern-by-pattern scan returns, in file order."""
    entries = [(m, p, KnownKey(m, "ssh-ed25519", bytes([i]), f"f:{i}")) for i, (m, p) in enumerate(lines)]
    indexed = KnownHostsFile.of(entries)
    assert indexed.matching(name) == linear(entries, name)
    assert list(indexed.revoked) == [k for m, _, k in entries if m == "revoked"]


def test_host_keys_reads_a_real_file_through_the_index(tmp_path):
    """host_keys finds plain, wildcard and hashed lines of a written file and every @revoked key."""
    key = base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519" + b"k" * 36).decode()
    path = tmp_path / "known_hosts"
    path.write_text(
        f"gpu1,gpu2 ssh-ed25519 {key}\n"
        f"gpu* ssh-ed25519 {key}\n"
        f"{hashed('gpu1', b's' * 20)} ssh-ed25519 {key}\n"
        f"@revoked other ssh-ed25519 {key}\n"
        f"gpu1,!gpu1 ssh-ed25519 {key}\n"
    )
    keys = known_hosts.host_keys([str(path)], "gpu1")
    assert [k.where.rsplit(":", 1)[1] for k in keys.trusted] == ["1", "2", "3"]
    assert len(keys.revoked) == 1
    assert known_hosts.host_keys([str(path)], "gpu3").trusted[0].where.endswith(":2")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=100), st.binary(max_size=40))
def test_hmac_with_precomputed_key_blocks_is_hmac_sha1(key, message):
    """The lookup's HMAC-SHA1 (key blocks hashed once) equals the standard library's, keys longer than a block included."""
    assert known_hosts._HmacSha1(key).digest(message) == hmac.digest(key, message, "sha1")
