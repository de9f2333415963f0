"""The patch writer: the program that changes files on the host (stdlib only, Python 3.6).

Everything that must hold even when two ``fix`` runs race or a run is killed happens here:
take the environment's lock, re-verify each file's hash under it, append an ``intent`` ledger
line, keep a backup, replace the file atomically, drop its stale bytecode, append ``done``. A
file whose hash is neither the expected before nor after is refused, never overwritten.

Sent as ``python -I -c`` with ``atomic_write.py`` before it (envdoctor.patching.host); the
request (op, prefix, changes) arrives on stdin, one JSON line per file goes out.
"""

import base64
import binascii
import csv
import datetime
import errno
import fcntl
import glob
import hashlib
import json
import os
import re
import signal
import stat
import sys

from envdoctor.probe.host.patch.atomic_write import fsync_dir, unwind_on_stop, write_atomic

#: Exit status when at least one file was refused.
REFUSED_STATUS = 3
#: Exit status when the environment's .envdoctor folder is unsafe (a symlink, another user's).
UNSAFE_STATUS = 4
FIELDS = ("op", "phase", "patch", "file", "distribution", "version",
          "sha256_before", "sha256_after", "backup", "time", "envdoctor")

# Set by main() from the request on stdin.
request = {}
prefix = state_dir = ledger = ""
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class Unsafe(Exception):
    """A path envdoctor must not write through (a symlink, another user's folder)."""


def private_dir(path):
    """Create `path` owner-only, or accept it only when it already is a real folder of ours,
    private. Never follows a symlink and never chmods through one."""
    try:
        os.mkdir(path, 0o700)
        fsync_dir(os.path.dirname(path))
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW)
    except OSError as exc:
        raise Unsafe("%s is not a real folder (a symlink?): %s" % (path, exc.strerror))
    try:
        info = os.fstat(fd)
        if info.st_uid != os.getuid():
            raise Unsafe("%s belongs to another user (uid %d); remove it" % (path, info.st_uid))
        if info.st_mode & 0o077:
            if os.path.basename(path) == ".envdoctor":
                raise Unsafe("%s is not owner-only (mode %o); chmod 700 it if it is yours" % (
                    path, info.st_mode & 0o7777))
            os.fchmod(fd, 0o700)  # a folder of ours inside the private .envdoctor
    finally:
        os.close(fd)


def within(path, root):
    """Whether `path`, symlinks resolved, lies inside the folder `root`."""
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def sha256_of(path):
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except (IOError, OSError):
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            return hashlib.sha256(handle.read()).hexdigest()
    except (IOError, OSError):
        return None


def drop_bytecode(path):
    folder, name = os.path.split(path)
    stem = os.path.splitext(name)[0]
    for pyc in glob.glob(os.path.join(folder, "__pycache__", stem + ".*.pyc")):
        try:
            os.unlink(pyc)
        except OSError:
            pass


def read_entries():
    entries = []
    try:
        with os.fdopen(os.open(ledger, os.O_RDONLY | NOFOLLOW), "rb") as handle:
            for line in handle:
                try:
                    entry = json.loads(line.decode("utf-8"))
                except ValueError:
                    continue  # a torn last line from a killed run
                if isinstance(entry, dict):
                    entries.append(entry)
    except (IOError, OSError):
        pass
    return entries


def torn_tail():
    """Whether the ledger ends mid-line (a run killed while appending)."""
    try:
        with os.fdopen(os.open(ledger, os.O_RDONLY | NOFOLLOW), "rb") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() == 0:
                return False
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
    except (IOError, OSError):
        return False


def append(entry):
    existed = os.path.exists(ledger)
    # A torn last line stays torn (parsers skip it); ours must start on a line of its own.
    prefix = "\n" if torn_tail() else ""
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, 0o600)
    try:
        os.write(fd, (prefix + json.dumps(entry, sort_keys=True) + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    if not existed:
        fsync_dir(state_dir)


def open_intent(entries, op, patch, path):
    pending = None
    for entry in entries:
        if (entry.get("op"), entry.get("patch"), entry.get("file")) == (op, patch, path):
            pending = entry if entry.get("phase") == "intent" else None
    return pending


def in_force(entries, patch, path):
    current = None
    for entry in entries:
        if entry.get("phase") == "done" and (entry.get("patch"), entry.get("file")) == (patch, path):
            current = entry if entry.get("op") == "apply" else None
    return current


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def record_sha256(site, distribution, rel):
    """The sha256 (hex) RECORD lists for `rel`, or None."""
    for entry in sorted(os.listdir(site)):
        if entry.endswith(".dist-info") and canonical(entry[:-len(".dist-info")].split("-")[0]) == canonical(distribution):
            try:
                with open(os.path.join(site, entry, "RECORD")) as handle:
                    rows = list(csv.reader(handle))
            except (IOError, OSError):
                return None
            for row in rows:
                if len(row) >= 2 and row[0] == rel and row[1].startswith("sha256="):
                    digest = row[1][len("sha256="):]
                    return binascii.hexlify(base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4))).decode()
    return None


