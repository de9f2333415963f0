"""Every command that takes hosts reports every host, in every format: one reachable host (the
test sshd) beside one that refuses connections, and the run exits 1 with both in the report."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

DEAD = "nobody@127.0.0.1:9"  # the discard port: nothing listens, the connection is refused at once
PATCH = "speculators-tokenizer-trust-remote-code"


@pytest.fixture(scope="module")
def setup(sshd, venv_factory, tmp_path_factory) -> dict[str, Path]:
    model = tmp_path_factory.mktemp("model")
    (model / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
        "num_hidden_layers": 4, "vocab_size": 100}))
    return {"venv": venv_factory("two hosts"), "model": model, "ssh_config": sshd.ssh_config}


def command_args(command: str, setup: dict[str, Path]) -> list[str]:
    common = ["--ssh-config", str(setup["ssh_config"]), "--venv", str(setup["venv"]), "--timeout", "120"]
    return {
        "check": ["check", "ct200", DEAD, *common],
        "fix": ["fix", "ct200", DEAD, "--dry-run", "--require", "tiktoken", *common],
        "audit": ["audit", "ct200", DEAD, *common],
        "drift": ["drift", "ct200", DEAD, *common],
        "revert": ["revert", "ct200", DEAD, PATCH, *common],
        "facts": ["facts", "ct200", DEAD, "--model", str(setup["model"]), *common],
    }[command]


def hosts_in(command: str, fmt: str, text: str) -> list[str]:
    """The host names the report names, in its own format."""
    if fmt == "json":
        return [h["host"] for h in json.loads(text)["hosts"]]
    if fmt == "junit":
        return [suite.get("name") for suite in ET.fromstring(text).iter("testsuite")]
    return [name for name in ("ct200", DEAD) if name in text]


@pytest.mark.parametrize("fmt", ["text", "json", "junit"])
@pytest.mark.parametrize("command", ["check", "fix", "audit", "drift", "revert", "facts"])
def test_a_refused_host_is_reported_beside_a_reachable_one(run_cli, setup, command, fmt):
    """Both hosts appear in the report, the dead one with why, and the exit status is 1."""
    res = run_cli(*command_args(command, setup), "--format", fmt)
    assert res.exit_status == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert hosts_in(command, fmt, res.stdout) == ["ct200", DEAD], res.stdout + res.stderr
    assert "cannot reach" in res.stdout, res.stdout


def test_every_host_command_takes_parallel_and_timeout(run_cli):
    """The commands that take hosts all offer --parallel and --timeout."""
    for command in ("check", "fix", "audit", "drift", "revert", "facts", "run"):
        help_text = run_cli(command, "--help").stdout
        assert "--parallel" in help_text and "--timeout" in help_text, command
