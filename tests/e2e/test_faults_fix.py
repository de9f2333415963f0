"""fix under faults: a cut connection, kill -9 and Ctrl-C of the controller mid-patch, and a
cut write_atomic. Every file is left before or after, the ledger consistent and the lock
free; the next fix completes and audit calls the result `patched`."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import stat
import sys
from pathlib import Path

import pytest

from envdoctor.patching.ledger import ledger_path, unfinished
from envdoctor.transport.ssh import SSHOptions, SSHTarget, SSHTransport
from tests.e2e.faults_support import proxies, start_cli, wait_for
from tests.e2e.test_patches import (  # noqa: F401  # fixtures, shared with the patch engine's own tests
    GENERATOR_REL,
    GENERIC_RELS,
    WORKER_REL,
    Host,
    spec_venv,
    speculators_wheel,
)
from tests.faultproxy import Faults

pytestmark = pytest.mark.e2e

FILES = (GENERATOR_REL, WORKER_REL, *GENERIC_RELS)


@pytest.fixture(scope="module")
def clean_fix(spec_venv, speculators_wheel, sshd, run_cli, tmp_path_factory) -> tuple[dict[str, bytes], int]:
    """A clean fix through a proxy: what each file holds after it (the only 'after' an interrupted
    run may show) and how many bytes the whole run moved (to cut it at chosen points)."""
    host = fresh(Host(spec_venv, speculators_wheel, sshd.ssh_config, run_cli))
    with proxies(sshd, {"link": Faults()}, tmp_path_factory.mktemp("clean")) as (started, config):
        res = run_cli("fix", "link", "--trust-remote-code", *host.args, "--ssh-config", str(config))
        total = started["link"].stats.bytes_up + started["link"].stats.bytes_down
    assert res.exit_status == 0, res.stdout + res.stderr
    return {rel: host.file(rel).read_bytes() for rel in FILES}, total


@pytest.fixture(scope="module")
def patched_bytes(clean_fix) -> dict[str, bytes]:
    return clean_fix[0]


def fresh(host: Host) -> Host:
    """Back to the wheel's own files, no ledger, no backups."""
    import shutil

    for rel in FILES:
        host.file(rel).write_bytes(host.original(rel))
    shutil.rmtree(host.venv / ".envdoctor", ignore_errors=True)
    return host


@pytest.fixture
def host(spec_venv, speculators_wheel, sshd, run_cli, patched_bytes) -> Host:
    return fresh(Host(spec_venv, speculators_wheel, sshd.ssh_config, run_cli))


def assert_consistent(host: Host, patched: dict[str, bytes]) -> None:
    """Each file is the original or the patched text; the ledger parses and agrees with the files."""
    entries = host.ledger()
    done = {e.file for e in entries if e.op == "apply" and e.phase == "done"}
    for rel in FILES:
        data = host.file(rel).read_bytes()
        assert data in (host.original(rel), patched[rel]), f"{rel} is neither before nor after"
        if str(host.file(rel)) in done:
            assert data == patched[rel], f"{rel}: ledger says done, file is not patched"
    for entry in entries:
        assert entry.phase in ("intent", "done") and entry.op in ("apply", "revert")
    leftovers = [p.name for p in host.site.rglob(".envdoctor-*.tmp")]
    assert not leftovers, f"temporary files left behind: {leftovers}"


def assert_lock_free(host: Host) -> None:
    lock = host.venv / ".envdoctor" / "lock"
    if not lock.exists():
        return

    def try_lock() -> bool:
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    # The host's program may still be finishing its last file when the controller is gone.
    wait_for(try_lock, 30, "the environment lock to be released")


def assert_next_fix_completes(host: Host, patched: dict[str, bytes], sshd, run_cli) -> None:
    """The next fix finishes the work, audit calls every file `patched`, and the ledger, lock
    and backups it leaves are owner-only."""
    res, data = host.cli("fix", "--trust-remote-code")
    assert res.exit_status == 0, res.stdout + res.stderr
    assert unfinished(host.ledger()) == []
    for rel in FILES:
        assert host.file(rel).read_bytes() == patched[rel]
    audit = run_cli("audit", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(host.venv),
                    "--format", "json")
    assert audit.exit_status == 0, audit.stdout[-3000:] + audit.stderr
    states = {f["path"]: f["state"] for f in json.loads(audit.stdout)["hosts"][0]["files"]}
    for rel in FILES:
        assert states.get(str(host.file(rel))) == "patched", (rel, states.get(str(host.file(rel))))
    assert_owner_only(host)


