"""The detacher of ``envdoctor run --detach`` (stdlib only, Python 3.6): prints {"pid", "log"}
and returns; a session leader (pid) runs the command with its output in the log and appends
the exit status when it ends. ``kill -- -PID`` stops it.

The log is kept in a folder only the user can enter (``~/.cache/envdoctor/logs``, each folder
opened with ``O_NOFOLLOW`` and checked to be theirs, mode 0700), opened with
``O_CREAT|O_EXCL|O_NOFOLLOW`` (a planted file or symlink is never written through).
"""

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time

from envdoctor.probe.host.stage.env import stage_arguments

NOFOLLOW = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)


def refuse(message):
    sys.stderr.write("envdoctor: %s\n" % message)
    sys.exit(3)


def private_folder(uid):
    """~/.cache/envdoctor/logs opened folder by folder, each the user's own: (fd, path)."""
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


def detach():
    uid = os.getuid()
    _venv, command, stage, env = stage_arguments(sys.argv)
    folder_fd, folder = private_folder(uid)
    started = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    name = "%s-%s-%d.log" % (re.sub(r"[^A-Za-z0-9_.-]", "_", stage)[:80], started, os.getpid())
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    flags |= getattr(os, "O_CLOEXEC", 0)
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
            ended = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            os.write(log, ("\n[envdoctor] stage %s exited with status %d at %s\n" % (stage, status, ended)).encode("utf-8"))
        finally:
            os._exit(0)
    print(json.dumps({"pid": pid, "log": path}))
