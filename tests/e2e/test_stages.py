"""`envdoctor run HOST STAGE` over the real sshd: checks first, then the command, streamed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kimi_fixture import FIRST_RESERVED, build_kimi

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stage_setup(tmp_path_factory, venv_factory, sshd) -> dict[str, Path]:
    """A bare venv, a Kimi-shaped model and an inventory with stages on host `trainer` (alias ct200)."""
    root = tmp_path_factory.mktemp("stages")
    venv = venv_factory("stage venv")
    model = build_kimi(root / "Kimi K2.6", mark=root / "MARK")
    go, stop = root / "go", root / "stop"
    waits = ("import os, sys, time\n"
             "print('ready', flush=True)\n"
             "deadline = time.time() + 60\n"
             "while not os.path.exists(sys.argv[1]) and time.time() < deadline: time.sleep(0.05)\n"
             "print('done')")
    stages = {
        "gen": (["python.venv", "model.config"],
                "{python} -c 'import sys; print(sys.executable); print(sys.argv[1:]); sys.exit(3)' "
                "{model} {mask_token_id_candidate} {dflash_target_layer_ids} {eagle3_target_layer_ids}"),
        "needs-tiktoken": (["model.code-imports"], "echo should-not-run"),
        "typo": ([], "echo {mask_id}"),
        "unknown-check": (["model.nope"], "echo x"),
        "mask": ([], "echo {mask_token_id}"),
        "stream": (["python.venv"], '{python} -c "' + waits + '" ' + str(go)),
        "interruptible": (["python.venv"], '{python} -c "' + waits + '" ' + str(root / "never")),
        "background": (["python.venv"], '{python} -c "' + waits.replace("ready", "started") + '" ' + str(stop)),
    }
    # JSON strings are valid TOML basic strings: no hand-escaping of quotes and newlines.
    lines = ["[hosts.trainer]", 'ssh = "ct200"', f"venv = {json.dumps(str(venv))}",
             f"models = [{json.dumps(str(model))}]"]
    for name, (requires, command) in stages.items():
        lines += [f"[stages.{json.dumps(name)}]", 'host = "trainer"', f"requires = {json.dumps(requires)}",
                  f"command = {json.dumps(command)}"]
    inventory = root / "envdoctor.toml"
    inventory.write_text("\n".join(lines) + "\n")
    return {"root": root, "venv": venv, "model": model, "inventory": inventory, "go": go, "stop": stop}


def cli_args(sshd, setup, *args: str) -> list[str]:
    return ["run", *args, "--config", str(setup["inventory"]), "--ssh-config", str(sshd.ssh_config)]


def test_stage_runs_with_venv_python_and_fact_placeholders(run_cli, sshd, stage_setup):
    """The command runs with the venv's absolute python, placeholders filled, and its exit status returned."""
    res = run_cli(*cli_args(sshd, stage_setup, "trainer", "gen", "--draft-layers", "6"))
    assert res.exit_status == 3, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == str(stage_setup["venv"] / "bin" / "python")
    assert lines[1] == str([str(stage_setup["model"]), str(FIRST_RESERVED), "1,12,24,35,47,58", "2,30,58"])


def test_stage_refused_when_a_required_check_fails(run_cli, sshd, stage_setup):
    """A failing required check refuses the stage, names the check, and runs nothing."""
    res = run_cli(*cli_args(sshd, stage_setup, "trainer", "needs-tiktoken", "--format", "json"))
    assert res.exit_status == 1
    assert "failing checks: model.code-imports" in res.stderr
    assert "should-not-run" not in res.stdout
    assert '"model.code-imports"' in res.stdout


@pytest.mark.parametrize("stage, words", [
    ("typo", "unknown placeholder {mask_id}"),
    ("unknown-check", "model.nope"),
    ("no-such-stage", "no stage named"),
])
def test_stage_usage_errors_exit_2(run_cli, sshd, stage_setup, stage, words):
    """An unknown placeholder, check or stage is a one-line usage error (exit 2), before anything runs."""
    res = run_cli(*cli_args(sshd, stage_setup, "trainer", stage))
    assert res.exit_status == 2, res.stdout + res.stderr
    assert words in res.stderr and "Traceback" not in res.stderr


def test_missing_fact_refuses(run_cli, sshd, stage_setup):
    """{mask_token_id} on a tokenizer without a mask token is refused with exit 1, never 'None'."""
    res = run_cli(*cli_args(sshd, stage_setup, "trainer", "mask"))
    assert res.exit_status == 1 and "{mask_token_id}" in res.stderr and "None" not in res.stdout


def test_output_streams_while_the_command_runs(sshd, stage_setup, test_env):
    """The first line arrives while the command still runs (it waits for a file the test creates after reading it)."""
    proc = subprocess.Popen([sys.executable, "-m", "envdoctor", *cli_args(sshd, stage_setup, "trainer", "stream")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=test_env, text=True)
    try:
        first = proc.stdout.readline()
        assert first.strip() == "ready"
        assert proc.poll() is None
        stage_setup["go"].touch()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.strip() == "done"


def wait_for_text(path: Path, text: str, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return True
        time.sleep(0.05)  # a poll interval for the detached process's output
    return False


def test_detach_prints_pid_and_log(run_cli, sshd, stage_setup):
    """--detach returns at once with pid and log path while the command goes on under nohup."""
    res = run_cli(*cli_args(sshd, stage_setup, "trainer", "background", "--detach"))
    assert res.exit_status == 0, res.stderr
    fields = dict(line.split(" ", 1) for line in res.stdout.splitlines())
    pid, log = int(fields["pid"]), Path(fields["log"])
    assert log.parent == Path.home() / ".cache" / "envdoctor" / "logs"  # private to the user, whatever the venv
    assert wait_for_text(log, "started")
    os.kill(pid, 0)  # still running after envdoctor and its SSH session ended
    assert "done" not in log.read_text()
    stage_setup["stop"].touch()
    assert wait_for_text(log, "done")


def running_with(marker: str) -> list[int]:
    """Pids of processes whose command line mentions marker."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode("utf-8", "replace"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_ctrl_c_stops_the_remote_command(sshd, stage_setup, test_env):
    """Interrupting `envdoctor run` stops the command on the host too, not only the local client."""
    marker = str(stage_setup["root"] / "never")
    proc = subprocess.Popen([sys.executable, "-m", "envdoctor", *cli_args(sshd, stage_setup, "trainer", "interruptible")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=test_env, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert running_with(marker)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    deadline = time.monotonic() + 30
    while running_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)  # a poll interval while the host's process ends
    assert not running_with(marker)
