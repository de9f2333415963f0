"""The audit's forked hashing workers (envdoctor/probe/host/audit/hashing.py HashRun) on real files."""

from __future__ import annotations

import hashlib
import os
import py_compile
import signal

from envdoctor.probe.host.audit import hashing as audit_hash


def make_files(folder, count):
    paths = []
    for number in range(count):
        path = folder / f"mod{number}.py"
        path.write_bytes(b"x = %d\n" % number * (number + 1))
        paths.append(str(path))
    return paths


def jobs_for(paths, wrong=()):
    jobs = []
    for path in paths:
        digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
        if path in wrong:
            digest = "0" * 64
        size = os.path.getsize(path)
        jobs.append((path, ["sha256"], size, ("sha256", digest, size)))
    return jobs


def collect(run, pycs):
    run.check_pycs(pycs)
    hashed = {r[0]: r for r in run.results()}
    checked = list(run.pyc_results())
    run.close()
    return hashed, checked


def test_workers_match_serial_hashing(tmp_path):
    """Two forked workers return the same verdicts, keys and .pyc checks as hashing in one process."""
    paths = make_files(tmp_path, 300)
    wrong = {paths[7], paths[150]}
    jobs = jobs_for(paths, wrong) + [(str(tmp_path / "gone.py"), ["sha256"], 5, ("sha256", "0" * 64, 5))]
    py_compile.compile(paths[3], cfile=str(tmp_path / "__pycache__" / "mod3.cpython-311.pyc"))
    os.utime(paths[4], ns=(10**18, 10**18))
    py_compile.compile(paths[4], cfile=str(tmp_path / "__pycache__" / "mod4.cpython-311.pyc"))
    os.utime(paths[4], ns=(2 * 10**18, 2 * 10**18))  # the source changed after compiling
    pycs = [(str(tmp_path / "__pycache__" / f"mod{n}.cpython-311.pyc"), paths[n]) for n in (3, 4)]

    parallel = audit_hash.HashRun(jobs, 2)
    assert parallel.workers == 2
    hashed, checked = collect(parallel, pycs)
    serial, serial_checked = collect(audit_hash.HashRun(jobs, 1), pycs)

    assert hashed == serial and checked == serial_checked
    assert hashed[str(tmp_path / "gone.py")][4] == "missing"
    assert {p for p, r in hashed.items() if r[2] is not None} == wrong  # only differences carry digests
    assert [c[4] is None for c in checked] == [True, False]


def test_a_killed_worker_falls_back_to_this_process(tmp_path):
    """When a worker dies mid-run, every file is still hashed (in the caller) and no child is left behind."""
    paths = make_files(tmp_path, 200)
    run = audit_hash.HashRun(jobs_for(paths), 2)
    pids = [child[0] for child in run.children]
    os.kill(pids[0], signal.SIGKILL)
    hashed, _ = collect(run, [])
    assert sorted(hashed) == sorted(paths) and all(r[4] is None for r in hashed.values())
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
            raise AssertionError(f"worker {pid} was not reaped")
        except ChildProcessError:
            pass
