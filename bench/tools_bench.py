"""Scale benchmark (issue 6): envdoctor vs. the by-hand loop, Ansible and pyinfra, through a
50 ms round-trip link.

Every "host" is an alias of one loopback sshd reached through fault proxies that add 25 ms
in each direction (tests/faultproxy.py). For 1, 32 and 128 hosts it measures the wall time,
the controller's CPU time (user+sys of the tool's process tree, from wait4), and SSH
connections and sessions per host (connections counted by the proxies, sessions from the
sshd's VERBOSE log). All tools gather the same facts: default python3 and pip, the venv's
interpreter and version, its installed packages and their consistency, GPU and disk.

ansible-core and pyinfra are installed from PyPI into the benchmark's own venv
(/tmp/envdoctor-bench/venv). Not run by CI. On 2 shared cores the full run takes about 15
minutes, most of it Ansible and pyinfra at 128 hosts; envdoctor alone takes 2:

    python bench/tools_bench.py [--hosts 1,32,128] [--hand-hosts 1,4] [--parallel 32]
                                [--skip ansible,pyinfra,hand]

Every host here is the same machine, so at 128 hosts the hosts' own work (128 probes, or
128 x 7 commands, on the controller's 2 cores) weighs in every tool's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
import venv
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.faultproxy import FaultProxy, Faults  # noqa: E402  # the repo root must be on sys.path first
from tests.sshd import SSHServer, start_sshd  # noqa: E402  # as above

ROOT = Path("/tmp/envdoctor-bench")
TOOLS_VENV = ROOT / "venv"
HALF_RTT = 0.025
PROXIES = 4

#: The facts, as a person gathers them by hand; `|| true` where a host may lack the tool.
FACTS = [
    "command -v python3; command -v pip || true",
    "python3 -c 'import sys; print(sys.prefix, sys.version)'",
    "{venv}/bin/python -c 'import sys; print(sys.version)'",
    "{venv}/bin/python -m pip list --format=json",
    "{venv}/bin/python -m pip check || true",
    "nvidia-smi -L || true",
    "df -k {venv}",
]


@dataclass
class Run:
    tool: str
    hosts: int
    wall: float
    cpu: float
    connections: int
    sessions: int
    ok: bool
    note: str = ""


def run_measured(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
                 timeout: float = 900) -> tuple[float, int, str, str]:
    """Wall time, exit status and output of one command."""
    begin = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=timeout)
    return time.monotonic() - begin, proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def children_cpu() -> float:
    """user+sys of every reaped child and its descendants: deltas around one run are its CPU."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Lab:
    """The sshd, its proxies, the aliases, and the venv the tools look at."""

    def __init__(self, max_hosts: int) -> None:
        shutil.rmtree(ROOT / "lab", ignore_errors=True)
        self.server: SSHServer = start_sshd(ROOT / "lab" / "sshd", [], max_startups="1000:30:1000")
        self.proxies = [FaultProxy(self.server.port, Faults(latency_up=HALF_RTT, latency_down=HALF_RTT),
                                   lifetime=3600).start() for _ in range(PROXIES)]
        self.target_venv = ROOT / "lab" / "job venv"
        venv.EnvBuilder(with_pip=True).create(self.target_venv)
        self.aliases = [f"h{i:03d}" for i in range(max_hosts)]
        key = (self.server.root / "host_ed25519.pub").read_text().strip()
        self.known_hosts = ROOT / "lab" / "known_hosts"
        self.known_hosts.write_text("".join(f"[127.0.0.1]:{p.port} {key}\n" for p in self.proxies))
        lines = []
        for i, alias in enumerate(self.aliases):
            lines += [f"Host {alias}", "    HostName 127.0.0.1", f"    Port {self.port_of(i)}",
                      f"    User {self.server.user}", f"    IdentityFile {self.server.client_key}",
                      "    IdentitiesOnly yes", f"    UserKnownHostsFile {self.known_hosts}",
                      "    StrictHostKeyChecking yes", ""]
        self.ssh_config = ROOT / "lab" / "ssh_config"
        self.ssh_config.write_text("\n".join(lines))

    def port_of(self, index: int) -> int:
        return self.proxies[index % len(self.proxies)].port

    def connections(self) -> int:
        return sum(p.stats.connections for p in self.proxies)

    def reset(self) -> None:
        for proxy in self.proxies:
            proxy.reset_stats()

    def sessions_since(self, offset: int) -> int:
        text = self.server.log.read_bytes()[offset:].decode("utf-8", "replace")
        return len(re.findall(r"Starting session: ", text))

    def log_size(self) -> int:
        return self.server.log.stat().st_size if self.server.log.exists() else 0

    def measure(self, tool: str, hosts: int, argv: list[str], *, env: dict[str, str] | None = None,
                cwd: Path | None = None, ok=lambda code, out: code == 0) -> Run:  # type: ignore[no-untyped-def]  # predicate
        self.reset()
        offset = self.log_size()
        cpu0 = children_cpu()
        wall, code, out, err = run_measured(argv, env=env, cwd=cwd)
        cpu = children_cpu() - cpu0
        good = ok(code, out)
        note = "" if good else (err.strip().splitlines() or out.strip().splitlines() or ["?"])[-1][:100]
        return Run(tool, hosts, wall, cpu, self.connections(), self.sessions_since(offset), good, note)

    def stop(self) -> None:
        for proxy in self.proxies:
            proxy.stop()
        self.server.stop()


