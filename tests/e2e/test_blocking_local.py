"""`check` on this machine without an event loop (envdoctor.engine.blocking).

The blocking transport is compared with the asyncio one (LocalTransport) on real commands,
and `envdoctor check local` is run as a user runs it: same report as the asyncio path,
and asyncio never imported.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from envdoctor.engine import blocking
from envdoctor.engine.blocking import BlockingLocalTransport, DeadlineExceeded, Suspended, drive
from envdoctor.errors import CommandTimeout
from envdoctor.transport.local import LocalTransport

PY = sys.executable


def blocking_run(argv, **kwargs):
    return drive(BlockingLocalTransport("local", kwargs.pop("deadline", None)).run(argv, **kwargs))


@pytest.mark.parametrize("argv, stdin", [
    ([PY, "-c", "import sys; sys.stdout.write(sys.stdin.read()[::-1]); sys.stderr.write('e' * 70000); sys.exit(3)"],
     b"0123456789" * 300_000),  # 3 MB in, both pipes past their 64 KiB buffers
    ([PY, "-c", "print('no input wanted')"], b"x" * 2_000_000),  # stdin closed early: no BrokenPipe
    (["sh", "-c", "echo $0", "a b"], None),
], ids=["3MB-both-ways", "unread-stdin", "no-stdin"])
def test_same_result_as_the_asyncio_transport(argv, stdin):
    """Exit status, stdout and stderr agree with LocalTransport, large and unread stdin included."""
    expected = asyncio.run(LocalTransport().run(argv, stdin=stdin, timeout=60))
    got = blocking_run(argv, stdin=stdin, timeout=60)
    assert (got.exit_status, got.stdout, got.stderr, got.truncated) == \
        (expected.exit_status, expected.stdout, expected.stderr, expected.truncated)


def test_missing_program_is_status_127():
    """A program that does not exist is exit status 127, as the shell and LocalTransport say."""
    result = blocking_run(["/nonexistent/program"])
    assert result.exit_status == 127 and b"not found" in result.stderr


def test_output_beyond_the_bound_is_cut_and_flagged(monkeypatch):
    """Output past MAX_OUTPUT_BYTES is dropped and the result says it was truncated."""
    monkeypatch.setattr(blocking, "MAX_OUTPUT_BYTES", 1000)
    result = blocking_run([PY, "-c", "print('y' * 300000)"])
    assert result.stdout == b"y" * 1000 and result.truncated and result.exit_status == 0


def test_timeout_stops_the_whole_process_group(tmp_path):
    """A command past its timeout raises CommandTimeout, and its children are killed too."""
    marker = tmp_path / "child.pid"
    script = textwrap.dedent(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(marker)!r}, "w").write(str(child.pid))
        time.sleep(60)
    """)
    started = time.monotonic()
    with pytest.raises(CommandTimeout, match="did not finish within 1s"):
        blocking_run([PY, "-c", script], timeout=1)
    assert time.monotonic() - started < 30
    child = int(marker.read_text())
    for _ in range(50):  # the kill is delivered at once; reaping by init may take a moment
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        if open(f"/proc/{child}/stat").read().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail("the command's child outlived the timeout")


def test_the_host_deadline_is_its_own_error():
    """When --timeout's deadline comes before the command's own limit, DeadlineExceeded says so."""
    with pytest.raises(DeadlineExceeded):
        blocking_run([PY, "-c", "import time; time.sleep(30)"], timeout=300, deadline=time.monotonic() + 1)


def test_drive_refuses_a_coroutine_that_suspends():
    """drive() runs only coroutines that never wait for an event loop; anything else is a loud bug."""
    class Pause:
        def __await__(self):
            yield  # what an asyncio future does until its event loop resumes it

    async def waits():
        await Pause()

    with pytest.raises(Suspended):
        drive(waits())


def run_check_local(tmp_path, mode):
    """`envdoctor check local` in a fresh interpreter; mode "async" forces the asyncio path."""
    out = tmp_path / f"{mode}.json"
    code = textwrap.dedent(f"""
        import sys
        import envdoctor.cli.main as cli
        import envdoctor.cli.commands.check as check_command
        if {mode!r} == "async":
            import asyncio
            from envdoctor.operations.fleet import run_fleet
            check_command.check_here = lambda specs, graph, settings, progress=None, same=(): asyncio.run(
                run_fleet(specs, graph, settings, command="check", progress=progress))
        sys.argv = ["envdoctor", "check", "local", "--format", "json", "--output", {str(out)!r}]
        try:
            cli.main()
        except SystemExit as exc:
            print(exc.code, "asyncio" in sys.modules)
    """)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    status, imported = proc.stdout.split()
    return int(status), imported == "True", json.loads(out.read_text())


#: Checks whose message is a reading of the moment (free space), not a fact of the environment.
LIVE = frozenset({"host.disk"})


def test_check_local_gives_the_asyncio_report_without_asyncio(tmp_path):
    """check local reports what the asyncio path reports, check by check, and never imports asyncio."""
    status, imported, report = run_check_local(tmp_path, "sync")
    status_async, _, report_async = run_check_local(tmp_path, "async")

    def results(doc):
        """Each check's id, status and message; a live reading (free disk, which another test
        or process may change between the two runs) compared without its figures."""
        return [(r["id"], r["status"], re.sub(r"\d+(\.\d+)?", "N", r["message"]) if r["id"] in LIVE else r["message"])
                for h in doc["hosts"] for r in h["results"]]

    assert not imported
    assert status == status_async
    assert results(report) == results(report_async) and len(results(report)) > 10


def test_audit_here_reports_what_the_asyncio_audit_reports(tmp_path):
    """A local audit without an event loop gives the asyncio path's report: a changed file, a
    missing one and an intact one, each in the same state."""
    from envdoctor.audit.records import RecordAuditor
    from envdoctor.engine.executor import FleetSettings
    from envdoctor.inventory import HostSpec
    from envdoctor.operations.audit import run_audit
    from envdoctor.report.audit_report import render
    from tests.unit.test_audit import write_dist

    prefix = tmp_path / "env"
    site = prefix / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    files = [("pkg/__init__.py", b"x = 1\n", "b64"), ("pkg/gone.py", b"y = 2\n", "b64"), ("pkg/ok.py", b"z = 3\n", "b64")]
    write_dist(site, "pkg", "1.0", files)
    (site / "pkg").mkdir()
    (site / "pkg" / "__init__.py").write_bytes(b"x = 'changed'\n")
    (site / "pkg" / "ok.py").write_bytes(b"z = 3\n")
    specs = [HostSpec("local", None, venv=str(prefix))]
    settings = FleetSettings(timeout=120)

    blocking = json.loads(render(run_audit(specs, settings, RecordAuditor(full=True)), "json"))
    expected = json.loads(render(run_audit(specs, settings, RecordAuditor(full=True), blocking_here=False), "json"))
    states = {os.path.relpath(f["path"], site): f["state"] for h in blocking["hosts"] for f in h["files"]}
    assert states == {"pkg/__init__.py": "modified", "pkg/gone.py": "missing"}
    assert [h["files"] for h in blocking["hosts"]] == [h["files"] for h in expected["hosts"]]
