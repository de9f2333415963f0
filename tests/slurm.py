"""A private one-node Slurm on 127.0.0.1 for the end-to-end tests of the cluster gate.

From Debian's ``slurm-wlm`` and ``munge`` packages: its own munged (a generated key, its own
socket), a slurm.conf with private ports, spool and state folders, slurmctld and slurmd as
root, ``proctrack/linuxproc`` and ``task/none`` (no cgroups, no systemd). Readiness is polled
(the node answering ``sinfo`` as idle), never slept for; :meth:`SlurmCluster.stop` cancels the
jobs and ends every process it started, the jobs' slurmstepd included.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from tests.sshd import free_port

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "squeue", "scancel")
SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")
NODE = "envnode"
T = TypeVar("T")


def find_program(name: str) -> str | None:
    return shutil.which(name) or next((f"{d}/{name}" for d in SBIN if os.access(f"{d}/{name}", os.X_OK)), None)


def missing_programs() -> list[str]:
    """The programs of slurm-wlm and munge this machine lacks (none: a cluster can start)."""
    return [name for name in PROGRAMS if find_program(name) is None]


def can_start() -> str | None:
    """Why a private Slurm cannot start here, or None."""
    if missing := missing_programs():
        return (f"{', '.join(missing)} not installed: apt-get install slurm-wlm munge "
                "(.ci/run installs them where it can)")
    if os.geteuid() != 0:
        return "slurmd must run as root to run jobs and prologs as their users"
    return None


@dataclass
class SlurmCluster:
    """A running slurmctld, slurmd and munged, and the commands that reach them."""

    root: Path
    conf: Path
    munge_dir: Path
    node: str = NODE
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        """What Slurm's client commands need to find this cluster."""
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([find_program(argv[0]) or argv[0], *argv[1:]], env=self.env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def node_state(self) -> tuple[str, str]:
        """(state, reason) as sinfo shows them: ``("drained", "Prolog error")``, reason "none" when none."""
        out = self.run("sinfo", "-h", "-N", "-n", self.node, "-o", "%T|%E").stdout.strip().splitlines()
        state, _, reason = (out[0] if out else "|").partition("|")
        return state, reason

    def set_node(self, state: str, reason: str | None = None) -> None:
        args = ["scontrol", "update", f"NodeName={self.node}", f"State={state}"]
        self.run(*args, *([f"Reason={reason}"] if reason is not None else []))

    def submit(self, script: str, *args: str) -> str:
        """sbatch a batch script (its text); the job id."""
        path = self.root / f"job-{time.monotonic_ns()}.sh"
        path.write_text(script)
        out = self.run("sbatch", "--parsable", "-D", str(self.root), *args, str(path)).stdout.strip()
        return out.split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as fields (JobState, Reason, ExitCode, ...); {} once forgotten."""
        proc = self.run("scontrol", "-o", "show", "job", job_id, check=False)
        fields: dict[str, str] = {}
        for word in proc.stdout.split():
            key, sep, value = word.partition("=")
            if sep:
                fields[key] = value
        return fields

    def log_tail(self, lines: int = 30) -> str:
        text = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            path = self.root / name
            if path.exists():
                text.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(text)

    def wait_for(self, what: str, probe: Callable[[], T | None], timeout: float = 60, every: float = 0.25) -> T:
        """Poll ``probe`` until it returns something true; fail with the logs' tails after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with status {proc.returncode}\n{self.log_tail()}")
            found = probe()
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout:g}s\n{self.log_tail()}")
            time.sleep(every)  # a poll interval, not a wait for readiness

    def cancel_all(self) -> None:
        """Cancel every job and wait until none is left (their prologs and steps ended)."""
        self.run("scancel", "--full", "--user", "root", check=False)
        self.wait_for("no jobs left", lambda: not self.run("squeue", "-h", check=False).stdout.strip()
                      and not self.stepds(), timeout=60)

    def stepds(self) -> list[int]:
        """The slurmstepd processes of this cluster (they leave slurmd's process group)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if (entry / "comm").read_text().strip() == "slurmstepd" and \
                        str(self.conf).encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def stop(self) -> None:
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            try:
                self.cancel_all()
            except (AssertionError, RuntimeError, subprocess.TimeoutExpired):
                pass
        for pid in self.stepds():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.munge_dir, ignore_errors=True)


def slurm_conf(root: Path, munge_socket: Path, *, prolog: Path | None, health_check: Path | None,
               health_interval: int, extra: Sequence[str]) -> str:
    host = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    lines = [
        "ClusterName=envdoctor-test",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=2",
        "SlurmdTimeout=300",
        "MessageTimeout=10",
        "KillWait=5",
    ]
    if prolog is not None:
        lines += [f"Prolog={prolog}", "PrologFlags=Alloc"]
    if health_check is not None:
        lines += [f"HealthCheckProgram={health_check}", f"HealthCheckInterval={health_interval}",
                  "HealthCheckNodeState=ANY"]
    lines += [
        *extra,
        f"NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=500 State=UNKNOWN",
        f"PartitionName=gate Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
        "",
    ]
    return "\n".join(lines)


def start_munged(root: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """munged with a generated key; (process, socket, its folder). The socket's folder and every
    folder above it must be searchable by all (munged refuses otherwise), which pytest's own
    temporary folders are not: it is a folder of its own under /tmp."""
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sockets = Path(tempfile.mkdtemp(prefix="envdoctor-munge-"))
    sockets.chmod(0o755)
    sock = sockets / "socket"
    proc = subprocess.Popen(
        [find_program("munged") or "munged", "--foreground", f"--socket={sock}", f"--key-file={key}",
         f"--pid-file={root / 'munged.pid'}", f"--log-file={root / 'munged.log'}", f"--seed-file={root / 'munged.seed'}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    return proc, sock, sockets


def start_slurm(root: Path, *, prolog: Path | None = None, health_check: Path | None = None,
                health_interval: int = 5, extra: Sequence[str] = (), timeout: float = 60) -> SlurmCluster:
    """A new one-node cluster; returns once its node is idle (after slurmd's first health check)."""
    if why := can_start():
        raise RuntimeError(why)
    root.mkdir(parents=True, exist_ok=True)
    for folder in ("state", "spool"):
        (root / folder).mkdir(exist_ok=True)
    munged, sock, sockets = start_munged(root)
    conf = root / "slurm.conf"
    cluster = SlurmCluster(root, conf, sockets, procs={"munged": munged})
    try:
        cluster.wait_for("munged's socket", sock.exists, timeout=timeout, every=0.05)
        conf.write_text(slurm_conf(root, sock, prolog=prolog, health_check=health_check,
                                   health_interval=health_interval, extra=extra))
        env = {**cluster.env, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL,
                 "start_new_session": True, "env": env, "cwd": root}
        cluster.procs["slurmctld"] = subprocess.Popen([find_program("slurmctld") or "slurmctld", "-D", "-i",
                                                       "-f", str(conf)], **quiet)  # type: ignore[call-overload]  # Popen's keywords
        cluster.wait_for("slurmctld answering", lambda: cluster.run("scontrol", "ping", check=False).returncode == 0
                         and "UP" in cluster.run("scontrol", "ping", check=False).stdout, timeout=timeout)
        cluster.procs["slurmd"] = subprocess.Popen([find_program("slurmd") or "slurmd", "-D", "-N", NODE,
                                                    "-f", str(conf)], **quiet)  # type: ignore[call-overload]
        cluster.wait_for("the node idle", lambda: cluster.node_state()[0] == "idle", timeout=timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster
