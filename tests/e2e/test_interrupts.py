"""No remote process outlives its run (issue 32), and an interrupt ends the host's work (issue
28 item 5): envdoctor, run as a user runs it against the real sshd, is interrupted (SIGINT),
terminated (SIGTERM) or killed (SIGKILL) at several moments: while the probe starts, while
the probe's live tokenizer load runs the model's code (in the venv's interpreter), and while
pip builds a package for `fix`. Every process of the run (found by its ENVDOCTOR_RUN_ID, on
the host and here) is gone within 2 s; the interrupted pip leaves the venv as pip's own
interrupt leaves it (the oracle: the same pip, interrupted by hand at the same step), and the
patch ledger has no unfinished change."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from envdoctor.patching.ledger import parse_ledger, unfinished
from tests.conftest import make_venv
from tests.kimi_fixture import build_kimi
from tests.run_processes import gone_within, processes_of, unique_run_id, wait_for

pytestmark = pytest.mark.e2e

SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
#: Within this long after the signal nothing of the run may be left.
GRACE = 2.0
SLOW_PACKAGE = "envdoctor-interrupt-probe"


def slow_tokenizer(model: Path, mark: Path) -> None:
    """The model's own tokenizer code, made to note that it runs and then take 120 s."""
    (model / "tokenization_kimi.py").write_text(
        f"import time\nopen({str(mark)!r}, 'w').write('loading')\ntime.sleep(120)\n")


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(venv with transformers, Kimi-shaped model whose tokenizer code takes 120 s, its mark file)."""
    root = tmp_path_factory.mktemp("interrupts")
    venv = make_venv(root / "venv", ["transformers"])
    mark = root / "tokenizer-mark"
    model = build_kimi(root / "Kimi-slow", mark=root / "imported", ranks=False)
    slow_tokenizer(model, mark)
    return venv, model, mark


def slow_sdist(folder: Path, mark: Path) -> Path:
    """A source distribution whose wheel build notes that it started, then takes 120 s (its
    metadata is quick, so pip's plan is quick and the install is what runs long)."""
    source = folder / "src" / "envdoctor_interrupt_probe-1.0"
    source.mkdir(parents=True)
    (source / "setup.py").write_text(
        "import sys, time\nfrom setuptools import setup\n"
        f"if 'bdist_wheel' in sys.argv:\n    open({str(mark)!r}, 'w').write('building')\n    time.sleep(120)\n"
        f"setup(name={SLOW_PACKAGE!r}, version='1.0', py_modules=['envdoctor_interrupt_probe'])\n")
    (source / "envdoctor_interrupt_probe.py").write_text("VALUE = 1\n")
    (source / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {SLOW_PACKAGE}\nVersion: 1.0\n")
    links = folder / "links"
    links.mkdir()
    with tarfile.open(links / "envdoctor_interrupt_probe-1.0.tar.gz", "w:gz") as archive:
        archive.add(source, arcname=source.name)
    return links


@pytest.fixture(scope="module")
def slow_install(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(a plain venv with pip, a find-links folder holding the slow sdist, its mark file)."""
    root = tmp_path_factory.mktemp("slow install")
    mark = root / "build-mark"
    return make_venv(root / "venv"), slow_sdist(root, mark), mark


def site_listing(venv: Path) -> list[str]:
    site = next((venv / "lib").glob("python3*/site-packages"))
    return sorted(str(p.relative_to(site)) for p in site.rglob("*") if "__pycache__" not in p.parts)


def start(run_cli_env: dict[str, str], run_id: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "envdoctor", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**run_cli_env, "ENVDOCTOR_RUN_ID": run_id})


def wait_for_mark(mark: Path, proc: subprocess.Popen[str], timeout: float) -> None:
    until = time.monotonic() + timeout
    while not mark.exists():
        if proc.poll() is not None:
            raise AssertionError(f"envdoctor ended first ({proc.returncode}): {proc.stdout.read()}{proc.stderr.read()}")
        if time.monotonic() > until:
            raise AssertionError(f"{mark} never appeared")
        time.sleep(0.05)  # a poll interval


def interrupt_and_check(proc: subprocess.Popen[str], run_id: str, sig: signal.Signals) -> None:
    """Send `sig` to envdoctor, then: nothing of the run is left after GRACE seconds; an
    interrupt or a termination ends envdoctor itself cleanly (one line, status 130)."""
    remote = {pid: line for pid, line in processes_of(run_id).items() if pid != proc.pid}
    assert remote, "the run had started nothing yet"
    proc.send_signal(sig)
    try:
        left = gone_within(run_id, GRACE)
        assert left == {}, f"after {sig.name}, still running {GRACE:g}s later: {left}"
        proc.wait(10)
        if sig is not signal.SIGKILL:
            err = proc.stderr.read()
            assert proc.returncode == 130 and "envdoctor: interrupted" in err and "Traceback" not in err, err
    finally:
        for pid in processes_of(run_id):
            os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_interrupted_while_the_probe_starts(run_cli, test_env, sshd, slow_model, sig) -> None:
    """Right after the probe started on the host: the probe (and its watcher) end with the run."""
    venv, model, _ = slow_model
    run_id = unique_run_id(f"start-{sig.name}")
    proc = start(test_env, run_id, "check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(venv),
                 "--model", str(model), "--trust-remote-code")
    wait_for(run_id, "g['main'](r)", 60)
    interrupt_and_check(proc, run_id, sig)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_interrupted_during_the_live_tokenizer_load(run_cli, test_env, sshd, slow_model, sig) -> None:
    """While the model's tokenizer code runs in the venv's interpreter (a child of the probe)."""
    venv, model, mark = slow_model
    mark.unlink(missing_ok=True)
    run_id = unique_run_id(f"tokenizer-{sig.name}")
    proc = start(test_env, run_id, "check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(venv),
                 "--model", str(model), "--trust-remote-code")
    wait_for_mark(mark, proc, 180)
    assert any("from_pretrained" in line for line in processes_of(run_id).values())
    interrupt_and_check(proc, run_id, sig)


def pip_interrupted_by_hand(venv: Path, links: Path, mark: Path) -> list[str]:
    """The oracle: the venv's pip installing the slow package, Ctrl-C'd (SIGINT to its process
    group, as a terminal sends it) at the same step; the venv's files after it."""
    mark.unlink(missing_ok=True)
    pip = subprocess.Popen([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                            "--find-links", str(links), SLOW_PACKAGE], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        until = time.monotonic() + 180
        while not mark.exists() and time.monotonic() < until:
            time.sleep(0.05)  # a poll interval
        os.killpg(pip.pid, signal.SIGINT)
        pip.wait(30)
    finally:
        try:
            os.killpg(pip.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return site_listing(venv)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_interrupted_while_fix_runs_pip(run_cli, test_env, sshd, slow_install, sig) -> None:
    """While pip builds the package fix installs: pip and its build end with the run, the venv is
    as pip's own Ctrl-C leaves it, and the patch ledger has no unfinished change."""
    venv, links, mark = slow_install
    before = site_listing(venv)
    oracle = pip_interrupted_by_hand(venv, links, mark)
    mark.unlink(missing_ok=True)
    run_id = unique_run_id(f"pip-{sig.name}")
    proc = start(test_env, run_id, "fix", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(venv),
                 "--require", SLOW_PACKAGE, "--find-links", str(links))
    wait_for_mark(mark, proc, 300)
    interrupt_and_check(proc, run_id, sig)
    assert site_listing(venv) == oracle == before  # (pip interrupted mid-build installs nothing)
    ledger = venv / ".envdoctor" / "ledger.jsonl"
    if ledger.exists():
        assert unfinished(parse_ledger(ledger.read_bytes().splitlines())) == []


def test_a_stuck_probe_reports_at_its_deadline_and_leaves_nothing(run_cli, test_env, sshd, slow_model) -> None:
    """envdoctor's --timeout shorter than the tokenizer load: the probe stops itself before it,
    names the section it did not finish (host.probe warns; the other checks still have their
    facts), and nothing of the run is left on the host."""
    venv, model, mark = slow_model
    run_id = unique_run_id("deadline")
    started = time.monotonic()
    res = run_cli("check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(venv), "--model", str(model),
                  "--trust-remote-code", "--timeout", "30", "--format", "json", env={"ENVDOCTOR_RUN_ID": run_id})
    assert time.monotonic() - started < 30 + 10  # (the budget, and the CLI's start and exit)
    results = {r["id"]: r for r in json.loads(res.stdout)["hosts"][0]["results"]}
    assert results["host.reachable"]["status"] == "pass", res.stdout  # not "did not answer in time"
    assert results["host.probe"]["status"] == "warn"
    assert "stopped at its deadline before finishing models" in results["host.probe"]["message"]
    assert results["python.venv"]["status"] == "pass"
    assert "deadline" in results["model.tokenizer-live"]["message"]
    assert gone_within(run_id, GRACE) == {}
