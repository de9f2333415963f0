"""The first line a host program prints (transport/first_line.py): held back, compared byte by
byte, and the deadline a transport enforces while it is awaited."""

from __future__ import annotations

import json

import pytest

from envdoctor.errors import ProtocolError
from envdoctor.probe.host import command_watch
from envdoctor.probe.program import _BOOTSTRAP, PROBE_HELLO, _asks_for_program, _reported_code, parse_lines
from envdoctor.transport.first_line import (
    FIRST_LINE_SECONDS,
    GUARD_MARGIN,
    SHOWN_BYTES,
    FirstLine,
    FirstLineWatch,
    GuardNote,
    stop_guard_command,
)
from envdoctor.transport.watched import WATCH_HELLO

pytestmark = pytest.mark.unit

LINE = FirstLine(b'{"hello": 1}', "the test program")


def watched(timeout: float | None = 900) -> tuple[FirstLineWatch, list[bytes], list[str]]:
    passed: list[bytes] = []
    changes: list[str] = []
    watch = FirstLineWatch(LINE, passed.append, 100.0, timeout)
    watch.on_change = lambda: changes.append(watch.state)
    return watch, passed, changes


def test_the_line_is_held_back_and_what_follows_passed_on_even_split_across_chunks():
    """The first line, in any chunks, is not output; the rest of its chunk and later ones are."""
    watch, passed, changes = watched()
    for chunk in (b'{"hel', b'lo": 1}', b'\n{"section": "a"}\n', b"more"):
        watch(chunk)
    assert passed == [b'{"section": "a"}\n', b"more"]
    assert changes == ["spoken"] and watch.spoken and not watch.broken


def test_a_first_byte_that_differs_refuses_at_once():
    """180,000 brackets: refused on the first chunk, nothing passed on, the deadline is now."""
    watch, passed, changes = watched()
    watch(b"[" * 65536)
    watch(b"[" * 65536)
    assert changes == ["refused"] and passed == [] and watch.deadline() == 100.0
    assert watch.overdue(100.0) and watch.broken and watch.received == 131072


def test_a_line_that_only_starts_alike_is_refused_at_its_first_other_byte():
    watch, _, _ = watched()
    watch(b'{"hello": 2}\n')
    assert watch.refused


def test_the_deadline_is_the_bound_while_waiting_then_the_timeout():
    """60 s from the start while the line is awaited, never past the command's timeout; the
    timeout once it came; none without one."""
    watch, _, _ = watched(900)
    assert watch.deadline() == 100.0 + FIRST_LINE_SECONDS and not watch.overdue(159.9) and watch.overdue(160.0)
    watch(b'{"hello": 1}\n')
    assert watch.deadline() == 1000.0 and not watch.overdue(2000.0)
    assert watched(20)[0].deadline() == 120.0
    spoken, _, _ = watched(None)
    spoken(b'{"hello": 1}\n')
    assert spoken.deadline() is None


def test_no_expected_line_passes_everything_with_the_timeout_as_deadline():
    passed: list[bytes] = []
    watch = FirstLineWatch(None, passed.append, 5.0, 10)
    watch(b"anything\n")
    assert passed == [b"anything\n"] and watch.deadline() == 15.0 and not watch.broken


def test_a_command_that_printed_nothing_is_left_to_its_exit_status():
    """Nothing at all before the end is not broken (no Python: status 127 says it); a piece of
    something else is."""
    watch, _, _ = watched()
    assert not watch.broken
    watch(b'{"he')
    assert watch.broken


def test_the_error_names_what_was_received_bounded_and_escaped():
    """Control characters are escaped, the sample is cut at SHOWN_BYTES, the total is given,
    and stderr's start is named."""
    watch, _, _ = watched()
    watch(b"\x1b]0;owned\x07" + b"[" * 5000)
    error = watch.error("gpu-a", b"Traceback\n  boom\x1b[2J", 900)
    message = str(error)
    assert isinstance(error, ProtocolError)
    assert message.startswith("the test program answered with something that is not envdoctor's protocol: "
                              "it printed '\\x1b]0;owned\\x07[[[")
    assert "\x1b" not in message and "\n" not in message
    assert "[['... (5010 bytes in all)" in message
    assert message.count("[") < SHOWN_BYTES + 10
    assert "on stderr: 'Traceback\\n  boom\\x1b[2J'" in message and message.endswith("stopped on gpu-a")


def test_a_silent_command_is_named_with_the_bound_it_missed():
    watch, _, _ = watched(30)
    assert str(watch.error("b300", b"", 30)) == ("the test program printed nothing of envdoctor's protocol "
                                                 "within 30s; stopped on b300")


def test_the_host_guard_waits_past_the_controllers_bound():
    """The controller, which can say what it received, gives up first."""
    assert LINE.guard_seconds(None) == str(int(FIRST_LINE_SECONDS) + GUARD_MARGIN)
    assert LINE.guard_seconds(0.2) == str(1 + GUARD_MARGIN)


def test_the_host_programs_print_the_lines_the_controller_expects():
    """The bootstrap prints PROBE_HELLO, the command watch WATCH_HELLO."""
    assert 'print(json.dumps({"envdoctor_probe":1}),flush=True)' in _BOOTSTRAP
    assert json.dumps({"envdoctor_probe": 1}).encode() == PROBE_HELLO
    assert command_watch.WATCH_HELLO == WATCH_HELLO + b"\n"


def test_the_probes_other_first_lines_are_read_past_its_hello():
    """need_program and program_code follow the hello (a transport takes it; a direct run keeps
    it), and parse_lines skips it."""
    digest = "ab" * 32
    asking = [PROBE_HELLO, b'{"need_program": "%s"}' % digest.encode()]
    assert _asks_for_program(asking, digest) and _asks_for_program(asking[1:], digest)
    kept = [PROBE_HELLO, b'{"program_code": "%s"}' % digest.encode()]
    assert _reported_code(kept) == digest == _reported_code(kept[1:])
    output = parse_lines([PROBE_HELLO, b'{"section": "host", "data": {}}', b'{"done": true}'])
    assert output.sections == {"host": {}} and output.complete


def test_the_guards_note_is_taken_out_of_stderr_after_a_login_shells_output():
    """rc-file lines before it pass on; the note gives the pid; what follows passes on, in any chunks."""
    kept: list[bytes] = []
    note = GuardNote(kept.append)
    for chunk in (b"module load cuda\nenvdoctor-gu", b"ard 4242\nTrace", b"back\n"):
        note(chunk)
    note.close()
    assert note.pid == 4242 and b"".join(kept) == b"module load cuda\nTraceback\n"


def test_stderr_without_the_note_is_passed_on_whole():
    """A command the guard did not start (or a note that is not one) loses nothing."""
    kept: list[bytes] = []
    note = GuardNote(kept.append)
    note(b"envdoctor-guard x\npartial")
    note.close()
    assert note.pid == 0 and b"".join(kept) == b"envdoctor-guard x\npartial"
    big: list[bytes] = []
    flood = GuardNote(big.append)
    flood(b"x" * (GuardNote.LOOK_BYTES + 1))
    flood(b"y")
    assert b"".join(big) == b"x" * (GuardNote.LOOK_BYTES + 1) + b"y"


def test_the_guard_is_asked_to_stop_only_while_its_pid_is_still_a_guard():
    assert stop_guard_command(4242) == "grep -q envdoctor_guard /proc/4242/cmdline 2>/dev/null && kill -USR1 4242"
