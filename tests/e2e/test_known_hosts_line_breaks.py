"""A real sshd and real `ssh` as the oracle: a known_hosts line that only str.splitlines()
would break (U+2028, form feed, \\x1c... inside a comment) trusts no key, for ssh nor for
envdoctor; a CRLF file and a comment holding such a character still trust the key they list."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_ssh_parity import env, host_key, reachable, server_b, ssh_connects, write_config  # noqa: F401

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(("known", "connects"), [
    ("# old note\u2028[127.0.0.1]:{B} {key_b}\n", False),
    ("# old note\x0c[127.0.0.1]:{B} {key_b}\n", False),
    ("# old note\x1c[127.0.0.1]:{B} {key_b}\n", False),
    ("[127.0.0.1]:{B}\x0b[127.0.0.1]:{B} {key_b}\n", False),
    ("[127.0.0.1]:{B} {key_b}\r\n", True),
    ("[127.0.0.1]:{B} {key_b} rotated\u2028 2026\n", True),
], ids=["u2028-comment", "formfeed-comment", "x1c-comment", "vt-in-host-field", "crlf", "u2028-key-comment"])
def test_known_hosts_lines_as_ssh_reads_them(run_cli, server_b, env, known: str, connects: bool):  # noqa: F811
    """envdoctor connects exactly when `ssh -o StrictHostKeyChecking=yes` does on the same file."""
    Path(env["kh"]).write_text(known.format(B=env["B"], key_b=host_key(server_b)), encoding="utf-8")
    config = write_config(env, "Host kb\n  HostName 127.0.0.1\n  Port {B}\n")
    assert ssh_connects(config, "kb") is connects, "the oracle"
    result, stderr = reachable(run_cli, config, "kb")
    if connects:
        assert result["status"] == "pass", (result, stderr)
    else:
        assert result["status"] == "error" and result["details"]["kind"] == "host-key", (result, stderr)
