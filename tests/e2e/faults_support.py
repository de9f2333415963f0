"""Helpers shared by the fault tests: aliases that reach the test sshd through fault proxies."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tests.faultproxy import FaultProxy, Faults
from tests.sshd import SSHServer


def host_public_key(server: SSHServer) -> str:
    return (server.root / "host_ed25519.pub").read_text().strip()


def write_proxied_config(server: SSHServer, ports: Mapping[str, int], folder: Path) -> Path:
    """An ssh_config where each alias reaches ``server`` through the given local port, and a
    known_hosts that trusts the server's key at each of those ports."""
    folder.mkdir(parents=True, exist_ok=True)
    known = folder / "known_hosts"
    key = host_public_key(server)
    known.write_text("".join(f"[127.0.0.1]:{port} {key}\n" for port in sorted(set(ports.values()))))
    lines = []
    for alias, port in ports.items():
        lines += [
            f"Host {alias}",
            "    HostName 127.0.0.1",
            f"    Port {port}",
            f"    User {server.user}",
            f"    IdentityFile {server.client_key}",
            "    IdentitiesOnly yes",
            f"    UserKnownHostsFile {known}",
            "",
        ]
    config = folder / "ssh_config"
    config.write_text("\n".join(lines))
    return config


@contextmanager
def proxies(server: SSHServer, faults: Mapping[str, Faults], folder: Path,
            lifetime: float = 300) -> Iterator[tuple[dict[str, FaultProxy], Path]]:
    """One fault proxy per alias (an alias mapped to None goes straight to sshd)."""
    started: dict[str, FaultProxy] = {}
    try:
        for alias, fault in faults.items():
            started[alias] = FaultProxy(server.port, fault, lifetime=lifetime).start()
        config = write_proxied_config(server, {a: p.port for a, p in started.items()}, folder)
        yield started, config
    finally:
        for proxy in started.values():
            proxy.stop()


def results_by_id(host: dict) -> dict[str, dict]:
    return {r["id"]: r for r in host["results"]}


def hosts_by_name(stdout: str) -> dict[str, dict]:
    return {h["host"]: h for h in json.loads(stdout)["hosts"]}


def start_cli(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.Popen[str]:
    """The CLI as a background process (for signals and kills), in its own process group."""
    return subprocess.Popen(
        [sys.executable, "-m", "envdoctor", *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env, cwd=cwd, start_new_session=True,
    )


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05):  # type: ignore[no-untyped-def]  # any predicate
    """Poll ``predicate`` until it returns something true; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)  # a poll interval, not a wait for readiness
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def processes_matching(text: str) -> list[int]:
    """pids of processes whose command line contains ``text`` (from /proc, no ps needed)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found
