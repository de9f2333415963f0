"""The cluster gate under a real Slurm (tests/slurm.py): docs/examples/slurm-prolog.sh as the
Prolog (PrologFlags=Alloc) and docs/examples/slurm-healthcheck.sh as the HealthCheckProgram,
configured only by ENVDOCTOR, ENVDOCTOR_VENV, ENVDOCTOR_ARGS, ENVDOCTOR_GPUS, ENVDOCTOR_REPORT
and ENVDOCTOR_TIMEOUT, with batch jobs submitted as a user submits them."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import uv_executable
from tests.e2e.test_cluster_gate import envdoctor_program  # noqa: F401  # (a fixture, used by name)
from tests.slurm import SlurmCluster, can_start, start_slurm

pytestmark = pytest.mark.e2e

DOCS = Path(__file__).resolve().parents[2] / "docs" / "examples"
#: Slurm's HealthCheckInterval here: short, so that a test waits seconds for the next run.
INTERVAL = 5


@dataclass
class Gate:
    """The cluster, and the node's envdoctor settings that its prolog and health check read."""

    cluster: SlurmCluster
    root: Path
    reports: Path
    program: str

    def configure(self, venv: Path, args: str = "", gpus: str = "", timeout: str = "", **more: str) -> None:
        """What a site writes into the scripts' first lines (here: a file the wrappers read)."""
        settings = {"ENVDOCTOR": self.program, "ENVDOCTOR_VENV": str(venv), "ENVDOCTOR_ARGS": args,
                    "ENVDOCTOR_GPUS": gpus, **more}
        if timeout:
            settings["ENVDOCTOR_TIMEOUT"] = timeout
        lines = [f"export {k}={shlex.quote(v)}" for k, v in settings.items()]
        (self.root / "settings.env").write_text("\n".join(lines) + "\n")

    def health(self, on: bool) -> None:
        """Let slurmd's HealthCheckProgram run the shipped script (it does nothing while off)."""
        flag = self.root / "health.on"
        flag.touch() if on else flag.unlink(missing_ok=True)

    def wait_health_runs(self, count: int = 2) -> None:
        """Wait until ``count`` more runs have started and ended (each saw what was set before)."""
        log = self.root / "health.log"
        seen = log.read_text().count("start") if log.exists() else 0
        self.cluster.wait_for(f"{count} health check runs",
                              lambda: log.exists() and _ended_after(log.read_text(), seen, count),
                              timeout=INTERVAL * (count + 1) + 60)

    def run_job(self, script: str = "echo job ran") -> str:
        out = self.root / "job-%j.out"
        return self.cluster.submit(f"#!/bin/sh\n{script}\n", "-o", str(out), "-J", "gate-test")

    def job_output(self, job_id: str) -> str:
        path = self.root / f"job-{job_id}.out"
        return path.read_text() if path.exists() else ""

    def report(self, job_id: str) -> dict:
        return json.loads((self.reports / f"job-{job_id}.json").read_text())

    def wait_state(self, what: str, predicate, timeout: float = 90) -> tuple[str, str]:
        """Poll the node's (state, reason) until ``predicate(state, reason)``; returns them."""
        def matching() -> tuple[str, str] | None:
            state = self.cluster.node_state()
            return state if predicate(*state) else None

        return self.cluster.wait_for(what, matching, timeout=timeout)

    def wait_job(self, job_id: str, states: tuple[str, ...], timeout: float = 90) -> dict[str, str]:
        """Poll the job until its JobState is one of ``states``; returns its fields."""
        def matching() -> dict[str, str] | None:
            fields = self.cluster.job(job_id)
            return fields if fields.get("JobState") in states else None

        return self.cluster.wait_for(f"job {job_id} {'/'.join(states)}", matching, timeout=timeout)

    def reset(self) -> None:
        self.health(False)
        self.cluster.cancel_all()
        state, _ = self.cluster.node_state()
        if state.startswith(("drain", "down")):
            self.cluster.set_node("RESUME")
        self.wait_state("the node idle", lambda s, r: s == "idle")


def _ended_after(text: str, seen_starts: int, count: int) -> bool:
    """``count`` runs started after the first ``seen_starts`` have ended."""
    events = text.split()
    starts = ends = 0
    for event in events:
        if event == "start":
            starts += 1
        elif event == "end" and starts > seen_starts:
            ends += 1
    return ends >= count