def assert_owner_only(host: Host) -> None:
    """The state folder and backups are 0700; the ledger, the lock and each backup 0600."""
    state = host.venv / ".envdoctor"

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(state) == 0o700
    assert mode(state / "ledger.jsonl") == 0o600
    assert mode(state / "lock") == 0o600
    backups = list((state / "backups").rglob("*"))
    assert any(p.is_file() for p in backups)
    for path in [state / "backups", *backups]:
        assert mode(path) == (0o700 if path.is_dir() else 0o600), path


# Measured: about 0.45-0.6 of a fix's bytes are the patch step (0.55 cuts between files);
# past that comes the re-check. A cut before any patch is the probe cut of test_faults.py.
@pytest.mark.parametrize("fraction", [0.55, 0.8])
def test_connection_cut_during_fix_leaves_before_or_after(host, clean_fix, sshd, run_cli, tmp_path, fraction):
    """A connection cut at several points of fix leaves files and ledger consistent; the next fix completes."""
    patched_bytes, total = clean_fix
    with proxies(sshd, {"link": Faults(cut_after=int(total * fraction))}, tmp_path / "cut") as (started, config):
        res = run_cli("fix", "link", "--trust-remote-code", *host.args, "--ssh-config", str(config))
        assert started["link"].stats.cut == 1
    assert res.exit_status == 1
    assert "Traceback" not in res.stderr and "socket.send" not in res.stderr, res.stderr[-2000:]
    assert_consistent(host, patched_bytes)
    assert_lock_free(host)
    assert_next_fix_completes(host, patched_bytes, sshd, run_cli)


@pytest.mark.parametrize("how", ["kill-9", "ctrl-c"])
def test_controller_killed_or_interrupted_mid_fix(host, patched_bytes, sshd, run_cli, test_env, tmp_path, how):
    """kill -9 or SIGINT of envdoctor while it patches: before-or-after files, lock released, next fix completes."""
    # A slow link keeps the run in the middle of its work long enough to be hit there.
    with proxies(sshd, {"slow": Faults(latency_up=0.05, latency_down=0.05)}, tmp_path) as (started, config):
        argv = ["fix", "slow", "--trust-remote-code", *host.args, "--ssh-config", str(config)]
        proc = start_cli(argv, test_env)
        ledger = Path(ledger_path(str(host.venv)))
        try:
            wait_for(lambda: ledger.exists() or proc.poll() is not None, 120, "fix to start patching")
            if how == "kill-9":
                os.kill(proc.pid, signal.SIGKILL)
            else:
                os.kill(proc.pid, signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    if how == "kill-9":
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode in (130, 0), err  # 0 only if the run had already finished
        if proc.returncode == 130:
            assert "envdoctor: interrupted" in err and "Traceback" not in err
        wait_for(lambda: started["slow"].stats.active == 0, 30, "the interrupted run to close its connection")
    assert_lock_free(host)
    assert_consistent(host, patched_bytes)
    assert_next_fix_completes(host, patched_bytes, sshd, run_cli)


def test_write_atomic_cut_mid_transfer_leaves_the_old_file(sshd, tmp_path):
    """A connection cut while write_atomic streams the new bytes leaves the old file, never a truncated one."""
    target = tmp_path / "config.json"
    target.write_bytes(b'{"old": true}')
    payload = b"N" * 3_000_000

    async def write(config: Path) -> str:
        transport = SSHTransport("link", SSHTarget("link"), SSHOptions(config_files=(str(config),)))
        async with transport:
            try:
                await transport.write_atomic(str(target), payload, python=sys.executable, timeout=60)
            except Exception as exc:  # the test asserts on the file, whatever error the cut gives
                return type(exc).__name__
        return "no error"

    with proxies(sshd, {"link": Faults(cut_after=1_000_000)}, tmp_path / "p") as (started, config):
        outcome = asyncio.run(write(config))
        assert started["link"].stats.cut == 1
    assert outcome in ("ConnectError", "TransportError", "CommandTimeout")

    # The host's writer may still be running when the client gives up: give it time to finish.
    def settled() -> bool:
        return not list(tmp_path.glob(".envdoctor-*.tmp"))

    wait_for(settled, 30, "the host's writer to end")
    assert target.read_bytes() == b'{"old": true}'
    # And without a cut the same call replaces the file whole.
    with proxies(sshd, {"link": Faults()}, tmp_path / "q") as (_, config):
        assert asyncio.run(write(config)) == "no error"
    assert target.read_bytes() == payload
