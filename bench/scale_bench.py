"""Fleet-scale benchmark: envdoctor against a plain asyncssh loop over a simulated fleet.

The fleet is N aliases (h0001 ... hN) of a few asyncssh server processes on 127.0.0.1
(bench/sim_fleet.py) that answer every command with a recorded answer of the real probe. The
controller does all of its real work: ssh config resolution, one connection per host with
public-key authentication and a host-key check against known_hosts, the probe command,
parsing, the check graph and the JSON report. The reference is the floor of the approach:
one asyncssh connection and one exec per host, same command, same standard input, same
concurrency, outputs gathered, nothing else, with asyncssh's default algorithms. A second
reference row offers the ciphers in envdoctor's order (AES-GCM first on a CPU with AES
instructions, envdoctor/transport/ciphers.py), so that what that choice is worth is shown
apart from the rest of envdoctor's cost.

For each fleet size it runs envdoctor twice: first with an empty ssh -G cache (the first run
after the SSH config changed, when OpenSSH resolves every host: about 11 ms of ssh's own CPU
per host), then as every later run is. For each it prints wall time, controller CPU (user+sys of the process tree, from
wait4) in total and per host (of --repeat runs taking turns with the loops: the best wall and
the least CPU), peak RSS, the most descriptors open at once, and envdoctor's
wall time over the reference's. It then runs the largest fleet under a descriptor limit
(``--nofile``, default 256) that is far below the fleet size: every host must get its result
and no "Too many open files" may appear. Finally it reports start-up: the import time of
``envdoctor check local`` (best of 5), and what comparing hosts costs (``--diff-hosts``, 128 by
default; bench/diff_cost.py): ``check`` of the hosts of one job as a plain group, as a ``same =
true`` group (check and the comparison, in one probe round trip) and ``diff`` of them, taking
turns, with the hashing a host does for them measured on this machine (cold, and from its cache).

    python bench/scale_bench.py [--hosts 32,128,1000] [--servers 2] [--parallel 64]
                                [--nofile 256] [--repeat 3] [--distinct] [--diff-hosts 128]

By default every simulated host sends the same answer, as the nodes of one image do; the
controller then decodes the environments once (envdoctor/probe/shared_answers.py). ``--distinct``
makes every answer differ, for the cost on a fleet of mixed images.

Not run by CI. On 2 cores the default run takes a few minutes; the servers share the cores
with the controller, equally for envdoctor and the reference. (The earlier comparison with
Ansible and pyinfra through a 50 ms link is bench/tools_bench.py.)
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ROOT = Path("/tmp/envdoctor-scale-bench")
BASE_PORT = 23100

#: The reference: one connection and one exec per host, nothing else.
REFERENCE = r"""
import asyncio, json, sys
import asyncssh

async def main():
    plan = json.load(open(sys.argv[1]))
    command, stdin = plan["command"], open(plan["stdin"], "rb").read()
    limit = asyncio.Semaphore(plan["parallel"])
    async def one(host):
        async with limit:
            async with asyncssh.connect("127.0.0.1", host["port"], username="root",
                                        client_keys=[plan["key"]], known_hosts=plan["known_hosts"],
                                        config=None, **plan["options"]) as conn:
                result = await conn.run(command, input=stdin, encoding=None)
                return len(result.stdout)
    sizes = await asyncio.gather(*(one(h) for h in plan["hosts"]), return_exceptions=True)
    bad = [s for s in sizes if not isinstance(s, int)]
    print(json.dumps({"hosts": len(sizes), "failed": len(bad), "errors": sorted({str(b) for b in bad})[:3]}))

