"""An atomic replace on the host (stdlib only, Python 3.6): a temporary file in the same
folder, fsync, rename, fsync of the folder, so a reader sees the old bytes or the new, never
a mix. Shared by ``Transport.write_atomic`` (entry :func:`write_from_stdin`) and the patch
writer (``patch_writer.py``), which runs it under its lock."""

import hashlib
import os
import signal
import sys
import tempfile


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _exit_on_signal(number, frame):
    raise SystemExit(128 + number)


def unwind_on_stop():
    """SIGTERM and SIGHUP (the command watch's stop when envdoctor is gone) end the program as
    an exception does, not at once: write_atomic then removes its temporary file, and what was
    done stands as a kill at that moment would leave it (the ledger tolerates that)."""
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, _exit_on_signal)


def write_atomic(path, data, mode):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".envdoctor-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(folder)


def write_from_stdin():
    """argv: path, mode (octal), and the length and sha256 the bytes on stdin must have: a
    connection cut mid-transfer gives an early EOF, and the truncated bytes are never installed."""
    unwind_on_stop()
    path, mode = sys.argv[1], int(sys.argv[2], 8)
    size, digest = (int(sys.argv[3]), sys.argv[4]) if len(sys.argv) > 4 else (None, None)
    data = sys.stdin.buffer.read()
    if size is not None and (len(data) != size or hashlib.sha256(data).hexdigest() != digest):
        sys.exit("received %d of %d bytes (connection cut?); %s left unchanged" % (len(data), size, path))
    write_atomic(path, data, mode)
