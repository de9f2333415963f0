"""The two small host programs behind ``envdoctor run``: the supervisor and the detacher.

Both are stdlib Python (3.6 syntax, like the probe), run with the venv's interpreter under
``-I -S`` (no PYTHON* variables, no working folder on sys.path, no ``.pth`` files: only the
stage's own command runs the environment). argv: venv, command, stage name, and a JSON
object of ``ENVDOCTOR_*`` variables (the facts, so a command can read a model's values from
its environment instead of having them spliced into its text).

The detacher keeps the log in a folder only the user can enter (``~/.cache/envdoctor/logs``,
each folder opened with ``O_NOFOLLOW`` and checked to be theirs, mode 0700), opens the log
with ``O_CREAT|O_EXCL|O_NOFOLLOW`` (a planted file or symlink is never written through), and
ends the log with the command's exit status.
"""

from __future__ import annotations

#: Shared start of both programs: argv, the command's environment.
_PRELUDE = r"""
import json, os, signal, subprocess, sys
venv, command, stage, extra_env = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
env = dict(os.environ)
if venv:
    env["VIRTUAL_ENV"] = venv
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
env.update(extra_env)
"""

#: Runs the command in a process group of its own and stops that group when its stdin
#: closes: over SSH without a pty, a Ctrl-C or a dropped connection would otherwise leave a
#: training job running with nobody watching it.
SUPERVISOR = _PRELUDE + r"""
import threading
child = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, env=env, start_new_session=True)

def stop_when_client_leaves():
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

threading.Thread(target=stop_when_client_leaves, daemon=True).start()
status = child.wait()
# os._exit: the watcher thread is still blocked in read(); a normal exit would wait on it.
os._exit(128 - status if status < 0 else status)
"""

#: Prints {"pid", "log"} and returns; a session leader (pid) runs the command with its
#: output in the log and appends the exit status when it ends. `kill -- -PID` stops it.
DETACHER = _PRELUDE + r"""
import re, stat, time
uid = os.getuid()
NOFOLLOW = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)

def refuse(message):
    sys.stderr.write("envdoctor: %s\n" % message)
    sys.exit(3)

def private_folder():
    home = os.path.expanduser("~")
    fd = os.open(home, os.O_RDONLY)
    if os.fstat(fd).st_uid != uid:
        refuse("home folder %s is not yours" % home)
    path = home
    for name, private in ((".cache", False), ("envdoctor", True), ("logs", True)):
        try:
            os.mkdir(name, 0o700, dir_fd=fd)
        except OSError:
            pass
        path = os.path.join(path, name)
        try:
            child = os.open(name, NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            refuse("cannot open the log folder %s (a symlink?): %s" % (path, exc.strerror))
        os.close(fd)
        fd = child
        info = os.fstat(fd)
        if info.st_uid != uid:
            refuse("the log folder %s belongs to another user" % path)
        if private:
            os.fchmod(fd, 0o700)
        elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            refuse("%s is writable by other users" % path)
    return fd, path

folder_fd, folder = private_folder()
name = "%s-%s-%d.log" % (re.sub(r"[^A-Za-z0-9_.-]", "_", stage)[:80], time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
                         os.getpid())
flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
try:
    log = os.open(name, flags, 0o600, dir_fd=folder_fd)
except OSError as exc:
    refuse("cannot create the log %s: %s" % (os.path.join(folder, name), exc.strerror))
path = os.path.join(folder, name)
pid = os.fork()
if pid == 0:
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        child = subprocess.Popen(["/bin/sh", "-c", command], env=env)
        def forward(signum, frame):
            try:
                os.kill(child.pid, signum)
            except OSError:
                pass
        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        status = child.wait()
        status = 128 - status if status < 0 else status
        os.write(log, ("\n[envdoctor] stage %s exited with status %d at %s\n"
                       % (stage, status, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))).encode("utf-8"))
    finally:
        os._exit(0)
print(json.dumps({"pid": pid, "log": path}))
"""
