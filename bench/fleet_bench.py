"""Fleet benchmark for `envdoctor check` (issue 2): 1 and 32 host aliases on one local sshd.

Measures, in one run: wall time and controller CPU time of `envdoctor check`; SSH
connections and sessions per host (from sshd's VERBOSE log); the same facts gathered
the way a person does by hand (one `ssh` per fact, host after host); and the cost of
resolving destinations (issue 10: `ssh -G` per host, and the built-in parser) at 32 and
128 hosts; and the bytes sent to each host (issue 28: stdin of every command a check runs,
and the command lines) on a first run (the host keeps no copy of the probe program, the
controller remembers nothing) and on a repeat run. The timed runs are repeat runs: the
host's copy, the controller's memory and its ssh -G cache are warm.

    python bench/fleet_bench.py [--hosts 1,32] [--repeat 3] [--skip-by-hand]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
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


#: Targets of issue 28 item 4.
TARGET_CPU_MS = 15.0
TARGET_REPEAT_BYTES = 16 * 1024


def count_wire(out: str, argv: list[str]) -> None:
    """Run `envdoctor ARGV` in this process with the SSH transport counting, per host, the
    bytes of every command's stdin and command line and the probe programs named; written
    to OUT as JSON at exit."""
    import atexit

    from envdoctor.transport import ssh

    counts: dict[str, dict] = {}
    real_run, real_line = ssh.SSHTransport.run, ssh._command_line

    async def run(self, argv, *, stdin=None, **kwargs):  # type: ignore[no-untyped-def]
        host = counts.setdefault(self.name, {"stdin": 0, "command_line": 0, "commands": 0, "programs": []})
        host["stdin"] += len(stdin or b"")
        host["command_line"] += len(real_line(argv, kwargs.get("env")).encode())
        host["commands"] += 1
        if stdin and stdin.startswith(b"{"):
            program = json.loads(stdin.partition(b"\n")[0]).get("program")
            if program and program not in host["programs"]:
                host["programs"].append(program)
        result = await real_run(self, argv, stdin=stdin, **kwargs)
        host["received"] = host.get("received", 0) + len(result.stdout) + len(result.stderr)
        return result

    ssh.SSHTransport.run = run  # type: ignore[method-assign]

    def write() -> None:
        Path(out).write_text(json.dumps(counts))

    atexit.register(write)
    sys.argv = ["envdoctor", *argv]
    from envdoctor.cli.main import main as cli_main

    cli_main()


def wire_run(check: list[str], env: dict[str, str], root: Path) -> dict[str, dict]:
    """One `envdoctor check` counting what it sends (see count_wire); per host."""
    out = root / "wire.json"
    out.unlink(missing_ok=True)
    subprocess.run([sys.executable, __file__, "--count-wire", str(out), "--", *check[3:]], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    return json.loads(out.read_text())


def forget_programs(counts: dict[str, dict]) -> None:
    """Remove the host's copies of the programs these runs named (the loopback host's user is
    this user: its ~/.cache/envdoctor), so that the next run is a first run."""
    folder = Path.home() / ".cache" / "envdoctor"
    for program in {p for host in counts.values() for p in host["programs"]}:
        (folder / f"program-{program}").unlink(missing_ok=True)
        code = hashlib.sha256((program + sys.version).encode()).hexdigest()[:40]
        (folder / f"probe-{code}").unlink(missing_ok=True)


def bytes_per_host(counts: dict[str, dict]) -> tuple[float, float, float, float]:
    """Mean stdin bytes, command-line bytes, commands and bytes received (output) per host."""
    n = max(1, len(counts))
    return (sum(h["stdin"] for h in counts.values()) / n, sum(h["command_line"] for h in counts.values()) / n,
            sum(h["commands"] for h in counts.values()) / n, sum(h.get("received", 0) for h in counts.values()) / n)


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


def cpu_now() -> float:
    """CPU seconds of this process and of its waited-for children (the ssh -G processes)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def resolver_cost(server, root: Path, counts: list[int]) -> list[tuple[str, int, float, float]]:
    """Resolving N aliases of one config up front, as `check` does before connecting
    (openssh.resolve_all): with `ssh -G` (one process per host, 16 at a time) and with the
    built-in parser."""
    import asyncio

    from envdoctor.logsafe import configure_logging
    from envdoctor.transport.openssh import HostResolver

    configure_logging(0)  # the resolver's debug events are not the benchmark's output

    config = server.write_alias_config([f"res{i:03d}" for i in range(max(counts))], path=root / "resolver_config")
    os.environ["XDG_CACHE_HOME"] = str(root / "cache")  # a cold cache of our own
    results = []
    # cold: every answer from a new ssh -G; warm: the same again, answered by the cache.
    for label, ssh in (("ssh -G cold", ""), ("ssh -G warm", ""), ("built-in", None)):
        for n in counts:
            resolver = HostResolver(str(config), ssh=ssh)

            async def every(resolver=resolver, n=n) -> None:
                await asyncio.gather(*(resolver.plan(f"res{i:03d}") for i in range(n)))

            if label == "ssh -G cold":
                shutil.rmtree(root / "cache", ignore_errors=True)
            cpu0, t0 = cpu_now(), time.perf_counter()
            if resolver.ssh is not None:  # as openssh.resolve_all: plain processes first, then the plans
                resolver.prefetch([(f"res{i:03d}", None, None) for i in range(n)])
            asyncio.run(every())
            results.append((label, n, time.perf_counter() - t0, cpu_now() - cpu0))
    return results


