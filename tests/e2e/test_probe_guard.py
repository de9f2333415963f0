"""The probe's deadline and watchdog, and the supervisor of pip and the patch writer: nothing a
run starts on a host outlives it. The real program runs as envdoctor sends it (python -I -S,
request and program on stdin, stdin held open, a session of its own)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envdoctor.transport.watched import WATCH_HELLO, watched_argv
from envdoctor.probe.host import core, guard
from envdoctor.probe.program import build_program, encode_stdin, parse_lines, probe_command, probe_deadline
from tests.run_processes import gone_within, processes_of, unique_run_id, wait_for


@pytest.fixture(autouse=True)
def fresh_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core, "SKIPS", [])
    monkeypatch.setattr(core, "_SKIP_STATE", {"section": "", "more": 0, "seen": set()})


def test_the_deadline_stops_the_running_section_and_names_the_rest(monkeypatch, capsys) -> None:
    """At its deadline the probe ends the section it is in and starts no other; each is
    reported as an error, and the end record names them: the controller gets an answer."""
    monkeypatch.setitem(core.SECTIONS, "quick", lambda args, emit: {"ok": True})
    monkeypatch.setitem(core.SECTIONS, "stuck", lambda args, emit: time.sleep(30))
    monkeypatch.setitem(core.SECTIONS, "after", lambda args, emit: {"ok": True})
    started = time.monotonic()
    guard.main({"sections": {"quick": {}, "stuck": {}, "after": {}}, "deadline": 0.3})
    assert time.monotonic() - started < 2
    output = parse_lines(capsys.readouterr().out.encode().splitlines())
    assert output.sections == {"quick": {"ok": True}}
    assert output.unfinished == ["stuck", "after"]
    assert output.errors["stuck"].startswith("did not finish: the probe's deadline of 0.3s passed")
    assert output.errors["after"].startswith("not run:")


def test_a_section_catching_exceptions_does_not_swallow_the_deadline(monkeypatch, capsys) -> None:
    """A section's `except Exception` around a wait does not keep the probe past its deadline."""
    def stubborn(args, emit):
        while True:
            try:
                time.sleep(30)
            except Exception:
                continue

    monkeypatch.setitem(core.SECTIONS, "stubborn", stubborn)
    started = time.monotonic()
    guard.main({"sections": {"stubborn": {}}, "deadline": 0.2})
    assert time.monotonic() - started < 2
    assert parse_lines(capsys.readouterr().out.encode().splitlines()).unfinished == ["stubborn"]


def test_items_written_before_the_deadline_arrive_whole(monkeypatch, capsys) -> None:
    """A section streaming items when the deadline passes: every line written is whole JSON."""
    def streaming(args, emit):
        for index in range(10 ** 9):
            emit({"n": index, "pad": "x" * 2000})

    monkeypatch.setitem(core.SECTIONS, "streaming", streaming)
    guard.main({"sections": {"streaming": {}}, "deadline": 0.3})
    output = parse_lines(capsys.readouterr().out.encode().splitlines())
    assert output.unfinished == ["streaming"] and len(output.items["streaming"]) > 10


@pytest.mark.parametrize(("timeout", "deadline"), [(300, 270), (100, 90), (30, 25), (10, 5), (2, 1)])
def test_the_probe_deadline_comes_before_the_command_timeout(timeout: float, deadline: float) -> None:
    """A tenth before the timeout (5 to 30 s of margin), never below one second."""
    assert probe_deadline(timeout) == deadline


def fake_venv(tmp_path: Path, marker: str) -> Path:
    """A 'venv' whose interpreter, asked about itself by the venvs section, sleeps instead."""
    prefix = tmp_path / "venv"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n")
    python = prefix / "bin" / "python"
    python.write_text(f"#!/bin/sh\nexec sleep 60 # {marker}\n")
    python.chmod(0o755)
    return prefix


def start_probe(run_id: str, request: dict, sections: dict) -> subprocess.Popen[bytes]:
    """The real probe program as a transport starts it: its own session, stdin held open."""
    proc = subprocess.Popen(probe_command([sys.executable]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, "ENVDOCTOR_RUN_ID": run_id})
    assert proc.stdin is not None
    proc.stdin.write(encode_stdin({"sections": sections, **request}, build_program(sections)))
    proc.stdin.flush()
    return proc