def wrapper(path: Path, root: Path, script: str, *, report: str, extra: str = "", gate: str = "") -> Path:
    """What a site installs: the shipped script, its settings in the environment (Slurm gives
    a prolog and a health check none of ours)."""
    path.write_text(f"""#!/bin/sh
{gate}
. {shlex.quote(str(root / 'settings.env'))}
export ENVDOCTOR_REPORT="{report}"
{extra}
/bin/sh {shlex.quote(str(DOCS / script))}
""")
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def gate(tmp_path_factory, envdoctor_program) -> Iterator[Gate]:  # noqa: F811  # (the fixture imported above)
    if why := can_start():
        pytest.skip(f"no private Slurm on this machine: {why}")
    root = tmp_path_factory.mktemp("slurm-gate")
    reports = root / "reports"
    log = shlex.quote(str(root / "health.log"))
    prolog = wrapper(root / "prolog.sh", root, "slurm-prolog.sh", report=f"{reports}/job-$SLURM_JOB_ID.json")
    # Slurm's health check gets no SLURM_CONF: a site's scontrol reads /etc/slurm, ours is private.
    health = wrapper(root / "health.sh", root, "slurm-healthcheck.sh", report=f"{reports}/health.json",
                     gate=f"[ -f {shlex.quote(str(root / 'health.on'))} ] || exit 0\necho start >> {log}",
                     extra=f"export SLURM_CONF={shlex.quote(str(root / 'cluster' / 'slurm.conf'))}")
    health.write_text(health.read_text() + f"status=$?\necho \"end $status\" >> {log}\nexit $status\n")
    cluster = start_slurm(root / "cluster", prolog=prolog, health_check=health, health_interval=INTERVAL)
    try:
        yield Gate(cluster, root, reports, envdoctor_program)
    finally:
        cluster.stop()


def install(venv: Path, package: str) -> None:
    subprocess.run([uv_executable(), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
                    "--link-mode=copy", package], check=True)


def test_a_ready_node_runs_the_job(gate, venv_factory):
    """The prolog lets the job start on a ready node and leaves its JSON report there."""
    gate.reset()
    gate.configure(venv_factory("ready venv"), args="--require pip")
    job = gate.run_job()
    gate.wait_job(job, ("COMPLETED",))
    assert "job ran" in gate.job_output(job)
    host = gate.report(job)["hosts"][0]
    assert host["ok"] is True and host["timed_out"] is False
    assert gate.wait_state("the node idle again", lambda s, r: s == "idle" or s.startswith("drain"))[1] == "none"


def test_a_job_venv_without_a_package_is_drained_and_resumed_once_fixed(gate, venv_factory):
    """--require tiktoken on a venv without it: the prolog drains ("Prolog error") and the job waits
    held; the health check explains the drain from the prolog's report with an envdoctor: reason,
    and resumes the node once tiktoken is installed; the released job then runs."""
    gate.reset()
    venv = venv_factory("venv without tiktoken")
    gate.configure(venv, args="--require tiktoken")
    job = gate.run_job()
    _, reason = gate.wait_state("the prolog drained the node", lambda s, r: s.startswith("drain"))
    assert reason == "Prolog error"
    held = gate.wait_job(job, ("PENDING",))
    assert "held" in held["Reason"].lower() or held["Reason"] == "launch_failed_requeued_held"
    assert gate.report(job)["hosts"][0]["timed_out"] is False

    gate.health(True)
    _, reason = gate.wait_state("the health check explained the drain", lambda s, r: r.startswith("envdoctor:"))
    assert reason == f"envdoctor: packages.required tiktoken is missing in {venv} [job env: packages]"
    assert len(reason.encode()) <= 255
    sinfo = gate.cluster.run("sinfo", "-R", "-h", "-o", "%E").stdout
    assert "envdoctor: packages.required tiktoken" in sinfo
    gate.wait_health_runs(1)
    assert gate.cluster.node_state()[0].startswith("drain")  # still failing: still drained

    install(venv, "tiktoken")
    gate.wait_state("the health check resumed the node", lambda s, r: s == "idle" and r == "none")
    gate.cluster.run("scontrol", "release", job)
    gate.cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")  # (Slurm's 2 minutes after a requeue)
    gate.wait_job(job, ("COMPLETED",), timeout=90)
    assert "job ran" in gate.job_output(job)


