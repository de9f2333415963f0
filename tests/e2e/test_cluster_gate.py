"""`envdoctor check local` as a node-local gate: the Slurm prolog and the Kubernetes init container of docs/."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e

DOCS = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.fixture(scope="module")
def envdoctor_program(tmp_path_factory) -> str:
    """The installed `envdoctor` program, by absolute path, as a prolog must name it."""
    beside = Path(sys.executable).parent / "envdoctor"
    found = str(beside) if beside.exists() else shutil.which("envdoctor")
    if found:
        return found
    wrapper = tmp_path_factory.mktemp("bin") / "envdoctor"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m envdoctor "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.fixture(scope="module")
def job_venv(venv_factory) -> Path:
    """The job's venv on the node: has pip, lacks tiktoken."""
    return venv_factory("job venv")


def gate_env(test_env: dict[str, str], **extra: str) -> dict[str, str]:
    """What a scheduler gives a prolog: a minimal PATH, no HOME, no SSH agent, no terminal."""
    keep = {k: test_env[k] for k in ("HF_HUB_OFFLINE", "HF_HOME", "TIKTOKEN_CACHE_DIR") if k in test_env}
    return {"PATH": "/usr/bin:/bin", **keep, **extra}


def run_gate(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # A new session has no controlling terminal; stdin is closed, as under slurmd and the kubelet.
    return subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          start_new_session=True, timeout=300)


def prolog(test_env, program, venv, tmp_path, args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    report = tmp_path / "log" / "job-42.json"
    env = gate_env(test_env, ENVDOCTOR=program, ENVDOCTOR_VENV=str(venv), ENVDOCTOR_ARGS=args,
                   ENVDOCTOR_REPORT=str(report), SLURM_JOB_ID="42")
    return run_gate(["/bin/sh", str(DOCS / "slurm-prolog.sh")], env, tmp_path), report


def test_prolog_lets_the_job_start_on_a_ready_node(test_env, envdoctor_program, job_venv, tmp_path):
    """The prolog exits 0 and leaves a JSON report of this machine when the venv has what the job needs."""
    res, report = prolog(test_env, envdoctor_program, job_venv, tmp_path, "--require pip")
    assert res.returncode == 0, res.stderr
    host = json.loads(report.read_text())["hosts"][0]
    assert host["destination"] == "this machine" and host["ok"] is True
    assert "Traceback" not in res.stderr


def test_prolog_drains_a_node_that_lacks_a_package(test_env, envdoctor_program, job_venv, tmp_path):
    """A missing package makes the prolog exit 1 with a one-line reason and the report naming the check."""
    res, report = prolog(test_env, envdoctor_program, job_venv, tmp_path, "--require tiktoken")
    assert res.returncode == 1
    assert "is not ready for job 42" in res.stderr
    results = {r["id"]: r for r in json.loads(report.read_text())["hosts"][0]["results"]}
    assert results["packages.required"]["status"] == "fail"


def test_prolog_reports_its_own_misconfiguration_as_exit_2(test_env, envdoctor_program, job_venv, tmp_path):
    """A bad requirement in the prolog's settings is exit 2 (the gate is wrong), not a node problem."""
    res, _ = prolog(test_env, envdoctor_program, job_venv, tmp_path, "--require tiktoken>>1")
    assert res.returncode == 2
    assert "gate itself failed" in res.stderr
    assert "Traceback" not in res.stderr


def test_init_container_command_from_the_docs_gates_the_pod(test_env, envdoctor_program, job_venv, tmp_path):
    """The init container's command in docs/ runs as written (paths swapped for the test's) with only its env."""
    pod = yaml.safe_load((DOCS / "k8s-init-container.yaml").read_text())
    container = pod["spec"]["initContainers"][0]
    assert container["tty"] is False and container["stdin"] is False
    argv = list(container["command"])
    argv[0] = envdoctor_program
    argv[argv.index("--venv") + 1] = str(job_venv)
    model = argv.index("--model")
    del argv[model:model + 2]  # the test node has no Kimi checkpoint; model checks have their own tests
    env = gate_env(test_env, **{e["name"]: e["value"] for e in container["env"]})
    res = run_gate(argv, env, tmp_path)
    assert res.returncode == 1  # tiktoken is missing from the job venv
    data = json.loads(res.stdout)  # stdout is the report alone: the kubelet logs it as is
    assert data["exit_status"] == 1
    assert data["hosts"][0]["destination"] == "this machine"
    # The same gate passes once the requirement is met (the status is not stuck at 1).
    argv[argv.index("--require") + 1] = "pip"
    assert run_gate(argv, env, tmp_path).returncode == 0
    assert "HOME" not in env and "SSH_AUTH_SOCK" not in env