def envdoctor_run(lab: Lab, n: int, parallel: int | None = None) -> Run:
    parallel = min(n, parallel) if parallel else n
    argv = [sys.executable, "-m", "envdoctor", "check", *lab.aliases[:n], "--ssh-config", str(lab.ssh_config),
            "--venv", str(lab.target_venv), "--format", "json", "--parallel", str(parallel)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    def ok(code: int, out: str) -> bool:
        try:
            hosts = json.loads(out)["hosts"]
        except ValueError:
            return False
        reach = [next(r for r in h["results"] if r["id"] == "host.reachable") for h in hosts]
        return len(hosts) == n and all(r["status"] == "pass" for r in reach)

    name = "envdoctor" if parallel == n else f"envdoctor --parallel {parallel}"
    return lab.measure(name, n, argv, env=env, ok=ok)


def by_hand_run(lab: Lab, n: int) -> Run:
    script = ROOT / "lab" / "by_hand.sh"
    lines = ["#!/bin/sh", "set -u"]
    for alias in lab.aliases[:n]:
        for fact in FACTS:
            command = fact.format(venv=f"'{lab.target_venv}'")
            lines.append(f"ssh -F '{lab.ssh_config}' -o BatchMode=yes {alias} \"{command}\" >/dev/null || exit 1")
    script.write_text("\n".join(lines) + "\n")
    return lab.measure("by hand (ssh per fact)", n, ["/bin/sh", str(script)])


def ansible_run(lab: Lab, n: int) -> Run:
    folder = ROOT / "lab" / "ansible"
    folder.mkdir(exist_ok=True)
    inventory = folder / "hosts.ini"
    inventory.write_text("[fleet]\n" + "\n".join(lab.aliases[:n]) + "\n\n[fleet:vars]\n"
                         "ansible_python_interpreter=/usr/bin/python3\n")
    tasks = [{"name": f"fact {i}", "shell": fact.format(venv=f"'{lab.target_venv}'"), "changed_when": False}
             for i, fact in enumerate(FACTS)]
    playbook = folder / "facts.yml"
    playbook.write_text(json.dumps([{"hosts": "fleet", "gather_facts": False, "tasks": tasks}]))
    control = ROOT / "lab" / "cp"
    control.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_FORKS": str(max(n, 1)),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_SSH_ARGS": f"-F {lab.ssh_config} -o ControlMaster=auto -o ControlPersist=60s",
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control),
        "ANSIBLE_LOCAL_TEMP": str(folder / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_STDOUT_CALLBACK": "default",
    }
    argv = [str(TOOLS_VENV / "bin" / "ansible-playbook"), "-i", str(inventory), str(playbook)]
    run = lab.measure("ansible-core (pipelining)", n, argv, env=env)
    # ControlPersist masters outlive the run (their CPU is not in the figure: they are not
    # reaped by us); close each through its own socket so the next run starts cold.
    for sock in control.iterdir():
        subprocess.run(["ssh", "-F", str(lab.ssh_config), "-o", f"ControlPath={sock}", "-O", "exit", "h000"],
                       capture_output=True, timeout=30)
    return run


def pyinfra_run(lab: Lab, n: int) -> Run:
    folder = ROOT / "lab" / "pyinfra"
    folder.mkdir(exist_ok=True)
    data = {"ssh_config_file": str(lab.ssh_config), "ssh_known_hosts_file": str(lab.known_hosts),
            "ssh_strict_host_key_checking": "yes"}
    (folder / "inventory.py").write_text(f"fleet = [(a, {data!r}) for a in {lab.aliases[:n]!r}]\n")
    commands = [fact.format(venv=f"'{lab.target_venv}'") for fact in FACTS]
    (folder / "deploy.py").write_text(
        "from pyinfra import host\nfrom pyinfra.facts.server import Command\n"
        f"for command in {commands!r}:\n    host.get_fact(Command, command=command)\n"
    )
    argv = [str(TOOLS_VENV / "bin" / "pyinfra"), "inventory.py", "deploy.py", "-y", "--parallel", str(max(n, 1))]
    return lab.measure("pyinfra", n, argv, cwd=folder)


