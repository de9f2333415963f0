# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules. Sent right after
# core.py in every program: the probe's run (main), its deadline, and its watchdog.
#
# The deadline (request "deadline", seconds, below the controller's timeout for the command)
# is a SIGALRM that ends the running section; the sections not started are not run, and the
# end record names them ("unfinished"), so the controller reports what was skipped instead of
# a host that did not answer. With request "watch" (the controller keeps stdin open until the
# probe ends), a forked watcher ends the probe's whole process group, children included (a
# tokenizer load, an interpreter asked about itself), as soon as the controller is gone (EOF
# on stdin: the SSH channel closed, envdoctor interrupted or killed), when the probe dies or
# stops at its deadline with work still running, and at the deadline plus WATCH_GRACE at the
# latest (a section stuck where no signal reaches it).

import os
import signal
import time

from envdoctor.probe.host.core import PRESTARTS, SECTIONS, emit_line, end_record, skipping_for

#: Seconds the watcher gives the probe past its deadline to report and end on its own.
WATCH_GRACE = 3.0
#: How often the watcher looks whether the probe is still its parent (a probe killed outright
#: may leave its pipe open in forked workers, so its end is not always an end of file).
WATCH_POLL = 0.25
#: What the probe writes to the watcher when it ended by itself, every section reported.
CLEAN_END = b"d"


class ProbeDeadline(BaseException):
    """The probe's deadline passed (a BaseException: a section's `except Exception` must not
    swallow it)."""


_DEADLINE = {"seconds": None, "emitting": False, "pending": False}


def _on_alarm(signum, frame):
    if _DEADLINE["emitting"]:
        _DEADLINE["pending"] = True  # raised once the line is whole (see guarded_emit)
        return
    raise ProbeDeadline()


def arm_deadline(seconds):
    _DEADLINE["seconds"] = seconds
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(0.001, seconds))


def disarm_deadline():
    if _DEADLINE["seconds"] is not None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _DEADLINE["pending"] = False


def guarded_emit(obj, finished=None):
    """emit_line, never cut in the middle of a line by the deadline. A section's last line
    also puts its name in `finished` in the same breath (so a finished section is never also
    reported as stopped); after an item line the deadline that came meanwhile is raised."""
    _DEADLINE["emitting"] = True
    try:
        emit_line(obj)
        if finished is not None:
            finished.append(obj["section"])
    finally:
        _DEADLINE["emitting"] = False
    if _DEADLINE["pending"]:
        _DEADLINE["pending"] = False
        raise ProbeDeadline()


def start_watchdog(limit):
    """Fork the watcher (see the top of this file); returns the pipe's write end, on which
    finish_watchdog tells it that the probe ended cleanly."""
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        os.close(read_end)
        return write_end
    try:  # the watcher: never returns, never writes to the probe's stdout or stderr
        os.close(write_end)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 1)
        os.dup2(null, 2)
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(number, signal.SIG_IGN)  # (it outlives a signal only to end the rest)
        if not watch(read_end, parent, time.monotonic() + limit):
            os.killpg(0, signal.SIGKILL)  # the probe, what it started, and the watcher
    finally:
        os._exit(0)


def watch(read_end, parent, until):
    """True when the probe said it ended cleanly; False when the controller went away, the
    probe ended without saying so, or `until` passed."""
    import select

    while True:
        left = until - time.monotonic()
        if left <= 0 or os.getppid() != parent:
            return False
        ready = select.select([0, read_end], [], [], min(left, WATCH_POLL))[0]
        if read_end in ready:
            return os.read(read_end, 1) == CLEAN_END
        if 0 in ready:
            try:
                if not os.read(0, 65536):
                    return False  # EOF: the controller is gone
            except OSError:
                return False


def finish_watchdog(write_end, clean):
    """Tell the watcher how the probe ended: cleanly (it leaves), or not (it ends the group)."""
    try:
        if clean:
            os.write(write_end, CLEAN_END)
        os.close(write_end)
    except OSError:
        pass


def quiet_compile_warnings():
    """Reading a library's sources with `ast` raises its warnings (Python 3.12's SyntaxWarning
    "invalid escape sequence", a DeprecationWarning before 3.12): they are the library's, say
    nothing of the host, and must never reach the probe's stderr (a wrapper reads it)."""
    import warnings

    warnings.filterwarnings("ignore", category=SyntaxWarning)
    warnings.filterwarnings("ignore", message="invalid escape sequence", category=DeprecationWarning)


def main(request):
    """Run the requested sections in the order asked, one line each, then the end record."""
    quiet_compile_warnings()
    deadline = float(request.get("deadline") or 0)
    watcher = start_watchdog((deadline or 3600.0) + WATCH_GRACE) if request.get("watch") else None
    names = list(request.get("sections", {}).items())
    finished = []
    seconds = {}  # each section's wall time, for the end record (what a bench prints)
    if deadline:
        arm_deadline(deadline)
    started = time.monotonic()
    try:
        for name, args in in_running_order(names, [item for item in names if start_early(*item)]):
            started = time.monotonic()
            try:
                run_section(name, args, finished)
            finally:
                seconds[name] = round(time.monotonic() - started, 3)
    except ProbeDeadline:
        pass
    finally:
        disarm_deadline()
    unfinished = [name for name, _ in names if name not in finished]
    for position, name in enumerate(unfinished):
        why = "did not finish" if position == 0 else "not run"
        emit_line({"section": name, "error": "%s: the probe's deadline of %gs passed (it stops itself before "
                                             "envdoctor's timeout)" % (why, deadline)})
    emit_line(end_record(unfinished, seconds))
    if watcher is not None:
        # Stopped at the deadline: a child it started may still run, and the watcher ends it.
        finish_watchdog(watcher, clean=not unfinished)


#: The sections that read whole libraries, run last by the controller's order: a section waiting
#: for its early children goes before them, so that a probe that dies in one of them (out of
#: memory on a large venv) has still sent it.
READS_WHOLE_LIBRARIES = ("architecture", "sources", "imports", "drift")


def in_running_order(names, waiting):
    """The sections in the order asked, except that a section whose slow children started early
    (the live tokenizer load) waits for them after the other light sections: they run meanwhile,
    on another core."""
    light = [item for item in names if item not in waiting and item[0] not in READS_WHOLE_LIBRARIES]
    heavy = [item for item in names if item not in waiting and item[0] in READS_WHOLE_LIBRARIES]
    return light + list(waiting) + heavy


def start_early(name, args):
    """Start a section's slow child processes now (see core.PRESTARTS); if that fails, the
    section does all its work itself when its turn comes. True when something was started."""
    func = PRESTARTS.get(name)
    if func is not None:
        try:
            return bool(func(args or {}))
        except Exception:
            pass
    return False


def run_section(name, args, finished):
    """Run one section and write its line (its name then goes in `finished`)."""
    func = SECTIONS.get(name)
    if func is None:
        guarded_emit({"section": name, "error": "this probe has no section %r" % name}, finished)
        return
    skipping_for(name)

    def emit_item(item):
        guarded_emit({"section": name, "item": item})

    try:
        data = func(args or {}, emit_item)
    except Exception:  # (not ProbeDeadline: that ends the run, in main)
        import traceback

        guarded_emit({"section": name, "error": traceback.format_exc(limit=6)}, finished)
    else:
        guarded_emit({"section": name, "data": data}, finished)
