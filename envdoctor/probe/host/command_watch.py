"""The command watch (stdlib only, Python 3.6, ``-I -S``): in front of pip and the patch
writer, so no command envdoctor starts on a host outlives its run (the probe has its own
watchdog, guard.py).

Over SSH without a pty, a command whose client went away (Ctrl-C, a timeout, envdoctor
killed) keeps running: sshd only closes its stdin. So the command runs under this program, in
its process group (the session sshd or the local transport made for it): it hands the command
the first SIZE bytes of its own stdin, then reads on; envdoctor keeps stdin open until the
command ends. At EOF before the command ended, or past LIMIT seconds, it sends the group STOP
(SIGINT for pip: what a Ctrl-C in a terminal sends, so pip ends as its own interrupt ends
it), waits GRACE seconds, then SIGKILLs the group, itself included. It exits with the
command's status. argv: SIZE STOP GRACE LIMIT COMMAND...

Its first line, before anything else, is the protocol's (transport/watched.py's WATCH_HELLO):
the controller stops an interpreter that does not print it within its bound; then it ends
the host-side guard that sh started before it (ENVDOCTOR_GUARD, transport/first_line.py).
"""

import os
import select
import signal
import subprocess
import sys
import time


WATCH_HELLO = b'{"envdoctor_watch": 1}\n'


def watch_cancel_guard():
    """End the host-side guard (its pid in ENVDOCTOR_GUARD), kept from the command's environment."""
    try:
        guard = int(os.environ.pop("ENVDOCTOR_GUARD", "") or 0)
        if guard > 0:
            os.kill(guard, signal.SIGTERM)
    except (ValueError, OSError):
        pass


def watch():
    os.write(1, WATCH_HELLO)
    watch_cancel_guard()
    size, stop = int(sys.argv[1]), getattr(signal, "SIG" + sys.argv[2])
    grace, limit = float(sys.argv[3]), float(sys.argv[4])
    data = b""
    while len(data) < size:
        chunk = os.read(0, size - len(data))
        if not chunk:
            break
        data += chunk
    try:
        child = subprocess.Popen(sys.argv[5:], stdin=subprocess.PIPE)
    except OSError as exc:
        sys.stderr.write("%s: %s\n" % (sys.argv[5], exc))
        sys.exit(127)
    for number in (stop, signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)  # (set after the child started: it keeps the defaults)
    try:
        child.stdin.write(data)
        child.stdin.close()
    except OSError:
        pass
    until = time.monotonic() + limit
    watching = True
    while child.poll() is None:
        left = until - time.monotonic()
        if left <= 0:
            break
        ready = select.select([0] if watching else [], [], [], min(left, 0.2))[0]
        if ready:
            try:
                watching = bool(os.read(0, 65536))
            except OSError:
                watching = False
            if not watching:
                break  # EOF: envdoctor is gone
    if child.poll() is None:
        os.killpg(0, stop)
        try:
            child.wait(grace)
        except subprocess.TimeoutExpired:
            pass
        os.killpg(0, signal.SIGKILL)
    status = child.wait()
    os._exit(128 - status if status < 0 else status)
