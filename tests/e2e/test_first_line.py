"""No host holds the fleet longer than its own failure takes: a venv whose ``python`` does not
speak the probe's protocol (it reads its stdin to the end before it answers, prints 180,000
nested brackets, or stays silent) is its host's error within the first-line bound
(transport/first_line.py), naming what it printed; the healthy host beside it is checked, the
report is written, and nothing of the run is left on the host. Over the real sshd, as root
(OpenSSH refuses signals to root's sessions, so the host-side guard ends what is left)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path

import pytest

from tests.e2e.faults_support import results_by_id
from tests.run_processes import gone_within, unique_run_id
from envdoctor.engine.blocking import BlockingLocalTransport, drive
from envdoctor.errors import ProtocolError
from envdoctor.transport.first_line import FIRST_LINE_SECONDS, GUARD_SH, FirstLine
from envdoctor.transport.local import LocalTransport
from envdoctor.transport.ssh import SSHOptions, SSHTarget, SSHTransport
from envdoctor.transport.watched import run_watched

pytestmark = pytest.mark.e2e

#: What each hostile interpreter does, as a shell script in place of the venv's python3.
HOSTILE = {
    # reads stdin to its end (which never comes while envdoctor holds it), then wrong-shape JSON
    "b300": "cat >/dev/null\necho '{\"hosts\": [1, 2, 3]}'\n",
    # 180,000 nested brackets at once, then waits for stdin's end
    "gpu-a": "head -c 180000 /dev/zero | tr '\\0' '['\necho\ncat >/dev/null\n",
    # silent, with a child of its own
    "gpu-b": "sleep 100000 &\nwait\n",
}


def hostile_venv(root: Path, name: str, script: str) -> Path:
    prefix = root / name
    (prefix / "bin").mkdir(parents=True)
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n")
    python = prefix / "bin" / "python3"
    python.write_text("#!/bin/sh\n" + script)
    python.chmod(0o755)
    return prefix


def inventory(folder: Path, venvs: dict[str, Path]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o755)
    (folder / "envdoctor.toml").write_text("".join(
        f"[hosts.{name}]\nvenv = {json.dumps(str(venv))}\n" for name, venv in venvs.items()))
    return folder


#: Seconds the slow but honest host's interpreter takes to start (a loaded NFS home).
SLOW_START = 20


def slow_venv(venv: Path) -> Path:
    """``venv`` whose python3 starts SLOW_START seconds late, then is the venv's own."""
    python = venv / "bin" / "python3"
    python.rename(venv / "bin" / "python3.real")
    python.write_text(f'#!/bin/sh\nsleep {SLOW_START}\nexec "$(dirname "$0")/python3.real" "$@"\n')
    python.chmod(0o755)
    return venv


def with_alias(ssh_config: Path, alias: str, folder: Path) -> Path:
    """The test sshd's ssh_config with one more alias for it (a copy of ct200's entry)."""
    text = ssh_config.read_text()
    block = text.split("Host ct200\n", 1)[1].split("\nHost ", 1)[0]
    copy = folder / "ssh_config"
    copy.write_text(text + f"\nHost {alias}\n{block}\n")
    return copy


@pytest.fixture(scope="module")
def fleet(sshd, venv_factory, tmp_path_factory) -> dict[str, Path]:
    """ct200 with a real venv; b300, gpu-a and gpu-b with the hostile interpreters above; slow
    (one more alias of the sshd) with a real venv whose interpreter starts 20 s late."""
    root = tmp_path_factory.mktemp("hostile interpreters")
    venvs = {"ct200": venv_factory("healthy beside hostile"), "slow": slow_venv(venv_factory("slow to start"))}
    venvs.update({name: hostile_venv(root, name, script) for name, script in HOSTILE.items()})
    config = inventory(root / "config", venvs)
    return {**venvs, "config": config, "ssh_config": with_alias(sshd.ssh_config, "slow", config)}


@pytest.fixture(scope="module")
def checked(run_cli, sshd, fleet):
    """One `check` of the five hosts at the default --timeout (900 s), timed."""
    run_id = unique_run_id("first-line")
    started = time.monotonic()
    res = run_cli("check", "ct200", "slow", *HOSTILE, "--ssh-config", str(fleet["ssh_config"]), "--format", "json",
                  "--output", "report.json", cwd=fleet["config"], env={"ENVDOCTOR_RUN_ID": run_id}, timeout=400)
    return res, time.monotonic() - started, run_id, fleet["config"] / "report.json"


def test_the_fleet_finishes_within_the_first_line_bound_not_the_timeout(checked):
    """check ends a little after the bound (60 s), far below --timeout's 900 s; exit 1, report written."""
    res, elapsed, _, report = checked
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    assert res.exit_status == 1, res.stderr[-2000:]
    assert elapsed < FIRST_LINE_SECONDS + 45, elapsed
    hosts = [h["host"] for h in json.loads(report.read_text())["hosts"]]
    assert hosts == ["ct200", "slow", *HOSTILE]


