"""Benchmark: every command on the serving stacks users run, cold and warm, locally and over sshd.

The stacks are tests/real_stacks.py's (vLLM + speculators, SGLang), built with uv from its
cache and kept between runs (``$ENVDOCTOR_STACKS_DIR``). For each stack and each way of
reaching it (``local``, then an alias of a loopback sshd started here as in the tests), this
times whole commands as a user runs them:

- ``check HOST --venv V`` cold (no envdoctor cache on the host nor on the controller; the page
  cache as it is) and warm (right after); targets 30 s and 3 s;
- ``snapshot``, ``fix`` (the stack is consistent: it must change nothing) and ``audit``, cold;
  target 30 s each;

and for each command the peak resident memory of every envdoctor process of the run (the
controller, the probe, its workers: each process's own VmHWM, sampled from /proc every 0.1 s;
target 500 MB), the probe's time per section (its end record, logged by ``-v``), and the
verdicts beside their authorities (``uv pip check``). "Cold" moves the user's
``~/.cache/envdoctor`` and the controller's ``$XDG_CACHE_HOME/envdoctor`` aside for the run and
puts them back at the end.

Usage: python bench/real_stack_bench.py [--stack vllm --stack sglang] [--local-only] [--json FILE] [--tests]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.real_stacks import STACKS, build_stack, find_uv  # noqa: E402  # after the sys.path line
from tests.sshd import find_sshd, start_sshd  # noqa: E402

COLD_SECONDS, WARM_SECONDS, RSS_MB = 30.0, 3.0, 500.0
HOST_CACHE = Path.home() / ".cache" / "envdoctor"
ALIAS = "ct200"


class PeakMemory:
    """The largest VmHWM (a process's own peak RSS) of the processes that belong to one run:
    every descendant of the command, and, over SSH, every process whose environment carries
    the run's ENVDOCTOR_RUN_ID (the probe under sshd is no descendant of ours)."""

    def __init__(self, root_pid: int, run_id: str) -> None:
        self.root_pid, self.run_id = root_pid, run_id.encode()
        self.peak_kb, self.peak_name = 0, ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> tuple[float, str]:
        self._stop.set()
        self._thread.join()
        return self.peak_kb / 1024, self.peak_name

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            parents: dict[int, int] = {}
            mine: set[int] = set()
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                pid = int(entry)
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text()
                    parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
                    if self.run_id and self.run_id in Path(f"/proc/{pid}/environ").read_bytes():
                        mine.add(pid)
                except (OSError, ValueError, IndexError):
                    continue
            for pid in parents:
                walk, hops = pid, 0
                while walk in parents and hops < 64:
                    if walk == self.root_pid:
                        mine.add(pid)
                        break
                    walk, hops = parents[walk], hops + 1
            for pid in mine:
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                    hwm = int(re.search(r"VmHWM:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
                    name = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:60].decode("utf-8", "replace")
                except (OSError, AttributeError):
                    continue
                if hwm > self.peak_kb:
                    self.peak_kb, self.peak_name = hwm, name


def run(argv: list[str], env: dict[str, str], cwd: Path) -> dict:
    """One envdoctor command: wall time, exit status, peak RSS, the report and the probe's sections."""
    run_id = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    env = {**env, "ENVDOCTOR_RUN_ID": run_id}
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                            stdin=subprocess.DEVNULL)
    memory = PeakMemory(proc.pid, run_id)
    out, err = proc.communicate(timeout=1800)
    wall = time.perf_counter() - started
    peak_mb, peak_name = memory.stop()
    text = err.decode("utf-8", "replace")
    sections: dict[str, float] = {}
    for match in re.finditer(r"probe_answered.*?seconds=(\{[^}]*\})", text):
        try:
            sections.update(json.loads(match.group(1).replace("'", '"')))
        except ValueError:
            pass
    try:
        report = json.loads(out)
    except ValueError:
        report = None
    foreign = [line for line in text.splitlines() if line.strip() and not _is_envdoctor_log(line)]
    return {"argv": argv[1:], "wall": wall, "exit": proc.returncode, "peak_mb": peak_mb, "peak_process": peak_name,
            "sections": sections, "report": report, "stderr_foreign": foreign[:10]}


def _is_envdoctor_log(line: str) -> bool:
    # structlog's console lines (-v): "[info     ] event  key=value", maybe after a timestamp
    return bool(re.match(r"^(\S+ )?\[\s*(debug|info|warning|error)\s*\]", line))


def verdicts(report: dict | None) -> dict[str, list[str]]:
    """The results that are not pass/skipped, by status, each as 'id: message'."""
    found: dict[str, list[str]] = {}
    if not report:
        return found
    for host in report.get("hosts", []):
        for result in host.get("results", []):
            if result.get("status") not in ("pass", "skipped"):
                found.setdefault(result["status"], []).append(f"{result['id']}: {result.get('message', '')[:160]}")
    return found


def authorities(venv: Path) -> dict[str, str]:
    uv = find_uv()
    done = subprocess.run([uv, "pip", "check", "--python", str(venv / "bin" / "python")], capture_output=True,
                          text=True, timeout=300)
    return {"uv pip check": (done.stdout + done.stderr).strip().splitlines()[-1] if (done.stdout + done.stderr).strip()
            else f"exit {done.returncode}"}


def freeze(venv: Path) -> str:
    return subprocess.run([find_uv(), "pip", "freeze", "--python", str(venv / "bin" / "python")], capture_output=True,
                          text=True, timeout=300).stdout


class Caches:
    """Moves envdoctor's caches aside (cold) and back (at the end)."""

    def __init__(self, work: Path) -> None:
        self.saved = work / "saved-host-cache"
        self.moved = False

    def clear(self, controller_cache: Path) -> None:
        if HOST_CACHE.exists():
            if not self.moved:
                HOST_CACHE.rename(self.saved)
                self.moved = True
            else:
                shutil.rmtree(HOST_CACHE)
        shutil.rmtree(controller_cache, ignore_errors=True)

    def restore(self) -> None:
        if self.moved:
            shutil.rmtree(HOST_CACHE, ignore_errors=True)
            self.saved.rename(HOST_CACHE)


def bench_stack(name: str, venv: Path, host: str, base: list[str], env: dict, work: Path, caches: Caches,
                controller_cache: Path, options: list[str] = []) -> list[dict]:  # noqa: B006  # (read only)
    rows = []
    target = [host, "--venv", str(venv), "--format", "json", *options]

    def step(label: str, command: str, target_s: float, cold: bool, *extra: str) -> dict:
        if cold:
            caches.clear(controller_cache)
        row = run([*base, command, *target, *extra], env, work)
        row.update(stack=name, host=host, label=label, target_s=target_s)
        rows.append(row)
        met = "met" if row["wall"] <= target_s and row["peak_mb"] <= RSS_MB else "NOT met"
        sections = " ".join(f"{k} {v:.1f}" for k, v in sorted(row["sections"].items(), key=lambda kv: -kv[1])[:6])
        print(f"  {label:<12} {row['wall']:7.1f} s  exit {row['exit']}  peak {row['peak_mb']:6.0f} MB "
              f"(target {target_s:g} s, {RSS_MB:g} MB: {met})  sections: {sections}", flush=True)
        for status, items in sorted(verdicts(row["report"]).items()):
            print(f"      {status} x{len(items)}: " + "; ".join(items[:4]) + (" ..." if len(items) > 4 else ""))
        if row["stderr_foreign"]:
            print(f"      stderr not envdoctor's: {row['stderr_foreign'][:2]}")
        return row

    step("check cold", "check", COLD_SECONDS, True)
    step("check warm", "check", WARM_SECONDS, False)
    step("snapshot", "snapshot", COLD_SECONDS, True)
    before = freeze(venv)
    step("fix", "fix", COLD_SECONDS, True)
    if freeze(venv) != before:
        print("      fix CHANGED the stack (uv pip freeze before != after)")
    step("audit", "audit", COLD_SECONDS, True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", action="append", choices=sorted(STACKS), help="default: every stack")
    parser.add_argument("--local-only", action="store_true", help="skip the runs over the loopback sshd")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--tests", action="store_true", help="then run the real-stack test tier (tests/realstack)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="envdoctor-real-stack-"))
    controller_cache = work / "xdg-cache"
    env = {**os.environ, "XDG_CACHE_HOME": str(controller_cache), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed by pip, envdoctor's modules are compiled
    base = [sys.executable, "-m", "envdoctor", "-v"]
    caches = Caches(work)
    server = None
    rows: list[dict] = []
    try:
        for name in args.stack or sorted(STACKS):
            started = time.perf_counter()
            venv = build_stack(name)
            print(f"{name}: {' '.join(STACKS[name])} at {venv} (ready in {time.perf_counter() - started:.0f} s); "
                  f"{authorities(venv)}", flush=True)
            print(" local:")
            rows += bench_stack(name, venv, "local", base, env, work, caches, controller_cache)
            if not args.local_only:
                if server is None:
                    if find_sshd() is None:
                        print(" (no sshd installed: the runs over SSH are skipped)")
                        args.local_only = True
                        continue
                    server = start_sshd(work / "sshd", [ALIAS])
                print(f" over the loopback sshd ({ALIAS}):")
                rows += bench_stack(name, venv, ALIAS, base, env, work, caches, controller_cache,
                                    ["--ssh-config", str(server.ssh_config)])
    finally:
        caches.restore()
        if server is not None:
            server.stop()
    if args.json:
        for row in rows:
            row.pop("report", None)
        args.json.write_text(json.dumps(rows, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    if args.tests:
        sys.exit(subprocess.call([sys.executable, "-m", "pytest", "--realstack", "-n", "1", "tests/realstack"], cwd=ROOT))


if __name__ == "__main__":
    main()