asyncio.run(main())
"""


@dataclass
class Measure:
    tool: str
    hosts: int
    wall: float
    cpu: float
    rss_mb: float
    max_fds: int
    ok: bool
    note: str = ""

    @property
    def cpu_ms_per_host(self) -> float:
        return 1000 * self.cpu / self.hosts


def measured(argv: list[str], *, nofile: int | None = None, env: dict[str, str] | None = None,
             timeout: float = 1800) -> tuple[Measure, str, str]:
    """Run argv; wall, CPU and peak RSS from wait4, descriptors sampled from /proc."""
    def limit() -> None:
        if nofile:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))

    out_path, err_path = ROOT / "last.out", ROOT / "last.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        begin = time.monotonic()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                preexec_fn=limit, env=env)
        most = [0]
        done = threading.Event()

        def sample() -> None:
            fd_dir = f"/proc/{proc.pid}/fd"
            while not done.is_set():
                try:
                    most[0] = max(most[0], len(os.listdir(fd_dir)))
                except OSError:
                    pass
                done.wait(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - begin
        done.set()
        sampler.join()
    code = os.waitstatus_to_exitcode(status)
    measure = Measure("", 0, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, most[0], code in (0, 1))
    return measure, out_path.read_text("utf-8", "replace"), err_path.read_text("utf-8", "replace")


class SimFleet:
    """Keys, an ssh_config with N aliases over the servers' ports, known_hosts, the servers."""

    def __init__(self, servers: int, max_hosts: int, distinct: bool = False) -> None:
        import asyncssh

        self.distinct = distinct
        shutil.rmtree(ROOT, ignore_errors=True)
        ROOT.mkdir(mode=0o700, parents=True)
        self.host_key = ROOT / "host_key"
        self.client_key = ROOT / "client_key"
        for path in (self.host_key, self.client_key):
            key = asyncssh.generate_private_key("ssh-ed25519")
            key.write_private_key(str(path))
            key.write_public_key(str(path) + ".pub")
            path.chmod(0o600)
        self.ports = [BASE_PORT + i for i in range(servers)]
        public = asyncssh.read_public_key(str(self.host_key) + ".pub").export_public_key().decode().strip()
        self.known_hosts = ROOT / "known_hosts"
        self.known_hosts.write_text("".join(f"[127.0.0.1]:{p} {public}\n" for p in self.ports))
        self.config = ROOT / "ssh_config"
        blocks = [
            f"Host {self.alias(i)}\n  HostName 127.0.0.1\n  Port {self.port_of(i)}\n"
            for i in range(max_hosts)
        ]
        common = (f"Host *\n  User root\n  IdentityFile {self.client_key}\n"
                  f"  UserKnownHostsFile {self.known_hosts}\n  StrictHostKeyChecking yes\n"
                  f"  IdentitiesOnly yes\n")
        self.config.write_text("".join(blocks) + common)
        self.answer = ROOT / "answer"
        self.stdin = ROOT / "stdin"
        self.command = self.record_answer()
        #: sim_fleet's --answer-for arguments: the recordings of other requests (diff_cost.py).
        self.answers: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    @staticmethod
    def alias(index: int) -> str:
        return f"h{index + 1:04d}"

    def port_of(self, index: int) -> int:
        return self.ports[index % len(self.ports)]

    def record_answer(self) -> str:
        """The real probe of `check` run once on this machine; every simulated host answers it."""
        from envdoctor.operations.gather import build_request
        from envdoctor.probe.program import venv_pythons
        from envdoctor.engine.graph import load_checks
        from envdoctor.inventory import HostSpec
        from envdoctor.probe.program import build_program, encode_stdin, probe_command
        from envdoctor.transport.interface import shell_join

        spec = HostSpec("h", None)
        request = build_request(spec, load_checks().sections_for(None))
        stdin = encode_stdin({"sections": request}, build_program(request))
        argv = probe_command(venv_pythons(spec.venv))
        answer = subprocess.run(argv, input=stdin, capture_output=True, check=True, timeout=300).stdout
        self.answer.write_bytes(answer)
        self.stdin.write_bytes(stdin)
        return shell_join(argv)

    def start(self) -> None:
        for port in self.ports:
            proc = subprocess.Popen(
                [sys.executable, str(REPO / "bench" / "sim_fleet.py"), "--port", str(port),
                 "--host-key", str(self.host_key), "--answer", str(self.answer),
                 *(["--distinct"] if self.distinct else []), *self.answers],
                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
            )
            assert proc.stdout is not None
            line = proc.stdout.readline().decode()  # waits for "ready PORT": no fixed sleep
            if not line.startswith("ready"):
                raise SystemExit(f"simulated server on port {port} did not start")
            self.procs.append(proc)

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
            proc.wait(10)


