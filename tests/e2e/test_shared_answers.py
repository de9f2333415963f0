"""Hosts that send byte-identical answer lines share one decoding; any other line is decoded on its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from envdoctor.probe import shared_answers
from envdoctor.engine.facts import HostFacts
from envdoctor.operations.gather import build_request
from envdoctor.inventory import HostSpec
from envdoctor.probe.program import build_program, encode_stdin, parse_lines, probe_command
from envdoctor.probe.schema import section_problems


@pytest.fixture(scope="module")
def answer() -> bytes:
    """The real probe's host and venvs answer on this machine."""
    spec = HostSpec("local", None)
    request = build_request(spec, ["host", "venvs"])
    stdin = encode_stdin({"sections": request}, build_program(request))
    return subprocess.run(probe_command([sys.executable]), input=stdin, capture_output=True, timeout=120,
                          check=True).stdout


def facts_of(raw: bytes) -> HostFacts:
    output = parse_lines(bytes(raw).splitlines())  # a new bytes object, as each host's own
    assert section_problems(output.sections, output.items, output.errors) == []
    return HostFacts.from_probe(output)


def test_identical_lines_share_their_environments(answer):
    """Two hosts with the same venvs line get the same Environment objects, equal to a fresh decoding."""
    shared_answers.clear()
    first, second = facts_of(answer), facts_of(answer)
    assert first.default_env is second.default_env
    assert all(a is b for a, b in zip(first.envs, second.envs))
    shared_answers.clear()
    fresh = facts_of(answer)
    assert fresh.default_env == first.default_env and fresh.envs == first.envs
    assert fresh.default_env is not first.default_env


def test_a_line_that_differs_in_one_byte_is_decoded_on_its_own(answer):
    """A host whose venvs line differs (one version string) gets its own facts, never another host's."""
    shared_answers.clear()
    first = facts_of(answer)
    dist = first.default_env.distributions[0]
    assert dist.version
    changed = answer.replace(f'"version": "{dist.version}"'.encode(), b'"version": "0.0.0.dev9"', 1)
    assert changed != answer
    other = facts_of(changed)
    assert other.default_env is not first.default_env
    assert other.default_env.distributions[0].version == "0.0.0.dev9"
    assert facts_of(answer).default_env is first.default_env


def test_a_malformed_shared_line_is_reported_for_every_host(answer):
    """A venvs line of the wrong shape is refused for each host that sends it, not only the first."""
    shared_answers.clear()
    line = next(x for x in answer.splitlines() if b'"section": "venvs"' in x)
    record = json.loads(line)
    record["data"]["configured"] = [7]
    bad = json.dumps(record).encode()
    assert len(bad) >= shared_answers.MIN_BYTES
    for _ in range(2):
        output = parse_lines([bad, b'{"done": true}'])
        problems = section_problems(output.sections, output.items, output.errors)
        assert problems and "configured" in problems[0]
