"""Benchmark: the daily `envdoctor fix HOST` against doing it by hand, over the loopback sshd.

The host is like the seed's: a venv (~/venv) with transformers and jinja2 from PyPI (no
tiktoken at first) and a Kimi-like model folder (~/models/Kimi-K2.6) whose tokenizer code
imports tiktoken (tests/kimi_fixture.py). The sshd gives the session a HOME of its own (pip's
cache stays the user's), so that a cold run starts from a host and a controller that envdoctor
has never seen: their envdoctor caches are emptied, then `envdoctor init HOST` writes the
inventory (not timed). Measured, wall time of whole commands as a user runs them:

(a) cold: the first `envdoctor fix HOST --trust-remote-code` after init, which installs
    tiktoken, against the by-hand
    sequence of issue 41 (ssh HOST ls -d the venv; ssh HOST which pip; ssh HOST VENV/bin/pip
    install tiktoken; ssh HOST VENV/bin/python -c 'load tokenizer'), best of --cold-repeat,
    taking turns; after each, what the install added is uninstalled again. Target: at most
    1.2x. Also shown: the older by-hand sequence that first finds the failure by loading
    (a failing load, the install, the load again). Each phase of envdoctor's best run is
    printed from its -v log lines as they arrive: connect, probe (with the tokenizer load the
    probe made, from the probe's own section times), pip's dry-run plan, the install, the
    re-check (its probe and its tokenizer load) and the report.
(b) healthy: `envdoctor fix HOST` again (median of --repeat) against the by-hand
    `ssh HOST python -c 'load tokenizer'` (median of --repeat). Targets: at most 1 s, and at
    most the by-hand time.

Usage: python bench/daily_bench.py [--repeat 5] [--cold-repeat 3] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import make_venv  # noqa: E402  # after the sys.path line above
from tests.kimi_fixture import build_kimi  # noqa: E402
from tests.sshd import SSHServer, start_sshd  # noqa: E402

BENCH = Path("/tmp/envdoctor-bench/daily")
HOST = "ct200"
COLD_RATIO = 1.2
HEALTHY_SECONDS = 1.0
LOAD = ("import sys; from transformers import AutoTokenizer; "
        "t = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True); print(type(t).__name__, len(t))")
#: An event of envdoctor's -v log: ``[info     ] probe_answered   key=value ...``.
LOG_LINE = re.compile(r"^\[\s*\w+\s*\]\s+(\S+)\s*(.*)$")


def timed(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                          timeout=900)
    return time.perf_counter() - start, proc


@dataclass
class Stamped:
    """A command's wall time, its output, and each of its stderr lines with when it arrived."""

    wall: float
    proc: subprocess.CompletedProcess
    lines: list[tuple[float, str]] = field(default_factory=list)

    def events(self) -> list[tuple[float, str, str]]:
        found = []
        for at, line in self.lines:
            match = LOG_LINE.match(line)
            if match:
                found.append((at, match.group(1), match.group(2)))
        return found