def main() -> None:
    if len(sys.argv) > 3 and sys.argv[1] == "--count-wire" and sys.argv[3] == "--":
        count_wire(sys.argv[2], sys.argv[4:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", default="1,32")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-by-hand", action="store_true",
                        help="do not time the by-hand ssh loop (minutes at 32 hosts); its columns show 0")
    args = parser.parse_args()
    sizes = [int(n) for n in args.hosts.split(",")]
    root = Path(tempfile.mkdtemp(prefix="envdoctor-fleet-bench-"))
    aliases = [f"bench{i:03d}" for i in range(max(sizes))]
    server = start_sshd(root / "sshd", aliases)
    venv_dir = root / "venv"
    venv.EnvBuilder(with_pip=True).create(venv_dir)
    # A controller cache of the bench's own (ssh -G answers, which programs the host keeps).
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "XDG_CACHE_HOME": str(root / "controller-cache")}
    ssh_base = ["ssh", "-F", str(server.ssh_config), "-o", "BatchMode=yes"]
    rows = []
    least_cpu: list[float] = []  # per size: the least controller CPU of its runs
    wire_rows: list[tuple[int, tuple[float, ...], tuple[float, ...]]] = []
    try:
        for n in sizes:
            hosts = aliases[:n]
            check = [sys.executable, "-m", "envdoctor", "check", *hosts, "--ssh-config", str(server.ssh_config),
                     "--venv", str(venv_dir), "--require", "pip", "--format", "json", "--parallel", "256"]
            # First run: no copy on the host, nothing remembered here; then the timed (repeat) runs.
            forget_programs(wire_run(check, env, root))
            shutil.rmtree(root / "controller-cache", ignore_errors=True)
            first = bytes_per_host(wire_run(check, env, root))
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
            hand_walls: list[float] = []
            for _ in range(0 if args.skip_by_hand else max(1, args.repeat // 2)):
                t0 = time.perf_counter()
                for host in hosts:
                    for fact in HAND_FACTS:
                        subprocess.run([*ssh_base, host, fact.format(venv=venv_dir)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
                hand_walls.append(time.perf_counter() - t0)
            wall, cpu, hand = statistics.median(walls), statistics.median(cpus), statistics.median(hand_walls or [0.0])
            rows.append((n, wall, cpu, cpu / n, conns / n, sessions / n, hand, hand / wall))
            least_cpu.append(min(cpus))
            wire_rows.append((n, first, bytes_per_host(wire_run(check, env, root))))
        resolver_rows = resolver_cost(server, root, [32, 128])
    finally:
        server.stop()

    print(f"{'hosts':>5} {'wall s':>8} {'ctl CPU s':>10} {'CPU/host ms':>12} {'conn/host':>10} "
          f"{'sess/host':>10} {'by hand s':>10} {'speed-up':>9}")
    for n, wall, cpu, per_host, conn, sess, hand, speedup in rows:
        print(f"{n:>5} {wall:>8.2f} {cpu:>10.2f} {per_host * 1000:>12.1f} {conn:>10.2f} {sess:>10.2f} "
              f"{hand:>10.2f} {speedup:>8.1f}x")
    if len(rows) >= 2:
        (n1, _, c1, *_), (n2, _, c2, *_) = rows[0], rows[-1]
        marginal = (c2 - c1) / (n2 - n1) * 1000
        print(f"marginal controller CPU per extra host: {marginal:.1f} ms "
              "(process start-up and imports are paid once per run)")
        # Start-up's CPU varies by a tenth of a second between runs on a shared machine, and
        # contention only ever adds: the least of each size's runs is the steadier estimate.
        print(f"  from the least CPU of each size's runs: {(least_cpu[-1] - least_cpu[0]) / (n2 - n1) * 1000:.1f} ms")
        print(f"target <= {TARGET_CPU_MS:g} ms per extra host: {'met' if marginal <= TARGET_CPU_MS else 'NOT met'}")
    print_wire_rows(wire_rows)
    print_resolver_rows(resolver_rows)


def print_wire_rows(rows: list[tuple[int, tuple[float, ...], tuple[float, ...]]]) -> None:
    print(f"\n{'hosts':>5} {'run':>7} {'stdin B/host':>13} {'cmdline B/host':>15} {'total B/host':>13} "
          f"{'cmds/host':>10} {'recv B/host':>12}")
    worst = 0.0
    for n, first, repeat in rows:
        for label, (stdin, line, commands, received) in (("first", first), ("repeat", repeat)):
            print(f"{n:>5} {label:>7} {stdin:>13.0f} {line:>15.0f} {stdin + line:>13.0f} {commands:>10.2f} "
                  f"{received:>12.0f}")
        worst = max(worst, repeat[0] + repeat[1])
    if rows:
        verdict = "met" if worst <= TARGET_REPEAT_BYTES else "NOT met"
        print(f"target <= {TARGET_REPEAT_BYTES // 1024} KB sent per host on a repeat run (stdin and command lines): "
              f"{verdict} ({worst:.0f} B)")


def print_resolver_rows(rows: list[tuple[str, int, float, float]]) -> None:
    print(f"\n{'resolver':>12} {'hosts':>5} {'wall s':>8} {'CPU s':>7} {'CPU/host ms':>12} {'wall/host ms':>13}")
    for label, n, wall, cpu in rows:
        print(f"{label:>12} {n:>5} {wall:>8.3f} {cpu:>7.3f} {cpu / n * 1000:>12.2f} {wall / n * 1000:>13.2f}")


if __name__ == "__main__":
    main()