def test_a_node_drained_by_a_person_is_left_alone(gate, venv_factory):
    """A drain with a person's reason is theirs: the health check neither resumes it when every
    check passes nor rewrites its reason when one fails."""
    gate.reset()
    venv = venv_factory("venv for a person's drain")
    gate.configure(venv, args="--require pip")
    gate.cluster.set_node("DRAIN", "memory test (alice)")
    gate.health(True)
    gate.wait_health_runs(2)
    assert gate.cluster.node_state() == ("drained", "memory test (alice)")
    gate.configure(venv, args="--require tiktoken")
    gate.wait_health_runs(2)
    assert gate.cluster.node_state() == ("drained", "memory test (alice)")
    gate.cluster.set_node("RESUME")
    gate.configure(venv, args="--require pip")
    gate.wait_health_runs(1)
    assert gate.cluster.node_state() == ("idle", "none")


def test_a_node_problem_that_comes_and_goes(gate, venv_factory):
    """A GPU required on a node without one drains it as a node problem; once no GPU is
    required any more the health check gives the node back, and a job runs."""
    gate.reset()
    venv = venv_factory("venv on a node without GPUs")
    gate.configure(venv, gpus="1")
    gate.health(True)
    _, reason = gate.wait_state("the health check drained the node", lambda s, r: r.startswith("envdoctor:"))
    assert reason.startswith("envdoctor: host.gpu ") and reason.endswith("[node: driver]"), reason
    assert "1 GPU(s) expected" in reason
    gate.configure(venv)
    gate.wait_state("the node resumed", lambda s, r: s == "idle" and r == "none")
    job = gate.run_job()
    gate.wait_job(job, ("COMPLETED",))


def slow_venv(venv: Path) -> Path:
    """A venv whose interpreter is a site launcher that waits (a module system on a slow
    filesystem): envdoctor's probe runs out of its time on it, the node is not at fault."""
    python = venv / "bin" / "python"
    real = python.resolve()
    python.unlink()
    python.write_text(f"#!/bin/sh\nsleep 30\nexec {shlex.quote(str(real))} \"$@\"\n")
    python.chmod(0o755)
    return venv


def test_envdoctors_own_timeout_is_never_a_drain(gate, venv_factory):
    """envdoctor running out of its own time (ENVDOCTOR_TIMEOUT=12 on a venv whose interpreter hangs) lets
    the job run with the report saying so; with ENVDOCTOR_ON_TIMEOUT=hold the job is held and
    the health check gives the node back; the health check itself never drains for it."""
    gate.reset()
    venv = slow_venv(venv_factory("slow venv"))
    gate.configure(venv, args="--require tiktoken", timeout="12")
    job = gate.run_job()
    gate.wait_job(job, ("COMPLETED",), timeout=120)
    data = gate.report(job)
    assert data["exit_status"] == 1 and data["hosts"][0]["timed_out"] is True
    assert not [r for r in data["hosts"][0]["results"] if r["status"] == "fail"]
    assert "job ran" in gate.job_output(job)
    assert gate.wait_state("the node idle again", lambda s, r: s == "idle" or s.startswith("drain"))[1] == "none"

    gate.configure(venv, args="--require tiktoken", timeout="12", ENVDOCTOR_ON_TIMEOUT="hold")
    held = gate.run_job()
    _, reason = gate.wait_state("the held job's drain", lambda s, r: s.startswith("drain"), timeout=120)
    assert reason == "Prolog error"
    assert gate.cluster.job(held)["JobState"] == "PENDING"
    gate.configure(venv, args="--require tiktoken", timeout="12")
    gate.health(True)
    gate.wait_state("the health check gave the node back", lambda s, r: s == "idle" and r == "none", timeout=120)
    gate.wait_health_runs(2)  # its own runs time out too: no verdict, no drain
    assert gate.cluster.node_state() == ("idle", "none")
    assert gate.cluster.job(held)["JobState"] == "PENDING"  # held until a person releases it


def test_a_users_own_venv_fails_only_that_job(gate, venv_factory):
    """A user's venv is checked by the job's first step (the batch script of docs/cluster-gate.md):
    a missing package ends that job with exit 1 before its work, and the node is not drained."""
    gate.reset()
    gate.configure(venv_factory("cluster job venv"), args="--require pip")
    user_venv = venv_factory("user venv")
    step = (f"srun --ntasks-per-node=1 {shlex.quote(gate.program)} check local --venv {shlex.quote(str(user_venv))} "
            "--require tiktoken --timeout 300 || exit 1\necho served")
    job = gate.run_job(step)
    done = gate.wait_job(job, ("COMPLETED", "FAILED"), timeout=120)
    assert done["JobState"] == "FAILED" and done["ExitCode"] == "1:0"
    output = gate.job_output(job)
    assert "packages.required" in output and "tiktoken" in output and "served" not in output
    assert gate.wait_state("the node idle again", lambda s, r: s == "idle" or s.startswith("drain")) == ("idle", "none")


