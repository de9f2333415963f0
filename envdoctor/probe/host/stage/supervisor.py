"""The supervisor of ``envdoctor run`` (stdlib only, Python 3.6): runs the stage's command in a
process group of its own and stops that group when its stdin closes. Over SSH without a pty, a
Ctrl-C or a dropped connection would otherwise leave a training job running with nobody
watching it."""

import os
import signal
import subprocess
import sys
import threading

from envdoctor.probe.host.stage.env import stage_arguments


def stop_when_client_leaves(child):
    """Block on stdin; at EOF (the client went away) stop the command's group, TERM then KILL."""
    try:
        while os.read(0, 65536):
            pass
    except OSError:
        pass
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
        if child.poll() is not None:
            return
        try:
            os.killpg(child.pid, sig)
        except OSError:
            return
        if grace:
            try:
                child.wait(grace)
            except subprocess.TimeoutExpired:
                pass


def supervise():
    _venv, command, _stage, env = stage_arguments(sys.argv)
    child = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, env=env,
                             start_new_session=True)
    threading.Thread(target=stop_when_client_leaves, args=(child,), daemon=True).start()
    status = child.wait()
    # os._exit: the watcher thread is still blocked in read(); a normal exit would wait on it.
    os._exit(128 - status if status < 0 else status)