def envdoctor_run(fleet: SimFleet, n: int, parallel: int, nofile: int | None = None, *, cold: bool = False) -> Measure:
    """One run; ``cold``: with the ssh -G cache emptied first (the first run after the SSH
    config changed: OpenSSH resolves every host), else with it as the last run left it."""
    if cold:
        shutil.rmtree(ROOT / ".cache" / "envdoctor" / "ssh-g", ignore_errors=True)
    out = ROOT / f"report-{n}.json"
    argv = [sys.executable, "-m", "envdoctor", "check", *(fleet.alias(i) for i in range(n)),
            "--ssh-config", str(fleet.config), "--parallel", str(parallel),
            "--format", "json", "--output", str(out)]
    measure, _, err = measured(argv, nofile=nofile, env={**os.environ, "HOME": str(ROOT)})
    measure.tool = "envdoctor" + (" (ssh -G cold)" if cold else "") + (f" (ulimit -n {nofile})" if nofile else "")
    measure.hosts = n
    try:
        report = json.loads(out.read_text())
        reached = sum(1 for h in report["hosts"]
                      if any(r["id"] == "host.reachable" and r["status"] == "pass" for r in h["results"]))
    except (OSError, ValueError, KeyError):
        reached = 0
    emfile = "Too many open files" in err or (out.exists() and "Too many open files" in out.read_text())
    measure.ok = measure.ok and reached == n and not emfile
    measure.note = f"{reached}/{n} reached" + (", EMFILE" if emfile else "")
    if reached != n:
        measure.note += f"; {err.strip().splitlines()[-1:] if err.strip() else ''}"
    out.unlink(missing_ok=True)
    return measure


def reference_run(fleet: SimFleet, n: int, parallel: int, *, same_ciphers: bool = False) -> Measure:
    """The loop with asyncssh's defaults; ``same_ciphers``: offering the ciphers in
    envdoctor's order (AES-GCM first on AES hardware), to show what that choice is worth."""
    from envdoctor.transport import ciphers
    from envdoctor.transport.ssh import _asyncssh_algorithms

    plan = ROOT / "plan.json"
    plan.write_text(json.dumps({
        "command": fleet.command, "stdin": str(fleet.stdin), "parallel": parallel,
        "key": str(fleet.client_key), "known_hosts": str(fleet.known_hosts),
        "hosts": [{"port": fleet.port_of(i)} for i in range(n)],
        "options": {"encryption_algs": ciphers.offered(None, _asyncssh_algorithms("cipher"), "bench")} if same_ciphers else {},
    }))
    measure, out, err = measured([sys.executable, "-c", REFERENCE, str(plan)])
    measure.tool, measure.hosts = "asyncssh loop" + (" (same ciphers)" if same_ciphers else ""), n
    try:
        summary = json.loads(out.strip().splitlines()[-1])
        measure.ok = measure.ok and summary["failed"] == 0
        measure.note = f"{summary['hosts'] - summary['failed']}/{n} reached"
    except (ValueError, IndexError, KeyError):
        measure.ok, measure.note = False, err.strip()[-200:]
    return measure


def startup_ms(repeat: int = 5) -> float:
    """Import time of `envdoctor check local` (cumulative, top-level modules), best of N."""
    best = float("inf")
    for _ in range(repeat):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "envdoctor", "check", "local", "--only", "host.python",
             "--format", "json"], capture_output=True, text=True, timeout=120, cwd=ROOT,
        )
        total = 0
        for line in proc.stderr.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[1].strip().isdigit() and not parts[2].startswith("  "):
                total += int(parts[1])  # cumulative microseconds of each top-level import
        best = min(best, total / 1000)
    return best