def stamped(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> Stamped:
    """Run argv; stderr read line by line as it arrives (the phases of a -v run)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=env, cwd=cwd, text=True)
    lines: list[tuple[float, str]] = []
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    for line in proc.stderr:  # type: ignore[union-attr]
        lines.append((time.perf_counter() - start, line.rstrip("\n")))
    proc.wait(900)
    reader.join()
    wall = time.perf_counter() - start
    done = subprocess.CompletedProcess(argv, proc.returncode, "".join(out), "\n".join(line for _, line in lines))
    return Stamped(wall, done, lines)


class Host:
    """The loopback host: the sshd, the venv and the model, and the commands run against it."""

    def __init__(self, server: SSHServer, venv: Path, model: Path, work: Path, home: Path) -> None:
        self.server, self.venv, self.model, self.work, self.home = server, venv, model, work, home
        self.env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        self.env.pop("VIRTUAL_ENV", None)
        # As installed by pip, envdoctor's modules are compiled once: not again on every run.
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        # The controller's own caches (ssh -G answers, held programs, code readings): its own.
        self.controller_cache = work / "controller-cache"
        self.env["XDG_CACHE_HOME"] = str(self.controller_cache)
        self.config = work / "envdoctor.toml"
        self.baseline = self.installed()

    def ssh(self, *remote: str) -> tuple[float, subprocess.CompletedProcess]:
        # One command line for the remote shell, each word quoted as a user would type it.
        return timed(["ssh", "-F", str(self.server.ssh_config), "-o", "BatchMode=yes", HOST, shlex.join(remote)],
                     self.env)

    def load_by_hand(self) -> tuple[float, subprocess.CompletedProcess]:
        return self.ssh(f"{self.venv}/bin/python", "-c", LOAD, str(self.model))

    def pip(self, *args: str) -> tuple[float, subprocess.CompletedProcess]:
        return self.ssh(f"{self.venv}/bin/pip", *args)

    def installed(self) -> set[str]:
        proc = subprocess.run([str(self.venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
                              capture_output=True, text=True, check=True, env=self.env)
        return {d["name"].lower() for d in json.loads(proc.stdout)}

    def forget(self) -> None:
        """Back to the fresh host: what the last install added uninstalled, and envdoctor's
        caches (the host's under the session's HOME, the controller's) emptied."""
        added = sorted(self.installed() - self.baseline)
        if added:
            proc = subprocess.run([str(self.venv / "bin" / "python"), "-m", "pip", "uninstall", "-y", "-q", *added],
                                  capture_output=True, text=True, env=self.env)
            assert proc.returncode == 0, proc.stderr[-500:]
        shutil.rmtree(self.home / ".cache" / "envdoctor", ignore_errors=True)
        shutil.rmtree(self.controller_cache, ignore_errors=True)

    def init(self) -> None:
        """`envdoctor init HOST` (not timed): the inventory a user has before the first fix.
        It finds the venv and the model under the session's HOME (~/venv*, ~/models)."""
        self.config.unlink(missing_ok=True)
        elapsed, proc = timed([sys.executable, "-m", "envdoctor", "init", HOST, "--ssh-config",
                               str(self.server.ssh_config)], self.env, cwd=self.work)
        text = self.config.read_text() if self.config.exists() else ""
        if proc.returncode != 0 or str(self.venv) not in text or str(self.model) not in text:
            raise SystemExit(f"init did not write the venv and the model: exit {proc.returncode}\n{text}\n"
                             f"{proc.stderr[-500:]}")

    def fix_argv(self, *extra: str) -> list[str]:
        return [sys.executable, "-m", "envdoctor", *extra, "fix", HOST, "--ssh-config", str(self.server.ssh_config),
                "--trust-remote-code", "--format", "json"]

    def fix(self) -> tuple[float, subprocess.CompletedProcess]:
        return timed(self.fix_argv(), self.env, cwd=self.work)

    def fix_logged(self) -> Stamped:
        return stamped(self.fix_argv("-v"), self.env, cwd=self.work)


def summary(proc: subprocess.CompletedProcess) -> str:
    """The fix's actions and the checks that did not pass, in one line."""
    try:
        host = json.loads(proc.stdout)["hosts"][0]
    except (ValueError, KeyError, IndexError):
        return f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
    actions = [a.get("command", "")[-60:] for a in host.get("actions", [])]
    failing = [f"{r['id']}={r['status']}" for r in host.get("results", []) if r["status"] not in ("pass", "skipped")]
    return f"exit {proc.returncode}; actions {actions}; not passing {failing}"


def _models_seconds(fields: str) -> str:
    """The models section's time (its tokenizer load) from a probe_answered line."""
    match = re.search(r"'models': ([0-9.]+)", fields)
    return f"{float(match.group(1)):.2f} s" if match else "-"


def phases(run: Stamped) -> list[tuple[str, float, str]]:
    """(phase, seconds, note) from a -v fix: the gaps between the log events that mark them."""
    found: list[tuple[str, float, str]] = []
    last, probes = 0.0, 0
    for at, event, fields in run.events():
        if event == "connected":
            found.append(("start-up and connect", at - last, ""))
        elif event == "probe_answered":
            probes += 1
            name = "probe" if probes == 1 else "re-check"
            found.append((name, at - last, f"tokenizer load (the models section) {_models_seconds(fields)}"))
        elif event == "remedy_start":
            if at - last > 0.05:
                found.append(("judging", at - last, ""))
        elif event == "remedy_done":
            name = "install" if any(p[0] == "pip's dry-run plan" for p in found) else "pip's dry-run plan"
            found.append((name, at - last, ""))
        elif event == "install_judged":
            continue
        else:
            continue
        last = at
    found.append(("report and exit", run.wall - last, ""))
    return found


def by_hand_cold(host: Host) -> tuple[float, str]:
    """Issue 41's sequence: find the venv, which pip, the venv's pip install, load."""
    find, proc = host.ssh("sh", "-c", "ls -d ~/venv*")
    assert proc.returncode == 0, proc.stderr[-500:]
    which, proc = host.ssh("which", "pip")  # (it names the system pip: the venv's is used)
    install, proc = host.pip("install", "-q", "tiktoken")
    assert proc.returncode == 0, proc.stderr[-500:]
    load, proc = host.load_by_hand()
    assert proc.returncode == 0, proc.stderr[-500:]
    total = find + which + install + load
    return total, f"ls {find:.2f} + which pip {which:.2f} + pip install {install:.2f} + load {load:.2f}"


def by_hand_old(host: Host) -> tuple[float, str]:
    """The sequence that finds the failure by loading: a failing load, the install, the load."""
    first, proc = host.load_by_hand()
    assert proc.returncode != 0 and "tiktoken" in proc.stderr, proc.stderr[-500:]
    install, proc = host.pip("install", "-q", "tiktoken")
    assert proc.returncode == 0, proc.stderr[-500:]
    again, proc = host.load_by_hand()
    assert proc.returncode == 0, proc.stderr[-500:]
    return first + install + again, f"load {first:.2f} + pip install {install:.2f} + load {again:.2f}"


def cold(host: Host, repeat: int) -> None:
    hands, olds, fixes = [], [], []
    for _ in range(repeat):
        host.forget()
        hands.append(by_hand_cold(host))
        host.forget()
        olds.append(by_hand_old(host))
        host.forget()
        host.init()
        fixes.append(host.fix_logged())
    host.forget()
    best = min(fixes, key=lambda r: r.wall)
    hand = min(hands)
    old = min(olds)
    ratio = best.wall / hand[0]
    print(f"(a) cold, tiktoken missing, best of {repeat}: envdoctor fix {best.wall:6.2f} s "
          f"(runs {' '.join(f'{r.wall:.2f}' for r in fixes)})")
    print(f"    by hand (issue 41) {hand[0]:6.2f} s ({hand[1]}; runs {' '.join(f'{h[0]:.2f}' for h in hands)})   "
          f"ratio {ratio:.2f}x   target <= {COLD_RATIO}x: {'met' if ratio <= COLD_RATIO else 'NOT met'}")
    print(f"    by hand, finding it by a failing load {old[0]:6.2f} s ({old[1]})   ratio {best.wall / old[0]:.2f}x")
    print("    envdoctor's phases (best run, from its -v log):")
    for name, seconds, note in phases(best):
        print(f"      {name:<22} {seconds:6.2f} s   {note}")
    print(f"    fix: {summary(best.proc)}")


def healthy(host: Host, repeat: int) -> None:
    fixes, loads = [], []
    last = None
    host.init()
    host.fix()  # the cold run above was forgotten: this one installs again
    for _ in range(repeat):
        elapsed, last = host.fix()
        fixes.append(elapsed)
        elapsed, proc = host.load_by_hand()
        assert proc.returncode == 0, proc.stderr[-500:]
        loads.append(elapsed)
    fix, load = statistics.median(fixes), statistics.median(loads)
    print(f"(b) healthy, median of {repeat}: envdoctor fix {fix:6.2f} s (runs {' '.join(f'{s:.2f}' for s in fixes)})"
          f"   by hand load {load:6.2f} s (runs {' '.join(f'{s:.2f}' for s in loads)})")
    print(f"    target <= {HEALTHY_SECONDS} s: {'met' if fix <= HEALTHY_SECONDS else 'NOT met'};   "
          f"target <= by hand: {'met' if fix <= load else 'NOT met'}")
    print(f"    fix: {summary(last)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cold-repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the venv and model folder for a look")
    parser.add_argument("--skip-healthy", action="store_true")
    args = parser.parse_args()
    BENCH.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=BENCH))
    home = work / "home"
    home.mkdir()
    pip_cache = Path(os.environ.get("PIP_CACHE_DIR") or Path.home() / ".cache" / "pip")
    # The session's own HOME (its envdoctor caches can be emptied), the user's pip cache.
    server = start_sshd(work / "sshd", [HOST], extra_config=[f"SetEnv HOME={home} PIP_CACHE_DIR={pip_cache}"])
    try:
        started = time.perf_counter()
        venv = make_venv(home / "venv", ["transformers", "jinja2"], pip_args=["--disable-pip-version-check"])
        model = build_kimi(home / "models" / "Kimi-K2.6", mark=work / "MARK")
        print(f"host: {HOST} over the loopback sshd; venv {venv} (transformers, jinja2; made in "
              f"{time.perf_counter() - started:.0f} s); model {model}; load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} cores")
        host = Host(server, venv, model, work, home)
        cold(host, args.cold_repeat)
        if not args.skip_healthy:
            healthy(host, args.repeat)
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