def host_results(report: Path, name: str) -> dict[str, dict]:
    host = next(h for h in json.loads(report.read_text())["hosts"] if h["host"] == name)
    return results_by_id(host)


def test_the_healthy_host_is_checked_in_full(checked):
    """The host beside the hostile ones has its probe's results, not a timeout."""
    results = host_results(checked[3], "ct200")
    assert results["host.python"]["status"] == "pass", results["host.python"]
    assert results["python.venv"]["status"] == "pass", results["python.venv"]


def test_a_slow_but_honest_interpreter_stays_within_the_bound(checked):
    """An interpreter that takes 20 s to start (a loaded NFS home) runs the probe as any other."""
    results = host_results(checked[3], "slow")
    assert results["host.python"]["status"] == "pass", results["host.python"]
    assert results["host.probe"]["status"] == "pass", results["host.probe"]


def protocol_error(report: Path, name: str) -> str:
    results = host_results(report, name)
    failed = [r for r in results.values() if r["status"] in ("error", "fail")]
    assert failed and failed[0]["id"] in ("host.reachable", "host.python"), failed[:2]
    return failed[0]["message"]


def test_an_interpreter_that_waits_for_stdins_end_is_stopped_at_the_bound(checked):
    """It printed nothing: the error says so, with the bound and the interpreter it tried."""
    message = protocol_error(checked[3], "b300")
    assert "printed nothing of envdoctor's protocol within 60s" in message, message
    assert "/b300/bin/python3" in message


def test_180000_nested_brackets_are_refused_at_once_and_shown_bounded(checked):
    """What it printed is named, cut to a few hundred characters."""
    message = protocol_error(checked[3], "gpu-a")
    assert "not envdoctor's protocol: it printed '[[[[" in message, message[:400]
    assert len(message) < 1000, len(message)


def test_a_silent_interpreter_is_stopped_at_the_bound(checked):
    message = protocol_error(checked[3], "gpu-b")
    assert "printed nothing of envdoctor's protocol within 60s" in message, message


def test_nothing_of_the_run_is_left_on_the_host(checked):
    """The silent interpreter and its child are gone (the host-side guard, as OpenSSH refuses
    to signal root's sessions), at once."""
    assert gone_within(checked[2], 3) == {}


@pytest.mark.parametrize("command", ["audit", "facts", "drift", "snapshot"])
def test_every_probing_command_reports_the_refused_host_beside_the_healthy_one(run_cli, sshd, fleet, tmp_path,
                                                                               command):
    """audit, facts, drift and snapshot: the bracket-printing host is its own error at once."""
    run_id = unique_run_id(f"first-line-{command}")
    extra = ["--model", str(tmp_path)] if command == "facts" else []
    started = time.monotonic()
    res = run_cli(command, "ct200", "gpu-a", *extra, "--ssh-config", str(sshd.ssh_config), "--format", "json",
                  cwd=fleet["config"], env={"ENVDOCTOR_RUN_ID": run_id}, timeout=400)
    assert time.monotonic() - started < FIRST_LINE_SECONDS, res.stderr[-2000:]
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    assert res.exit_status == 1, res.stdout[-2000:] + res.stderr[-2000:]
    text = res.stdout
    assert '"ct200"' in text and '"gpu-a"' in text, text[-2000:]
    assert "not envdoctor's protocol: it printed '[[[[" in text, text[-3000:]


SILENT = FirstLine(b'{"hello": 1}', "the test program", within=1.0)


def transport_run(kind: str, sshd, argv: list[str], first_line: FirstLine, env: dict[str, str]):
    """``argv`` run by one of the three transports with ``first_line`` and stdin held open."""
    if kind == "blocking":
        return drive(BlockingLocalTransport("local").run(argv, stdin=b"", env=env, timeout=120, hold_stdin=True,
                                                          first_line=first_line))

    async def run():
        transport = (LocalTransport() if kind == "local" else
                     SSHTransport("ct200", SSHTarget("ct200"), SSHOptions(config_files=(str(sshd.ssh_config),))))
        async with transport:
            return await transport.run(argv, stdin=b"", env=env, timeout=120, hold_stdin=True, first_line=first_line)

    return asyncio.run(run())


@pytest.mark.parametrize("kind", ["blocking", "local", "ssh"])
def test_every_transport_stops_a_silent_command_at_the_bound_and_nothing_is_left(sshd, kind):
    """The same watch in each transport: ProtocolError at the bound; the command and its child
    are gone at once (over SSH as root, where sshd refuses the signal, by the host-side guard)."""
    run_id = unique_run_id(f"first-line-{kind}")
    argv = ["sh", "-c", GUARD_SH + 'envdoctor_guard "$1"\nsleep 100 &\nwait\n', "t", SILENT.guard_seconds(120)]
    started = time.monotonic()
    with pytest.raises(ProtocolError, match="printed nothing of envdoctor's protocol within 1s"):
        transport_run(kind, sshd, argv, SILENT, {"ENVDOCTOR_RUN_ID": run_id})
    assert time.monotonic() - started < 10
    assert gone_within(run_id, 3) == {}