def diff_runs(fleet: SimFleet, n: int, parallel: int, repeat: int) -> list[Measure]:
    """check, check of a same = true group and diff of the same n hosts, taking turns (the
    machine's load drifts alike for the three); the best wall and the least CPU of each."""
    import diff_cost

    argvs = diff_cost.commands(ROOT, [fleet.alias(i) for i in range(n)], fleet.config)
    measured([*argvs["diff"], "--parallel", str(parallel)], env={**os.environ, "HOME": str(ROOT)})  # warm-up
    runs: dict[str, list[Measure]] = {tool: [] for tool in argvs}
    for _ in range(repeat):
        for tool, argv in argvs.items():
            measure, out, err = measured([*argv, "--parallel", str(parallel)], env={**os.environ, "HOME": str(ROOT)})
            hosts = (json.loads(out) if out.startswith("{") else {}).get("hosts") or []
            reached = sum(1 for h in hosts if "error" not in h and not any(
                r["id"] == "host.reachable" and r["status"] != "pass" for r in h.get("results", [])))
            measure.tool, measure.hosts = tool, n
            measure.ok = measure.ok and reached == n
            measure.note = f"{reached}/{n} reached" + ("" if measure.ok else f"; {err.strip()[-200:]}")
            runs[tool].append(measure)
    found = []
    for tool, measures in runs.items():
        best = min(measures, key=lambda m: m.wall)
        best.cpu = min(m.cpu for m in measures)
        found.append(best)
        print(table([best]).splitlines()[-1], flush=True)
    return found


def print_diff_cost(rows: list[Measure], host: dict[str, float]) -> None:
    check, same, diff = rows
    print(f"{check.hosts:>5} hosts: check of a same = true group (check + compare) wall {same.wall / check.wall - 1:+.0%}, "
          f"cpu {same.cpu / check.cpu - 1:+.0%} over check (target <= +20%); diff alone wall "
          f"{diff.wall / check.wall:.0%} of check, cpu {diff.cpu / check.cpu:.0%}")
    print(f"on a host (this machine, the job's {host['cold_files']:.0f} files of its distributions and a model folder): "
          f"digests {host['cold']:.2f} s cold, {host['warm']:.2f} s from the cache")


