"""Fleet benchmark for `envdoctor check` (issue 2): 1 and 32 host aliases on one local sshd.

Measures, in one run: wall time and controller CPU time of `envdoctor check`; SSH
connections and sessions per host (from sshd's VERBOSE log); and the same facts gathered
the way a person does by hand (one `ssh` per fact, host after host).

    python bench/fleet_bench.py [--hosts 1,32] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.sshd import start_sshd  # noqa: E402  # the repo root must be on sys.path first

HAND_FACTS = [
    "command -v python3",
    "command -v pip",
    "python3 -c 'import sys; print(sys.prefix, sys.version)'",
    "{venv}/bin/python -c 'import sys; print(sys.version)'",
    "{venv}/bin/python -m pip list --format=json",
    "{venv}/bin/python -m pip check",
    "nvidia-smi -L",
    "df -k {venv}",
]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    cpu0, t0 = children_cpu(), time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    return time.perf_counter() - t0, children_cpu() - cpu0, proc.returncode


def count_log(log: Path, start: int) -> tuple[int, int]:
    text = log.read_text(errors="replace")[start:]
    connections = text.count("Accepted publickey")
    sessions = text.count("Starting session:")
    return connections, sessions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", default="1,32")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(n) for n in args.hosts.split(",")]
    root = Path(tempfile.mkdtemp(prefix="envdoctor-fleet-bench-"))
    aliases = [f"bench{i:03d}" for i in range(max(sizes))]
    server = start_sshd(root / "sshd", aliases)
    venv_dir = root / "venv"
    venv.EnvBuilder(with_pip=True).create(venv_dir)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    ssh_base = ["ssh", "-F", str(server.ssh_config), "-o", "BatchMode=yes"]
    rows = []
    try:
        for n in sizes:
            hosts = aliases[:n]
            check = [sys.executable, "-m", "envdoctor", "check", *hosts, "--ssh-config", str(server.ssh_config),
                     "--venv", str(venv_dir), "--require", "pip", "--format", "json", "--parallel", "256"]
            walls, cpus = [], []
            conns = sessions = 0
            for _ in range(args.repeat):
                mark = len(server.log_text())
                wall, cpu, status = timed(check, env)
                if status not in (0, 1):
                    raise SystemExit(f"envdoctor check failed with status {status}")
                walls.append(wall)
                cpus.append(cpu)
                conns, sessions = count_log(server.log, mark)
            hand_walls = []
            for _ in range(max(1, args.repeat // 2)):
                t0 = time.perf_counter()
                for host in hosts:
                    for fact in HAND_FACTS:
                        subprocess.run([*ssh_base, host, fact.format(venv=venv_dir)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
                hand_walls.append(time.perf_counter() - t0)
            wall, cpu, hand = statistics.median(walls), statistics.median(cpus), statistics.median(hand_walls)
            rows.append((n, wall, cpu, cpu / n, conns / n, sessions / n, hand, hand / wall))
    finally:
        server.stop()

    print(f"{'hosts':>5} {'wall s':>8} {'ctl CPU s':>10} {'CPU/host ms':>12} {'conn/host':>10} "
          f"{'sess/host':>10} {'by hand s':>10} {'speed-up':>9}")
    for n, wall, cpu, per_host, conn, sess, hand, speedup in rows:
        print(f"{n:>5} {wall:>8.2f} {cpu:>10.2f} {per_host * 1000:>12.1f} {conn:>10.2f} {sess:>10.2f} "
              f"{hand:>10.2f} {speedup:>8.1f}x")
    if len(rows) >= 2:
        (n1, _, c1, *_), (n2, _, c2, *_) = rows[0], rows[-1]
        print(f"marginal controller CPU per extra host: {(c2 - c1) / (n2 - n1) * 1000:.1f} ms "
              "(process start-up and imports are paid once per run)")


if __name__ == "__main__":
    main()
