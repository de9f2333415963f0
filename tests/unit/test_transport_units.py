"""Quoting, probe output parsing and secret redaction."""

from __future__ import annotations


import pytest

from envdoctor.errors import ProbeError, TransportError
from envdoctor.logsafe import redact, redact_text
from envdoctor.probe.program import build_program, parse_lines
from envdoctor.transport.interface import shell_join


def test_shell_join_refuses_nul():
    """A NUL byte cannot be passed to a shell and is refused, not truncated."""
    with pytest.raises(TransportError):
        shell_join(["a\x00b"])


def test_parse_lines_collects_sections_items_and_errors():
    """Probe lines become sections, streamed items and per-section errors; without the end marker
    the answer is incomplete, its whole lines kept."""
    lines = [b'{"section": "a", "item": 1}', b'{"section": "a", "data": {"x": 1}}', b'{"section": "b", "error": "boom"}', b'{"done": true}']
    out = parse_lines(lines)
    assert out.sections == {"a": {"x": 1}} and out.items == {"a": [1]} and out.errors == {"b": "boom"}
    assert out.complete
    torn = parse_lines(lines[:-1])
    assert not torn.complete and torn.sections == {"a": {"x": 1}} and torn.errors == {"b": "boom"}
    with pytest.raises(ProbeError, match="not JSON"):
        parse_lines([b"Welcome to Ubuntu!", *lines])


def test_probe_program_is_stdlib_only():
    """The program sent to hosts imports nothing outside the standard library."""
    import ast
    import sys

    tree = ast.parse(build_program(["host", "venvs"]))
    names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert names and names <= set(sys.stdlib_module_names)


def test_redaction_of_secrets():
    """Secret-named fields, private keys, tokens and URL passwords never reach a log line."""
    assert redact({"HF_TOKEN": "hf_abc", "path": "/x"}) == {"HF_TOKEN": "***", "path": "/x"}
    assert "hf_" not in redact_text("using hf_" + "a" * 30)
    assert "secretpw" not in redact_text("https://user:secretpw@mirror/simple")
    assert "MIIE" not in redact_text("-----BEGIN OPENSSH PRIVATE KEY-----\nMIIE\n-----END OPENSSH PRIVATE KEY-----")
    assert redact_text("WANDB_API_KEY=abc123 ok=1") == "WANDB_API_KEY=*** ok=1"


def test_a_probe_that_died_keeps_the_sections_it_sent():
    """A probe killed after some sections: those stand, each missing one becomes its own error
    naming how the probe ended, and all of them are unfinished; one that sent nothing is the
    host's ProbeError."""
    from envdoctor.probe.program import _ended_early
    from envdoctor.transport.interface import CommandResult

    killed = CommandResult(argv=("sh",), exit_status=-9, stdout=b"", stderr=b"<string>:1: SyntaxWarning: invalid escape")
    out = _ended_early(parse_lines([b'{"section": "host", "data": {"x": 1}}']), ["host", "venvs", "drift"], killed)
    assert out.sections == {"host": {"x": 1}}
    assert out.errors["venvs"].startswith("did not finish: the probe was killed (SIGKILL)")
    assert out.errors["drift"].startswith("not run: ") and "SyntaxWarning" not in out.errors["drift"]
    assert out.unfinished == ["venvs", "drift"]
    with pytest.raises(ProbeError, match="stopped before"):
        _ended_early(parse_lines([]), ["host"], killed)