def line_for(change, op, phase, backup):
    entry = dict((name, str(change.get(name, ""))) for name in FIELDS)
    if op == "revert":
        # Hashes of this change: a revert goes from the patched text back to the original.
        entry["sha256_before"], entry["sha256_after"] = change["sha256_after"], change["sha256_before"]
    entry.update(op=op, phase=phase, backup=backup, envdoctor=request["envdoctor"],
                 time=datetime.datetime.utcnow().replace(microsecond=0).isoformat() + "Z")
    return entry


def replace_file(change, op, data, backup):
    path = change["file"]
    append(line_for(change, op, "intent", backup))
    if request.get("kill_after_intent"):
        os.kill(os.getpid(), signal.SIGKILL)  # tests only: a run killed mid-way
    write_atomic(path, data, os.stat(path).st_mode & 0o7777)
    drop_bytecode(path)
    append(line_for(change, op, "done", backup))


def apply(change, entries):
    path, before, after = change["file"], change["sha256_before"], change["sha256_after"]
    current = sha256_of(path)
    data = base64.b64decode(change["data"])
    if hashlib.sha256(data).hexdigest() != after:
        return "refused", "the new text does not match its recorded hash"
    if current == after:
        intent = open_intent(entries, "apply", change["patch"], path)
        if intent is not None and intent.get("sha256_after") == after:
            append(line_for(change, "apply", "done", intent.get("backup", "")))
            return "completed", "finished the change an interrupted run had made"
        if in_force(entries, change["patch"], path) is not None:
            return "already-applied", "already patched"
        return "refused", "the file already holds the patched text, but the ledger has no record of it"
    if current != before:
        return "refused", "the file changed since it was checked (sha256 %s, expected %s)" % (current, before)
    ours = [e.get("sha256_after") for e in entries
            if (e.get("op"), e.get("phase"), e.get("file")) == ("apply", "done", path)]
    if (change.get("record_site") and before not in ours
            and record_sha256(change["record_site"], change["distribution"], change["path"]) != before):
        return "refused", "not the file %s installed (its hash differs from RECORD): changed by someone else" % (
            change["distribution"])
    backup_dir = os.path.join(state_dir, "backups", change["patch"])
    private_dir(os.path.join(state_dir, "backups"))
    private_dir(backup_dir)
    backup = os.path.join(backup_dir, "%s-%s" % (before[:16], os.path.basename(path)))
    if sha256_of(backup) != before:
        with os.fdopen(os.open(path, os.O_RDONLY | NOFOLLOW), "rb") as handle:
            write_atomic(backup, handle.read(), 0o600)
    replace_file(change, "apply", data, backup)
    return "applied", "patched"


def revert(change, entries):
    path, before, after, backup = change["file"], change["sha256_before"], change["sha256_after"], change["backup"]
    # The ledger is a file in the venv: its paths are confined, never trusted.
    if not os.path.isabs(path) or not within(path, prefix) or within(path, state_dir):
        return "refused", "the ledger names %s, outside the environment %s" % (path, prefix)
    if not os.path.isabs(backup) or not within(backup, os.path.join(state_dir, "backups")):
        return "refused", "the ledger names the backup %s, outside %s" % (backup, os.path.join(state_dir, "backups"))
    current = sha256_of(path)
    if current == before:
        if open_intent(entries, "revert", change["patch"], path) is not None or in_force(entries, change["patch"], path):
            append(line_for(change, "revert", "done", backup))
            return "reverted", "the file already held the original text; recorded the revert"
        return "already-reverted", "not patched"
    if current != after:
        return "refused", "the file is not the one envdoctor wrote (sha256 %s, expected %s)" % (current, after)
    if sha256_of(backup) != before:
        return "refused", "the backup %s is missing or not the original" % backup
    with os.fdopen(os.open(backup, os.O_RDONLY | NOFOLLOW), "rb") as handle:
        data = handle.read()
    replace_file(change, "revert", data, backup)
    return "reverted", "restored the original"


def main():
    global request, prefix, state_dir, ledger
    unwind_on_stop()
    request = json.loads(sys.stdin.read())
    prefix = request["prefix"]
    state_dir = os.path.join(prefix, ".envdoctor")
    ledger = os.path.join(state_dir, "ledger.jsonl")
    try:
        private_dir(state_dir)
        lock = os.open(os.path.join(state_dir, "lock"), os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o600)
    except (Unsafe, OSError) as exc:
        sys.stderr.write("envdoctor: refusing %s: %s\n" % (state_dir, exc))
        sys.exit(UNSAFE_STATUS)
    fcntl.flock(lock, fcntl.LOCK_EX)  # held until exit: two runs never interleave
    refused = False
    entries = read_entries()
    for change in request["changes"]:
        step = apply if request["op"] == "apply" else revert
        try:
            result, message = step(change, entries)
        except Unsafe as exc:
            result, message = "refused", str(exc)
        except (IOError, OSError) as exc:
            result, message = "refused", "%s: %s" % (exc.filename or change["file"], exc.strerror)
        refused = refused or result == "refused"
        entries = read_entries()
        sys.stdout.write(json.dumps({"file": change["file"], "patch": change["patch"],
                                     "result": result, "message": message}) + "\n")
        sys.stdout.flush()
    sys.exit(REFUSED_STATUS if refused else 0)
