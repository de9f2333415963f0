"""Benchmark: the daily `envdoctor fix HOST` against doing it by hand, over the loopback sshd.

The host is like the seed's: a venv with transformers and jinja2 from PyPI (no tiktoken at
first), a Kimi-like model folder whose tokenizer code imports tiktoken (tests/kimi_fixture.py),
and an inventory that names the venv and the model with ``trust_remote_code = true``. Each
run makes a fresh venv (at a new path, so that no cache of envdoctor's knows it) and removes
it at the end. Measured, wall time of whole commands as a user runs them:

(a) cold: the first `envdoctor fix HOST`, which installs tiktoken, against the by-hand
    sequence (ssh HOST python -c 'load tokenizer', which fails; ssh HOST pip install tiktoken;
    ssh HOST python -c 'load tokenizer' again). Target: at most 1.5x.
(b) healthy: `envdoctor fix HOST` again (median of --repeat) against the by-hand
    `ssh HOST python -c 'load tokenizer'` (median of --repeat). Targets: at most 2 s, and at
    most the by-hand time.

Usage: python bench/daily_bench.py [--repeat 5] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import make_venv  # noqa: E402  # after the sys.path line above
from tests.kimi_fixture import build_kimi  # noqa: E402
from tests.sshd import SSHServer, start_sshd  # noqa: E402

BENCH = Path("/tmp/envdoctor-bench/daily")
HOST = "ct200"
COLD_RATIO = 1.5
HEALTHY_SECONDS = 2.0
LOAD = ("import sys; from transformers import AutoTokenizer; "
        "t = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True); print(type(t).__name__, len(t))")


def timed(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                          timeout=900)
    return time.perf_counter() - start, proc


class Host:
    """The loopback host: the sshd, the venv and the model, and the commands run against it."""

    def __init__(self, server: SSHServer, venv: Path, model: Path, work: Path) -> None:
        self.server, self.venv, self.model, self.work = server, venv, model, work
        self.env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        self.env.pop("VIRTUAL_ENV", None)
        # As installed by pip, envdoctor's modules are compiled once: not again on every run.
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.config = work / "envdoctor.toml"
        self.config.write_text(f'[hosts.{HOST}]\nvenv = "{venv}"\nmodels = ["{model}"]\n'
                               "trust_remote_code = true\n")

    def ssh(self, *remote: str) -> tuple[float, subprocess.CompletedProcess]:
        # One command line for the remote shell, each word quoted as a user would type it.
        return timed(["ssh", "-F", str(self.server.ssh_config), "-o", "BatchMode=yes", HOST, shlex.join(remote)],
                     self.env)

    def load_by_hand(self) -> tuple[float, subprocess.CompletedProcess]:
        return self.ssh(f"{self.venv}/bin/python", "-c", LOAD, str(self.model))

    def pip(self, *args: str) -> tuple[float, subprocess.CompletedProcess]:
        return self.ssh(f"{self.venv}/bin/pip", *args)

    def fix(self) -> tuple[float, subprocess.CompletedProcess]:
        return timed([sys.executable, "-m", "envdoctor", "fix", HOST, "--ssh-config", str(self.server.ssh_config),
                      "--format", "json"], self.env, cwd=self.work)


def summary(proc: subprocess.CompletedProcess) -> str:
    """The fix's actions and the checks that did not pass, in one line."""
    try:
        host = json.loads(proc.stdout)["hosts"][0]
    except (ValueError, KeyError, IndexError):
        return f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
    actions = [a.get("command", "")[-60:] for a in host.get("actions", [])]
    failing = [f"{r['id']}={r['status']}" for r in host.get("results", []) if r["status"] not in ("pass", "skipped")]
    return f"exit {proc.returncode}; actions {actions}; not passing {failing}"


def cold(host: Host) -> None:
    first, proc = host.load_by_hand()
    assert proc.returncode != 0 and "tiktoken" in proc.stderr, proc.stderr[-500:]
    install, proc = host.pip("install", "-q", "tiktoken")
    assert proc.returncode == 0, proc.stderr[-500:]
    again, proc = host.load_by_hand()
    assert proc.returncode == 0, proc.stderr[-500:]
    by_hand = first + install + again
    uninstall, proc = host.pip("uninstall", "-y", "-q", "tiktoken")
    assert proc.returncode == 0, proc.stderr[-500:]
    fixed, proc = host.fix()
    ratio = fixed / by_hand
    print(f"(a) cold, tiktoken missing:   envdoctor fix {fixed:6.2f} s   by hand {by_hand:6.2f} s "
          f"(load {first:.2f} + pip install {install:.2f} + load {again:.2f})   ratio {ratio:.2f}x   "
          f"target <= {COLD_RATIO}x: {'met' if ratio <= COLD_RATIO else 'NOT met'}")
    print(f"    fix: {summary(proc)}")


def healthy(host: Host, repeat: int) -> None:
    fixes, loads = [], []
    last = None
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
    parser.add_argument("--keep", action="store_true", help="keep the venv and model folder for a look")
    args = parser.parse_args()
    BENCH.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=BENCH))
    server = start_sshd(work / "sshd", [HOST])
    try:
        started = time.perf_counter()
        venv = make_venv(work / "venv", ["transformers", "jinja2"], pip_args=["--disable-pip-version-check"])
        model = build_kimi(work / "models" / "Kimi-K2.6", mark=work / "MARK")
        print(f"host: {HOST} over the loopback sshd; venv {venv} (transformers, jinja2; made in "
              f"{time.perf_counter() - started:.0f} s); model {model}; load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} cores")
        host = Host(server, venv, model, work)
        cold(host)
        healthy(host, args.repeat)
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
