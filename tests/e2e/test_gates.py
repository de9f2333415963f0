"""Gates a run can rely on, over the real sshd and real venvs: waivers, extras in use, GPU
expectations, arguments checked before any change, the JSON envelope, revert's answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_venv

pytestmark = pytest.mark.e2e

TOKENIZER_PATCH = "speculators-tokenizer-trust-remote-code"


@pytest.fixture(scope="module")
def spec_venv(tmp_path_factory) -> Path:
    """speculators 0.3.0 installed with --no-deps from PyPI: pip check finds its dependencies missing."""
    return make_venv(tmp_path_factory.mktemp("gates") / "spec venv", ["--no-deps", "speculators==0.3.0"])


def ssh_args(sshd, venv: Path) -> list[str]:
    return ["--ssh-config", str(sshd.ssh_config), "--venv", str(venv)]


def result_of(stdout: str, check_id: str) -> dict:
    host = json.loads(stdout)["hosts"][0]
    return next(r for r in host["results"] if r["id"] == check_id)


def test_skip_waives_a_failing_check_and_the_run_passes(run_cli, sshd, spec_venv):
    """packages.consistent fails (exit 1); --skip makes it `waived` with what it found, exit 0."""
    base = ["check", "ct200", *ssh_args(sshd, spec_venv), "--only", "packages.consistent", "-f", "json"]
    failing = run_cli(*base)
    assert failing.exit_status == 1, failing.stderr
    assert result_of(failing.stdout, "packages.consistent")["status"] == "fail"
    waived = run_cli(*base, "--skip", "packages.consistent=installed with --no-deps on purpose")
    assert waived.exit_status == 0, waived.stdout + waived.stderr
    result = result_of(waived.stdout, "packages.consistent")
    assert result["status"] == "waived"
    assert result["message"].startswith("waived (installed with --no-deps on purpose): fail: pip check:")
    assert result["details"]["waived_status"] == "fail"
    assert json.loads(waived.stdout)["exit_status"] == 0


def test_inventory_waivers_per_host_and_per_stage(run_cli, sshd, spec_venv, tmp_path):
    """skip = [{id, reason}] on a host waives for check; a stage's skip lets `run` start its command;
    a waiver naming no check is exit 2 before anything runs."""
    inventory = tmp_path / "envdoctor.toml"
    inventory.write_text(
        f'[hosts.trainer]\nssh = "ct200"\nvenv = {json.dumps(str(spec_venv))}\n'
        'skip = [{id = "packages.consistent", reason = "serving only"}]\n'
        '[hosts.plain]\nssh = "ct200"\n'
        f'venv = {json.dumps(str(spec_venv))}\n'
        '[stages.gen]\nhost = "plain"\nrequires = ["packages.consistent"]\n'
        'command = "{python} -c \\"print(123 * 2)\\""\nskip = ["packages.consistent"]\n')
    common = ["--config", str(inventory), "--ssh-config", str(sshd.ssh_config)]
    checked = run_cli("check", "trainer", *common, "--only", "packages.consistent", "-f", "json")
    assert checked.exit_status == 0, checked.stdout + checked.stderr
    assert result_of(checked.stdout, "packages.consistent")["message"].startswith("waived (serving only): fail:")
    plain = run_cli("check", "plain", *common, "--only", "packages.consistent", "-f", "json")
    assert plain.exit_status == 1  # the waiver is the host's, not the fleet's
    ran = run_cli("run", "plain", "gen", *common)
    assert ran.exit_status == 0, ran.stdout + ran.stderr
    assert "246" in ran.stdout
    typo = run_cli("check", "plain", *common, "--skip", "packages.consistant")
    assert typo.exit_status == 2
    assert "no check named 'packages.consistant' to waive" in typo.stderr and "Traceback" not in typo.stderr


def test_extra_whose_packages_are_there_for_others_agrees_with_pip_check(run_cli, sshd, tmp_path):
    """setuptools 47.1.0 pins certifi==2016.9.26 under its `certs` extra; beside requests (which
    needs a new certifi) pip check passes, and so does the check: no downgrade is asked for."""
    venv = make_venv(tmp_path / "old setuptools", ["setuptools==47.1.0", "requests"])
    oracle = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "check"], capture_output=True, text=True)
    assert oracle.returncode == 0, oracle.stdout
    res = run_cli("check", "ct200", *ssh_args(sshd, venv), "--only", "packages.consistent", "-f", "json")
    result = result_of(res.stdout, "packages.consistent")
    assert result["status"] == "pass" and result["details"]["extras"] == [], result
    assert res.exit_status == 0


def test_extra_in_use_outside_its_pin_fails_apart_from_pip_check(run_cli, sshd, spec_venv):
    """speculators 0.3.0 [datagen] pins vllm==0.11.0: a vllm 0.16.0 beside it fails on a line of its
    own, while pip check's verdict (which ignores extras) says nothing about vllm; 0.11.0 passes it."""
    site = next(spec_venv.glob("lib/python3*/site-packages"))
    fake = site / "vllm-0.16.0.dist-info"
    fake.mkdir()
    try:
        (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0\n")
        res = run_cli("check", "ct200", *ssh_args(sshd, spec_venv), "--only", "packages.consistent", "-f", "json")
        result = result_of(res.stdout, "packages.consistent")
        lines = result["message"].split("\n")
        assert lines[0].startswith("pip check: ") and "vllm" not in lines[0]
        assert "extras in use: speculators 0.3.0 [datagen] requires vllm==0.11.0; 0.16.0 is installed" in lines
        assert result["details"]["extras"] == [{"distribution": "speculators", "version": "0.3.0",
                                                "requirement": "vllm==0.11.0", "name": "vllm",
                                                "installed": "0.16.0", "extra": "datagen"}]
        assert not any("vllm" in line for line in result["details"]["pip_check"]["lines"])
        (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.11.0\n")
        again = run_cli("check", "ct200", *ssh_args(sshd, spec_venv), "--only", "packages.consistent", "-f", "json")
        assert result_of(again.stdout, "packages.consistent")["details"]["extras"] == []
    finally:
        for item in fake.iterdir():
            item.unlink()
        fake.rmdir()


def fake_nvidia_smi(folder: Path, body: str) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return {"PATH": f"{folder}:{os.path.dirname(sys.executable)}:/usr/bin:/bin"}


TWO_GPUS = 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)"; echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-b)"'


@pytest.mark.parametrize(("body", "expected", "status", "exit_status"), [
    (None, None, "skipped", 0),
    (None, "1", "fail", 1),
    (TWO_GPUS, None, "pass", 0),
    (TWO_GPUS, "2", "pass", 0),
    (TWO_GPUS, "4", "fail", 1),
    ('echo "Failed to initialize NVML: Driver/library version mismatch"; exit 18', None, "warn", 0),
    ('echo "Failed to initialize NVML: Driver/library version mismatch"; exit 18', "2", "fail", 1),
])
def test_gpu_expectation_gates_the_node(run_cli, tmp_path, body, expected, status, exit_status):
    """With --gpus N, host.gpu fails on no driver, a failing nvidia-smi or fewer GPUs; without, it informs."""
    env = fake_nvidia_smi(tmp_path / "bin", body) if body else {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin"}
    args = ["check", "local", "--only", "host.gpu", "-f", "json"] + (["--gpus", expected] if expected else [])
    res = run_cli(*args, env=env)
    assert res.exit_status == exit_status, res.stdout + res.stderr
    result = result_of(res.stdout, "host.gpu")
    assert result["status"] == status, result
    if status == "fail":
        assert f"{expected} GPU(s) expected" in result["message"]


def test_unwritable_output_is_refused_before_fix_changes_anything(run_cli, venv_factory, tmp_path):
    """fix with an --output that cannot be written exits 2 and installs nothing; a missing folder is created."""
    venv = venv_factory("output gate")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    res = run_cli("fix", "local", "--venv", str(venv), "--require", "six", "--output", str(blocker / "fix.json"))
    assert res.exit_status == 2
    assert "is not a folder" in res.stderr and "Traceback" not in res.stderr
    assert not list(venv.glob("lib/python3*/site-packages/six*"))
    folder_as_output = run_cli("check", "local", "--only", "host.reachable", "--output", str(tmp_path))
    assert folder_as_output.exit_status == 2 and "is a folder" in folder_as_output.stderr
    report = tmp_path / "new" / "deeper" / "check.json"
    made = run_cli("check", "local", "--only", "host.reachable", "-f", "json", "--output", str(report))
    assert made.exit_status == 0, made.stderr
    assert json.loads(report.read_text())["command"] == "check"


def test_venv_that_is_a_file_or_not_a_venv_says_exactly_that(run_cli, sshd, tmp_path):
    """--venv naming a file, or a folder without pyvenv.cfg and bin/python, is named as such."""
    a_file = tmp_path / "venv.txt"
    a_file.write_text("")
    a_folder = tmp_path / "just a folder"
    a_folder.mkdir()
    for path, words in ((a_file, "is a file, not a virtualenv folder"),
                        (a_folder, "is a folder but not a virtualenv: no pyvenv.cfg")):
        res = run_cli("check", "ct200", *ssh_args(sshd, path), "--only", "python.venv", "-f", "json")
        assert res.exit_status == 1
        assert words in result_of(res.stdout, "python.venv")["message"]


def test_disk_names_the_filesystems_of_venv_and_model(run_cli, sshd, venv_factory, tmp_path):
    """host.disk says on which filesystem the venv and the model live, with the free space there."""
    venv = venv_factory("disk venv")
    model = tmp_path / "model"
    model.mkdir()
    res = run_cli("check", "ct200", *ssh_args(sshd, venv), "--model", str(model), "--only", "host.disk", "-f", "json")
    result = result_of(res.stdout, "host.disk")
    holds = [h for fs in result["details"]["filesystems"] for h in fs["holds"]]
    assert f"venv {venv}" in holds and f"model {model}" in holds
    assert f"venv {venv}" in result["message"] and "GiB free" in result["message"]


def envelope_ok(res, command: str) -> dict:
    data = json.loads(res.stdout)
    assert data["schema"] == 1 and data["command"] == command, data
    assert data["exit_status"] == res.exit_status
    return data


def test_every_command_json_has_the_envelope(run_cli, sshd, spec_venv, tmp_path):
    """check, fix, audit, scan, facts, revert, checks, patches list/show and run --detach all carry
    schema, command and exit_status (equal to the process's exit status)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
                                                   "hidden_size": 64, "num_hidden_layers": 8, "vocab_size": 1000}))
    remote = ssh_args(sshd, spec_venv)
    envelope_ok(run_cli("check", "ct200", *remote, "--only", "host.python", "-f", "json"), "check")
    envelope_ok(run_cli("fix", "ct200", *remote, "--only", "host.python", "--dry-run", "-f", "json"), "fix")
    envelope_ok(run_cli("audit", "ct200", *remote, "-f", "json"), "audit")
    envelope_ok(run_cli("scan", str(next(spec_venv.glob("lib/python3*/site-packages/speculators"))), "-f", "json"),
                "scan")
    envelope_ok(run_cli("facts", "ct200", *remote, "--model", str(model), "-f", "json"), "facts")
    envelope_ok(run_cli("revert", "ct200", TOKENIZER_PATCH, *remote, "-f", "json"), "revert")
    assert envelope_ok(run_cli("checks", "-f", "json"), "checks")["checks"][0]["id"] == "host.reachable"
    listed = envelope_ok(run_cli("patches", "list", "-f", "json"), "patches list")
    assert "trust-remote-code" in [p["id"] for p in listed["patches"]]
    envelope_ok(run_cli("patches", "show", "trust-remote-code", "-f", "json"), "patches show")
    inventory = tmp_path / "envdoctor.toml"
    inventory.write_text(f'[hosts.h]\nssh = "ct200"\nvenv = {json.dumps(str(spec_venv))}\n'
                         '[stages.bg]\ncommand = "{python} -c pass"\n')
    detached = envelope_ok(run_cli("run", "h", "bg", "--config", str(inventory), "--ssh-config", str(sshd.ssh_config),
                                   "--detach", "-f", "json"), "run")
    assert isinstance(detached["pid"], int) and detached["log"]


def test_revert_unknown_patch_is_usage_error_and_second_revert_says_already(run_cli, sshd, tmp_path):
    """An unknown PATCH is exit 2 before connecting; reverting a reverted patch says so and changes nothing."""
    venv = make_venv(tmp_path / "revert venv", ["--no-deps", "speculators==0.3.0"])
    remote = ssh_args(sshd, venv)
    unknown = run_cli("revert", "ct200", "no-such-patch", *remote)
    assert unknown.exit_status == 2 and "no patch named 'no-such-patch'" in unknown.stderr
    fixed = run_cli("fix", "ct200", *remote, "--trust-remote-code", "--only", f"patch.{TOKENIZER_PATCH}", "-f", "json")
    assert fixed.exit_status == 0, fixed.stdout + fixed.stderr
    first = run_cli("revert", "ct200", TOKENIZER_PATCH, *remote)
    assert first.exit_status == 0, first.stdout + first.stderr
    target = next(venv.glob("lib/python3*/site-packages/speculators/data_generation/vllm_hidden_states_generator.py"))
    before = target.read_bytes()
    second = run_cli("revert", "ct200", TOKENIZER_PATCH, *remote, "-f", "json")
    assert second.exit_status == 0, second.stdout + second.stderr
    host = envelope_ok(second, "revert")["hosts"][0]
    assert "was already reverted" in host["note"] and host["files"] == []
    assert target.read_bytes() == before
    assert "already reverted" in run_cli("revert", "ct200", TOKENIZER_PATCH, *remote).stdout


@pytest.mark.parametrize("args", [["checks"], ["patches", "list"], ["patches", "show", "trust-remote-code"],
                                  ["scan", "{here}"], ["check", "local", "--only", "host.reachable"]])
def test_verbose_logs_on_every_command(run_cli, args):
    """-v makes every command log what it was asked to stderr; without -v it logs nothing."""
    args = [a.replace("{here}", str(Path(__file__).parent)) for a in args]
    loud = run_cli("-v", *args)
    assert "command" in loud.stderr and f"envdoctor {args[0]}" in loud.stderr, loud.stderr
    quiet = run_cli(*args)
    assert "[info" not in quiet.stderr


def test_bad_host_or_config_is_exit_2_before_any_host_is_changed(run_cli, venv_factory, tmp_path):
    """fix over a good host and a name that resolves to nothing, or with a missing --config, exits 2
    and installs nothing on the good host."""
    venv = venv_factory("resolve gate")
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("Host gpu-*\n    User root\n")
    typo = run_cli("fix", "local", "no-such-host-xyz", "--venv", str(venv), "--require", "six",
                   "--ssh-config", str(ssh_config))
    assert typo.exit_status == 2, typo.stdout + typo.stderr
    assert "unknown host 'no-such-host-xyz'" in typo.stderr
    missing_config = run_cli("fix", "local", "--venv", str(venv), "--require", "six",
                             "--config", str(tmp_path / "nope.toml"))
    assert missing_config.exit_status == 2 and "nope.toml" in missing_config.stderr
    assert not list(venv.glob("lib/python3*/site-packages/six*"))