@pytest.mark.parametrize("kind", ["blocking", "local", "ssh"])
def test_every_transport_refuses_other_output_at_once_and_passes_the_line_through(sshd, kind):
    """Output that is not the line stops the command and what it started at once (over SSH as
    root through the host-side guard, asked by its pid), though it would wait an hour; the
    line itself, and the guard's note on stderr, are held back from the result."""
    run_id = unique_run_id(f"first-line-refused-{kind}")
    argv = ["sh", "-c", GUARD_SH + 'envdoctor_guard 3600\necho 42\nsleep 3600 &\nwait\n']
    started = time.monotonic()
    with pytest.raises(ProtocolError, match=re.escape("it printed '42\\n'")):
        transport_run(kind, sshd, argv, SILENT, {"ENVDOCTOR_RUN_ID": run_id})
    assert time.monotonic() - started < 10
    assert gone_within(run_id, 3) == {}
    line = GUARD_SH + "envdoctor_guard 30\nprintf '%s\\n' '{\"hello\": 1}' rest\nkill $ENVDOCTOR_GUARD\necho err >&2\n"
    result = transport_run(kind, sshd, ["sh", "-c", line], SILENT, {})
    assert (result.exit_status, result.stdout, result.stderr) == (0, b"rest\n", b"err\n")


@pytest.fixture(scope="module")
def fifo_fleet(venv_factory, tmp_path_factory) -> Path:
    """ct200: a venv where idna's RECORD and charset-normalizer's METADATA are FIFOs (any user
    can make one in a venv they own); b300: a healthy venv. Their inventory's folder."""
    planted = venv_factory("fifo metadata", ["requests"])
    site = next((planted / "lib").glob("python3*/site-packages"))
    for name in ("idna-*.dist-info/RECORD", "charset_normalizer-*.dist-info/METADATA"):
        path = next(site.glob(name))
        path.unlink()
        os.mkfifo(path)
    root = tmp_path_factory.mktemp("fifo fleet")
    return inventory(root, {"ct200": planted, "b300": venv_factory("healthy beside fifo")})


def test_a_fifo_record_or_metadata_is_named_with_its_distribution_and_the_run_finishes(run_cli, sshd, fifo_fleet):
    """audit names idna's FIFO RECORD and charset-normalizer's FIFO METADATA as those
    distributions' files; every other distribution is audited, and so is the healthy host."""
    started = time.monotonic()
    res = run_cli("audit", "ct200", "b300", "--ssh-config", str(sshd.ssh_config), "--format", "json",
                  cwd=fifo_fleet, timeout=300)
    assert time.monotonic() - started < FIRST_LINE_SECONDS, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and res.exit_status == 1, res.stderr[-2000:]
    planted, healthy = json.loads(res.stdout)["hosts"]
    # (a METADATA not read leaves the name its folder gives)
    files = {(f["distribution"].replace("_", "-"), f["path"].rsplit("/", 1)[-1]): f for f in planted["files"]}
    record, metadata = files[("idna", "RECORD")], files[("charset-normalizer", "METADATA")]
    assert record["state"] == metadata["state"] == "modified"
    assert record["reason"].startswith("unreadable: a FIFO, not a regular file"), record
    assert metadata["reason"] == "unreadable: a FIFO, not a regular file", metadata
    assert {d["name"]: d["record"] for d in planted["distributions"]}["requests"] == "ok"
    assert healthy["host"] == "b300" and healthy["ok"] and not healthy.get("problem"), healthy
    text = run_cli("audit", "ct200", "--ssh-config", str(sshd.ssh_config), cwd=fifo_fleet, timeout=300).stdout
    assert "idna-" in text and "RECORD  unreadable: a FIFO" in text, text[-3000:]


def test_check_names_the_fifo_records_distribution(run_cli, sshd, fifo_fleet):
    """check finishes; host.probe names the file not read and whose RECORD it is."""
    res = run_cli("check", "ct200", "--ssh-config", str(sshd.ssh_config), "--format", "json", cwd=fifo_fleet,
                  timeout=300)
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    results = results_by_id(json.loads(res.stdout)["hosts"][0])
    assert results["host.probe"]["status"] == "warn", results["host.probe"]
    assert "'s RECORD): a FIFO, not a regular file" in results["host.probe"]["message"], results["host.probe"]
    assert results["python.venv"]["status"] == "pass"


def test_the_command_watch_refuses_an_interpreter_that_does_not_run_it(sshd, fleet):
    """pip and the patch writer run under the command watch: its interpreter's first line is
    held to the same rule, so a broken venv python is the host's error at once, not at pip's
    30-minute limit."""

    async def run():
        transport = SSHTransport("gpu-a", SSHTarget("gpu-a"), SSHOptions(config_files=(str(sshd.ssh_config),)))
        async with transport:
            return await run_watched(transport, ["true"], python=str(fleet["gpu-a"] / "bin" / "python3"),
                                     timeout=1800)

    started = time.monotonic()
    with pytest.raises(ProtocolError, match="command watch .* not envdoctor's protocol: it printed '\\[\\[\\["):
        asyncio.run(run())
    assert time.monotonic() - started < 10