def ensure_tools() -> None:
    if (TOOLS_VENV / "bin" / "ansible-playbook").exists() and (TOOLS_VENV / "bin" / "pyinfra").exists():
        return
    venv.EnvBuilder(with_pip=True).create(TOOLS_VENV)
    subprocess.run([str(TOOLS_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "ansible-core", "pyinfra"],
                   check=True)


def table(runs: list[Run]) -> str:
    rows = [f"{'tool':<28} {'hosts':>5} {'wall s':>8} {'CPU s':>7} {'CPU ms/host':>11} "
            f"{'conn/host':>9} {'sess/host':>9}  ok"]
    for r in runs:
        rows.append(f"{r.tool:<28} {r.hosts:>5} {r.wall:>8.2f} {r.cpu:>7.2f} {1000 * r.cpu / r.hosts:>11.1f} "
                    f"{r.connections / r.hosts:>9.2f} {r.sessions / r.hosts:>9.2f}  {'yes' if r.ok else 'NO ' + r.note}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,32,128")
    parser.add_argument("--hand-hosts", default="1,4", help="by-hand loop sizes (it is sequential: linear)")
    parser.add_argument("--skip", default="", help="comma list of ansible,pyinfra,hand")
    parser.add_argument("--parallel", type=int, default=None,
                        help="also run envdoctor with this --parallel (default: only --parallel N for N hosts)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.hosts.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    ROOT.mkdir(exist_ok=True)
    if not {"ansible", "pyinfra"} <= skip:
        ensure_tools()
    lab = Lab(max(sizes))
    runs: list[Run] = []
    try:
        envdoctor_run(lab, 1)  # warm the page cache and the host's bytecode once
        for n in sizes:
            runs.append(envdoctor_run(lab, n))
            print(table(runs[-1:]).splitlines()[1], flush=True)
            if args.parallel and args.parallel < n:
                runs.append(envdoctor_run(lab, n, args.parallel))
                print(table(runs[-1:]).splitlines()[1], flush=True)
            if "ansible" not in skip:
                runs.append(ansible_run(lab, n))
                print(table(runs[-1:]).splitlines()[1], flush=True)
            if "pyinfra" not in skip:
                runs.append(pyinfra_run(lab, n))
                print(table(runs[-1:]).splitlines()[1], flush=True)
        if "hand" not in skip:
            for n in [int(x) for x in args.hand_hosts.split(",")]:
                runs.append(by_hand_run(lab, n))
                print(table(runs[-1:]).splitlines()[1], flush=True)
    finally:
        lab.stop()
    print()
    print(f"link: {2 * HALF_RTT * 1000:.0f} ms round trip through {PROXIES} proxies; one sshd on 127.0.0.1; "
          f"{os.cpu_count()} CPUs")
    print(table(runs))
    print()
    summarize(runs)


def summarize(runs: list[Run]) -> None:
    by = {(r.tool if r.tool.startswith("envdoctor") else r.tool.split()[0], r.hosts): r for r in runs}
    for n in sorted({r.hosts for r in runs}):
        ed = by.get(("envdoctor", n))
        if ed is None:
            continue
        parts = [f"{n} hosts: envdoctor {ed.wall:.2f}s"]
        for name, target in (("ansible-core", 6.0), ("pyinfra", 2.5)):
            other = by.get((name, n))
            if other:
                ratio = other.wall / ed.wall
                parts.append(f"{ratio:.1f}x faster than {name} (target {target:g}x: "
                             f"{'met' if ratio >= target else 'MISSED'})")
        parts.append(f"CPU {1000 * ed.cpu / n:.1f} ms/host (target 20: {'met' if ed.cpu / n <= 0.020 else 'MISSED'})")
        parts.append(f"{ed.connections / n:.2f} connections/host")
        print("; ".join(parts))
    one, big = by.get(("envdoctor", 1)), max((r for r in runs if r.tool == "envdoctor"), key=lambda r: r.hosts,
                                             default=None)
    if one and big and big.hosts > 1:
        marginal = (big.cpu - one.cpu) / (big.hosts - 1)
        print(f"envdoctor marginal CPU per extra host (start-up excluded): {1000 * marginal:.1f} ms")
    hand = [r for r in runs if r.tool.startswith("by hand")]
    if hand:
        per_host = max(hand, key=lambda r: r.hosts).wall / max(hand, key=lambda r: r.hosts).hosts
        print(f"by hand: {per_host:.2f}s per host, sequential; extrapolated: 32 hosts {32 * per_host:.0f}s, "
              f"128 hosts {128 * per_host:.0f}s")


if __name__ == "__main__":
    main()