def table(rows: list[Measure]) -> str:
    head = (f"{'tool':<28} {'hosts':>5} {'wall s':>8} {'cpu s':>7} {'cpu ms/host':>11} "
            f"{'rss MB':>7} {'max fds':>7}  note")
    lines = [head, "-" * len(head)]
    for m in rows:
        lines.append(f"{m.tool:<28} {m.hosts:>5} {m.wall:>8.2f} {m.cpu:>7.2f} {m.cpu_ms_per_host:>11.2f} "
                     f"{m.rss_mb:>7.0f} {m.max_fds:>7}  {'' if m.ok else 'FAILED '}{m.note}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="32,128,1000")
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=64)
    parser.add_argument("--nofile", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3,
                        help="Runs per size, envdoctor and the loops taking turns; the best wall and the least CPU are kept.")
    parser.add_argument("--diff-hosts", type=int, default=128,
                        help="Hosts for the diff figures (check, check of a same = true group, diff); 0: none.")
    parser.add_argument("--diff-repeat", type=int, default=3, help="Runs of each diff figure; the best wall is kept.")
    parser.add_argument("--distinct", action="store_true",
                        help="Every host answers differently (its kernel release in each environment), as a "
                             "fleet of mixed images would; by default all answer alike, as one image does.")
    args = parser.parse_args()
    sizes = [int(s) for s in args.hosts.split(",")]

    if args.diff_hosts:
        sys.path.insert(0, str(REPO / "bench"))
        import diff_cost
    fleet = SimFleet(args.servers, max(sizes + [args.diff_hosts]), args.distinct)
    if args.diff_hosts:
        fleet.answers = diff_cost.record(ROOT)
    fleet.start()
    rows: list[Measure] = []
    diff_rows: list[Measure] = []
    try:
        for n in sizes:
            cold = envdoctor_run(fleet, n, args.parallel, cold=True)  # also fills the cache for the rest
            rows.append(cold)
            print(table([cold]).splitlines()[-1], flush=True)
            # Taking turns, so that the machine's load (2 shared cores) drifts alike for each;
            # of each, the best wall and the least CPU of its runs.
            runners = (reference_run, functools.partial(reference_run, same_ciphers=True), envdoctor_run)
            runs: list[list[Measure]] = [[] for _ in runners]
            for _ in range(args.repeat):
                for runner, measures in zip(runners, runs):
                    measures.append(runner(fleet, n, args.parallel))
            for measures in runs:
                best = min(measures, key=lambda m: m.wall)
                best.cpu = min(m.cpu for m in measures)
                best.note += f" (walls {' '.join(f'{m.wall:.2f}' for m in measures)}; cpus {' '.join(f'{m.cpu:.2f}' for m in measures)})"
                rows.append(best)
                print(table([best]).splitlines()[-1], flush=True)
        if args.nofile:
            rows.append(envdoctor_run(fleet, max(sizes), args.parallel, nofile=args.nofile))
        if args.diff_hosts:  # after the runs above: the ssh -G cache is warm for all three
            diff_rows = diff_runs(fleet, args.diff_hosts, args.parallel, args.diff_repeat)
    finally:
        fleet.stop()

    print()
    print(table(rows))
    print()
    print("answers: " + ("a different one from every host (--distinct)" if args.distinct else
                         "the same from every host, as from one image (--distinct: each differs)"))
    repeat = args.repeat
    for n in sizes:
        ref = next(m for m in rows if m.tool == "asyncssh loop" and m.hosts == n)
        env = next(m for m in rows if m.tool == "envdoctor" and m.hosts == n)
        cold = next(m for m in rows if m.tool == "envdoctor (ssh -G cold)" and m.hosts == n)
        same = next(m for m in rows if m.tool == "asyncssh loop (same ciphers)" and m.hosts == n)
        print(f"{n:>5} hosts: envdoctor wall {env.wall / ref.wall:.2f}x the reference (target <= 1.3x: "
              f"{'met' if env.wall / ref.wall <= 1.3 else 'NOT met'}), cpu {env.cpu / ref.cpu:.2f}x (target <= 1.5x: "
              f"{'met' if env.cpu / ref.cpu <= 1.5 else 'NOT met'}), best of {repeat} taking turns;\n             "
              f"{env.wall / same.wall:.2f}x the reference offering envdoctor's ciphers "
              f"(cpu {same.cpu_ms_per_host:.1f} ms/host);\n             "
              f"cpu {env.cpu_ms_per_host:.1f} ms/host (target <= 10), reference {ref.cpu_ms_per_host:.1f}; "
              f"rss {env.rss_mb:.0f} MB (target < 1024 at 1,000); first run after an SSH config change "
              f"(ssh -G for every host): wall {cold.wall / ref.wall:.2f}x, cpu {cold.cpu_ms_per_host:.1f} ms/host")
    if len(sizes) > 1:
        small, large = sizes[0], sizes[-1]
        env_s = next(m for m in rows if m.tool == "envdoctor" and m.hosts == small)
        env_l = next(m for m in rows if m.tool == "envdoctor" and m.hosts == large)
        print(f"marginal controller cpu per extra host ({small} -> {large}): "
              f"{1000 * (env_l.cpu - env_s.cpu) / (large - small):.2f} ms; "
              f"rss per extra host: {1024 * (env_l.rss_mb - env_s.rss_mb) / (large - small):.0f} KB")
    print(f"start-up: `envdoctor check local` imports {startup_ms():.0f} ms (best of 5; target < 150)")
    if diff_rows:
        print()
        print(table(diff_rows))
        print_diff_cost(diff_rows, diff_cost.host_cost(ROOT))


if __name__ == "__main__":
    main()