def stop_all(run_id: str) -> None:
    for pid in processes_of(run_id):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_real_probe_stops_at_its_deadline_and_ends_what_it_started(tmp_path: Path) -> None:
    """A venv interpreter that never answers: at the deadline the probe reports the venvs
    section unfinished, and its watcher ends the interpreter it started."""
    run_id = unique_run_id("deadline")
    sections = {"venvs": {"configured": [str(fake_venv(tmp_path, run_id))], "discover": False}}
    started = time.monotonic()
    proc = start_probe(run_id, {"deadline": 1.5, "watch": True}, sections)
    try:
        out, err = proc.stdout.read(), proc.stderr.read()  # (stdin stays open, as the controller holds it)
        proc.wait(10)
        assert time.monotonic() - started < 5, err
        output = parse_lines(out.splitlines())
        assert output.unfinished == ["venvs"] and "did not finish" in output.errors["venvs"]
        assert gone_within(run_id, 2) == {}
    finally:
        stop_all(run_id)


@pytest.mark.parametrize("how", ["stdin closed", "probe killed"])
def test_the_watchdog_ends_the_probe_and_its_children_when_the_controller_is_gone(tmp_path: Path, how: str) -> None:
    """The controller going away (its end of stdin closed: the SSH channel closed, envdoctor
    killed) or the probe itself killed: within 2 s nothing the probe started is left."""
    run_id = unique_run_id("watch")
    sections = {"venvs": {"configured": [str(fake_venv(tmp_path, run_id))], "discover": False}}
    proc = start_probe(run_id, {"deadline": 60, "watch": True}, sections)
    try:
        wait_for(run_id, "sleep 60", 20)
        assert len(processes_of(run_id)) >= 3  # the probe, its watcher, the interpreter it asked
        if how == "stdin closed":
            proc.stdin.close()
        else:
            os.kill(proc.pid, signal.SIGKILL)
        assert gone_within(run_id, 2) == {}
        proc.wait(5)
    finally:
        stop_all(run_id)


def test_without_watch_the_probe_reads_its_program_and_ignores_stdin(tmp_path: Path) -> None:
    """A request without "watch" (a probe run by hand, stdin at its end) runs as before."""
    run_id = unique_run_id("plain")
    proc = start_probe(run_id, {}, {"host": {}})
    out, _ = proc.communicate(timeout=60)
    assert json.loads(out.splitlines()[-1])["done"] is True  # (with each section's seconds)


def supervised(run_id: str, argv: list[str], data: bytes = b"", *, stop: str = "INT",
               limit: float = 60) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(watched_argv(argv, data, python=sys.executable, stop=stop, limit=limit),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env={**os.environ, "ENVDOCTOR_RUN_ID": run_id})
    assert proc.stdin is not None
    proc.stdin.write(data)
    proc.stdin.flush()
    return proc


def test_the_supervisor_passes_the_commands_input_output_and_status() -> None:
    """The command reads its own input (then EOF), writes its output after the watch's first
    line, and its status is the supervisor's; the host-side guard is gone at once."""
    run_id = unique_run_id("pass")
    proc = supervised(run_id, ["sh", "-c", "cat; echo err >&2; exit 3"], b"PIP_INDEX_URL=x\n\n")
    out, err = proc.stdout.read(), proc.stderr.read()  # (stdin held open until the command ends)
    assert (proc.wait(10), out) == (3, WATCH_HELLO + b"\nPIP_INDEX_URL=x\n\n")
    assert re.fullmatch(rb"envdoctor-guard [0-9]+\nerr\n", err), err  # (the guard's pid: a transport takes it)
    assert gone_within(run_id, 2) == {}
    proc.stdin.close()


INTERRUPTIBLE = """
import signal, sys, time
def on_int(signum, frame):
    open(sys.argv[1], "w").write("interrupted")
    sys.exit(1)
signal.signal(signal.SIGINT, on_int)
open(sys.argv[1], "w").write("ready")
time.sleep(60)
"""


def test_the_supervisor_interrupts_the_command_when_the_controller_is_gone(tmp_path: Path) -> None:
    """envdoctor gone (stdin closed): the command gets SIGINT, as pip from a Ctrl-C, and its own
    children end with it, within 2 s."""
    run_id = unique_run_id("supervised")
    note = tmp_path / "note"
    proc = supervised(run_id, [sys.executable, "-c", INTERRUPTIBLE, str(note)])
    try:
        until = time.monotonic() + 20
        while not (note.exists() and note.read_text() == "ready") and time.monotonic() < until:
            time.sleep(0.05)  # a poll interval, until its SIGINT handler is in place
        proc.stdin.close()
        assert gone_within(run_id, 2) == {}
        assert note.read_text() == "interrupted"
    finally:
        stop_all(run_id)


def test_the_supervisor_kills_what_ignores_the_stop_signal() -> None:
    """A command (and a grandchild) that ignore SIGINT are killed after the grace period."""
    run_id = unique_run_id("stubborn")
    proc = supervised(run_id, ["sh", "-c", "trap '' INT; sleep 60 & sleep 61; wait"])
    try:
        wait_for(run_id, "sleep 61", 20)
        proc.stdin.close()
        assert gone_within(run_id, 2) == {}
    finally:
        stop_all(run_id)