def test_what_running_jobs_use_is_waived_while_they_run(gate, venv_factory):
    """On a node with a job running the health check waives gpu.free and host.collectives:shm
    (what jobs hold), and does not drain it; the other checks still run."""
    gate.reset()
    gate.configure(venv_factory("venv beside a running job"), args="--require pip")
    job = gate.run_job("sleep 300")
    gate.wait_job(job, ("RUNNING",))
    gate.health(True)
    gate.wait_health_runs(1)
    results = {r["id"]: r for r in json.loads((gate.reports / "health.json").read_text())["hosts"][0]["results"]}
    assert results["gpu.free"]["status"] == "waived"
    assert results["packages.required"]["status"] == "pass"
    assert gate.cluster.node_state()[0] in ("allocated", "mixed")
    gate.cluster.run("scancel", job)


def test_a_prolog_error_envdoctor_did_not_cause_is_left_alone(gate, venv_factory):
    """A "Prolog error" drain from another prolog is not envdoctor's: the report envdoctor's
    prolog kept from an earlier failure (ten minutes old here) does not explain it, so the
    health check neither rewrites nor resumes it although every check passes."""
    gate.reset()
    venv = venv_factory("venv for another prolog's error")
    gate.configure(venv, args="--require tiktoken")
    job = gate.run_job()
    gate.wait_state("the prolog drained the node", lambda s, r: s.startswith("drain"))
    gate.cluster.run("scancel", job)
    kept = gate.reports / f"prolog-{gate.cluster.node}.json"
    assert json.loads(kept.read_text())["exit_status"] == 1
    gate.configure(venv, args="--require pip")
    gate.cluster.set_node("RESUME")
    gate.wait_state("the node idle", lambda s, r: s == "idle")
    old = time.time() - 600
    os.utime(kept, (old, old))
    gate.cluster.set_node("DRAIN", "Prolog error")  # as Slurm drains for another prolog's failure
    gate.health(True)
    gate.wait_health_runs(2)
    assert gate.cluster.node_state() == ("drained", "Prolog error")


def test_a_long_reason_fits_slurms_reason_field_and_keeps_its_kind(gate, venv_factory):
    """Forty missing packages make a long finding: the drain reason is cut to 255 bytes (slurmdbd's
    reason column) and still starts with the check and ends with the problem's kind."""
    gate.reset()
    wanted = " ".join(f"--require envdoctor-absent-package-{i:02d}" for i in range(40))
    gate.configure(venv_factory("venv missing forty packages"), args=wanted)
    gate.health(True)
    _, reason = gate.wait_state("the health check drained the node", lambda s, r: r.startswith("envdoctor:"))
    assert reason.startswith("envdoctor: packages.required envdoctor-absent-package-")
    assert reason.endswith("... [job env: packages]") and len(reason.encode()) == 255, reason


@pytest.mark.parametrize(("policy", "status"), [("run", 0), ("hold", 3)])
def test_the_prologs_watchdog_stops_an_envdoctor_that_hangs(tmp_path, policy, status):
    """An envdoctor that never returns (stuck on a dead mount) is stopped at ENVDOCTOR_TIMEOUT:
    the prolog ends within it, its report says timed_out, and it exits 0 (run) or 3 (hold),
    never 1 (a drain for the node)."""
    hung = tmp_path / "envdoctor"
    hung.write_text("#!/bin/sh\nexec sleep 600\n")
    hung.chmod(0o755)
    report = tmp_path / "log" / "job-7.json"
    env = {"PATH": "/usr/bin:/bin", "ENVDOCTOR": str(hung), "ENVDOCTOR_VENV": str(tmp_path), "ENVDOCTOR_TIMEOUT": "10",
           "ENVDOCTOR_ON_TIMEOUT": policy, "ENVDOCTOR_REPORT": str(report), "SLURM_JOB_ID": "7",
           "SLURMD_NODENAME": "envnode"}
    begin = time.monotonic()
    res = subprocess.run(["/bin/sh", str(DOCS / "slurm-prolog.sh")], env=env, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60, start_new_session=True, check=False)
    assert time.monotonic() - begin < 10 + 2, res.stderr
    assert res.returncode == status, res.stderr
    assert json.loads(report.read_text())["timed_out"] is True
    assert "envdoctor's own time, not the node's fault" in res.stderr
    assert (tmp_path / "log" / "prolog-envnode.json").exists() is (policy == "hold")
