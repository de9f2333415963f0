# Runs ON THE HOST. Python standard library only; keep it working on Python 3.6+
# (no walrus, no builtin generics, no `from __future__`), since a GPU host's default
# interpreter can be old. The controller concatenates this file with the section modules
# it needs (see envdoctor.probe.program) and sends them in one command.
#
# Protocol: the first line of stdin is the JSON request {"sections": {name: args}, "size": N}
# (with "deadline" and "watch": see guard.py); the next N bytes of stdin are this program.
# Each section writes one JSON line as soon as it is done:
#   {"section": name, "data": ...}     or     {"section": name, "error": "..."}
# and a last line {"done": true} (with the files skipped and the sections not finished). A
# section may also stream {"section": name, "item": ...} lines before its final line, so
# large results never sit whole in memory. main() is in guard.py, sent after this file.

import errno
import glob
import json
import os
import re
import stat
import sys
import time

# subprocess, email.parser and traceback are imported where they are used: together they
# cost 20 ms of start-up, and a section such as the audit needs none of them.

SECTIONS = {}


def section(name):
    """Register a function(args, emit) as the probe section `name`."""

    def register(func):
        SECTIONS[name] = func
        return func

    return register


#: Section name -> function(args) that starts the section's slow child processes (a live
#: tokenizer load) when the probe starts, so they run while the sections before it do.
PRESTARTS = {}


def prestart(name):
    """Register a function(args) that guard.main calls for section `name` before any section runs."""

    def register(func):
        PRESTARTS[name] = func
        return func

    return register


#: Flags for reading a file of the host: opening a FIFO someone put in place of one would
#: otherwise wait for a writer forever (O_NONBLOCK changes nothing for regular files).
READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)

#: Byte budgets per kind of file the probe reads: a real file of the kind fits with room to
#: spare; a larger one (a sparse multi-GiB METADATA planted in a shared folder) is skipped
#: and named, never read into memory.
MAX_TEXT_BYTES = 64 * 1024  # pyvenv.cfg, INSTALLER, .python-version, launchers, /proc and /sys texts
MAX_METADATA_BYTES = 4 << 20  # the header block of METADATA / PKG-INFO (the body is never read)
MAX_LIST_BYTES = 4 << 20  # requires.txt, top_level.txt, direct_url.json, .pth files
MAX_RECORD_BYTES = 32 << 20  # RECORD, installed-files.txt (torch's RECORD is about 2 MB)
MAX_LEDGER_BYTES = 64 << 20  # the patch ledger
MAX_SOURCE_BYTES = 4 << 20  # a Python source read for scan or drift (the request may lower it)
MAX_HASHED_BYTES = 1 << 30  # a file hashed whole (patched files, model files), read in chunks
MAX_INSTALLED_BYTES = 8 << 30  # an installed file the audit hashes (libtorch_cuda.so is about 1.5 GB)
MAX_CODE_BYTES = 64 << 20  # a Python source read whole to hash it (a hash-based .pyc's check)
MAX_CACHE_BYTES = 256 << 20  # a cache of the probe's own, in the user's cache folder
#: Files named in the answer as skipped, at most (the count of the others is given).
MAX_SKIPS_LISTED = 100


class Skipped(OSError):
    """A file the probe did not read, and why (its strerror): not a regular file, over its
    kind's budget, or unreadable. Noted in SKIPS as well, so the controller can name it."""


#: {"section", "path", "why"} of each file skipped during this run, in order (see note_skip).
SKIPS = []
_SKIP_STATE = {"section": "", "more": 0, "seen": set()}


def note_skip(path, why):
    """Remember that `path` was not read (once per path) and return a Skipped to raise."""
    text = path.decode("utf-8", "surrogateescape") if isinstance(path, bytes) else str(path)
    if text not in _SKIP_STATE["seen"]:
        _SKIP_STATE["seen"].add(text)
        if len(SKIPS) < MAX_SKIPS_LISTED:
            SKIPS.append({"section": _SKIP_STATE["section"], "path": text, "why": why})
        else:
            _SKIP_STATE["more"] += 1
    return Skipped(errno.EFBIG, why, text)


def _unnoted(path, why):
    return Skipped(errno.EFBIG, why, path.decode("utf-8", "surrogateescape") if isinstance(path, bytes) else path)


def _size_text(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return "%.1f %s" % (size / float(scale), unit)
    return "%d bytes" % size


def _kind_text(mode):
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def regular_fd(path, limit=None, nofollow=False, note=True):
    """(fd, stat) of the regular file at `path`, opened for reading without blocking: the one
    place the probe opens a file of the host to read it. Anything else (a FIFO, a device such
    as a symlink to /dev/zero, a folder), a file over `limit` bytes, or one that cannot be
    opened raises OSError; all but a file that does not exist are noted (note_skip), unless
    `note` is false (the caller names the file in its own answer)."""
    skip = note_skip if note else _unnoted
    try:
        fd = os.open(path, READ_FLAGS | (getattr(os, "O_NOFOLLOW", 0) if nofollow else 0))
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise
        raise skip(path, "cannot be opened: %s" % (exc.strerror or exc))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise skip(path, "%s, not a regular file" % _kind_text(info.st_mode))
        if limit is not None and info.st_size > limit:
            raise skip(path, "%s, more than the %s read of such a file" % (_size_text(info.st_size),
                                                                          _size_text(limit)))
        return fd, info
    except BaseException:
        os.close(fd)
        raise


def open_regular(path, limit=None, nofollow=False):
    """regular_fd's file as a binary file object (close it, or use `with`)."""
    fd, _ = regular_fd(path, limit, nofollow)
    return os.fdopen(fd, "rb")


def regular_chunks(path, limit, head=False, note=True):
    """The regular file at `path` (see regular_fd) in chunks of at most 1 MiB, `limit` bytes
    in all: a larger file is skipped, or with `head` only its first `limit` bytes are read. A
    file that grows past `limit` while it is read (or a /proc file, whose size says 0) is
    skipped too: one byte more than the budget is asked for to tell."""
    fd, _ = regular_fd(path, None if head else limit, note=note)
    skip = note_skip if note else _unnoted
    left = limit if head else limit + 1
    try:
        while left > 0:
            try:
                chunk = os.read(fd, min(left, 1 << 20))
            except OSError as exc:
                raise skip(path, "cannot be read: %s" % (exc.strerror or exc))
            if not chunk:
                return
            left -= len(chunk)
            if left <= 0 and not head:
                raise skip(path, "grew past the %s read of such a file" % _size_text(limit))
            yield chunk
    finally:
        os.close(fd)


def read_regular(path, limit, head=False, note=True):
    """The bytes of the regular file at `path`, as regular_chunks reads them."""
    return b"".join(regular_chunks(path, limit, head, note))


def sha256_regular(path, limit=MAX_HASHED_BYTES):
    """The sha256 (hex) of the regular file at `path`, as regular_chunks reads it."""
    import hashlib

    digest = hashlib.sha256()
    for chunk in regular_chunks(path, limit):
        digest.update(chunk)
    return digest.hexdigest()


_BLANK_LINE = re.compile(br"(?:\A|\n)\r?\n")


def read_header_block(path, limit=MAX_METADATA_BYTES):
    """The RFC 822 header block of a METADATA or PKG-INFO file (up to its first empty line),
    as bytes; skipped when the block runs past `limit` bytes."""
    data = read_regular(path, limit, head=True)
    blank = _BLANK_LINE.search(data)
    if blank is not None:
        return data[:blank.start() + 1] if blank.start() else b""  # (at 0: the first line is empty)
    if len(data) >= limit:
        raise note_skip(path, "its header block runs past %s" % _size_text(limit))
    return data


#: Per-environment caches of one kind (drift-, gpu-, imports-, audit-, digests-, models-) that the user's cache
#: folder keeps: when a new one is made, the least recently used beyond this many are removed,
#: so that environments made and deleted by the hundred (tox, CI) leave no trail behind.
USER_CACHE_KEEP = 32
#: The names this program gives its per-environment caches; nothing else is ever removed.
_USER_CACHE_NAME = re.compile(r"\A((?:drift|gpu|audit|digests|models)-[0-9a-f]{12}|(?:imports|sources)-[0-9a-f]{16})\Z")
#: A cache read this long after it was last written has its time set again (for the pruning's order).
_CACHE_TOUCH_AFTER = 24 * 3600


def touch_user_cache(path):
    """Note that a per-environment cache was used (its mtime), at most once a day; only a
    name this program gives in the user's cache folder (not a venv's own .envdoctor)."""
    if not _USER_CACHE_NAME.match(os.path.basename(path)):
        return
    try:
        if os.lstat(path).st_mtime < time.time() - _CACHE_TOUCH_AFTER:
            os.utime(path)
    except OSError:
        pass


def prune_user_caches(new_path, keep=USER_CACHE_KEEP):
    """After the cache new_path (~/.cache/envdoctor/<kind>-<digest>) was made, remove the least
    recently used caches of its kind beyond `keep`, never new_path: only names this program
    gives, owned by this user, a folder emptied of its files without following a symlink.
    Best effort: a cache another run is writing only misses that write."""
    folder, name = os.path.split(new_path)
    if not _USER_CACHE_NAME.match(name):
        return []
    kind = name.split("-", 1)[0] + "-"
    uid = os.getuid()
    found = []
    try:
        for entry in os.listdir(folder):
            if entry.startswith(kind) and entry != name and _USER_CACHE_NAME.match(entry):
                path = os.path.join(folder, entry)
                info = os.lstat(path)
                if info.st_uid == uid and (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
                    found.append((info.st_mtime, path, stat.S_ISDIR(info.st_mode)))
    except OSError:
        return []
    found.sort(reverse=True)
    removed = []
    for _, path, is_dir in found[max(0, keep - 1):]:  # new_path counts as one of `keep`
        try:
            if is_dir:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
                try:
                    for inner in os.listdir(fd):
                        os.unlink(inner, dir_fd=fd)  # a file, or a link itself; never what it names
                finally:
                    os.close(fd)
                os.rmdir(path)
            else:
                os.unlink(path)
            removed.append(path)
        except OSError:
            continue
    return removed


_UTF8_BOM = b"\xef\xbb\xbf"


def decode_source(data):
    """(text, None), or (None, why Python would refuse it): Python source bytes decoded as
    the interpreter reads them (PEP 3120 and 263): UTF-8, unless a coding declaration on
    one of the first two lines names another codec; a UTF-8 byte-order mark is dropped.
    Line ends are kept as they are, unlike importlib.util.decode_source."""
    second_end = data.find(b"\n", data.find(b"\n") + 1)
    head = data[:second_end] if second_end >= 0 else data
    encoding = "utf-8"
    if data.startswith(_UTF8_BOM) or b"coding" in head:
        import io
        import tokenize

        try:
            encoding = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
        except SyntaxError as exc:  # an unknown codec, or one that contradicts the BOM
            return None, "bad coding declaration: %s" % exc.msg
    try:
        return data.decode(encoding), None
    except UnicodeDecodeError as exc:
        if encoding.startswith("utf-8"):
            return None, "not UTF-8 text (byte %d)" % exc.start
        return None, "not %s text as its coding declaration says (byte %d)" % (encoding, exc.start)
    except LookupError:  # pragma: no cover - detect_encoding has looked the codec up already
        return None, "bad coding declaration: unknown encoding %s" % encoding


def open_state_file(prefix, name, limit=MAX_LEDGER_BYTES):
    """prefix/.envdoctor/name for reading, only when .envdoctor is a real folder and name a
    regular file (neither a symlink): a planted link must not make us read another file."""
    folder = os.path.join(prefix, b".envdoctor" if isinstance(prefix, bytes) else ".envdoctor")
    if not stat.S_ISDIR(os.lstat(folder).st_mode):
        raise OSError(errno.ELOOP, ".envdoctor is not a real folder", folder)
    return open_regular(os.path.join(folder, name), limit, nofollow=True)


def within(path, root):
    """Whether `path`, symlinks resolved, is inside the folder `root`."""
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def emit_line(obj):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def run_command(argv, timeout=30, stdin_data=None, env=None, cwd=None):
    """Run argv; return (exit_status, stdout_text, stderr_text). Never raises for the command."""
    return finish_command(start_command(argv, stdin_data is not None, env, cwd), time.time() + timeout, stdin_data)


def start_command(argv, with_stdin=False, env=None, cwd=None):
    """Start argv with its output captured (stdin closed unless `with_stdin`): the process, or
    the error text when it could not start. finish_command collects it."""
    import subprocess

    try:
        return subprocess.Popen(argv, stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd)
    except OSError as exc:
        return str(exc)


def finish_command(proc, until, stdin_data=None):
    """(exit_status, stdout_text, stderr_text) of a started command, killed (124) when it runs
    past `until` (a time.time()); 127 when it never started."""
    import subprocess

    if isinstance(proc, str):
        return 127, "", proc
    timeout = max(0.1, until - time.time())
    try:
        out, err = proc.communicate(stdin_data, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return 124, out.decode("utf-8", "replace"), "timed out after %.0fs" % timeout
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


_NAME_SEPARATORS = re.compile(r"[-_.]+")


def canonical_name(name):
    """A distribution name as PEP 503 compares it."""
    return _NAME_SEPARATORS.sub("-", name).lower()


def read_headers(path):
    """The RFC 822 headers of a METADATA or PKG-INFO file (the body is the long description)."""
    import email.parser

    text = read_header_block(path).decode("utf-8", "replace")
    return email.parser.HeaderParser().parsestr(text)


def venv_prefix_of(python):
    """The venv an interpreter path belongs to, found as site.py finds it (pyvenv.cfg beside
    the interpreter or one folder up), or None. Reads files only: nothing is run."""
    exe_dir = os.path.dirname(os.path.abspath(python))
    prefix = os.path.dirname(exe_dir)
    for folder in (exe_dir, prefix):
        if os.path.isfile(os.path.join(folder, "pyvenv.cfg")):
            return prefix
    return None


def read_pyvenv_cfg(prefix):
    """prefix/pyvenv.cfg as a dict of lower-cased keys; empty when there is none."""
    settings = {}
    try:
        text = read_regular(os.path.join(prefix, "pyvenv.cfg"), MAX_TEXT_BYTES).decode("utf-8", "replace")
    except OSError:
        return settings
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            settings[key.strip().lower()] = value.strip()
    return settings


def pyvenv_setting(prefix, key):
    """A `key = value` line of prefix/pyvenv.cfg, lower-cased key; None when absent."""
    return read_pyvenv_cfg(prefix).get(key)


def interpreter_prefix():
    """This interpreter's environment. The probe runs with -I -S, so site.py never ran: on
    Python < 3.11 sys.prefix is then the base install even inside a venv."""
    return venv_prefix_of(sys.executable) or sys.prefix


def own_site_dirs():
    """The site folders this interpreter would import from, computed from the venv layout and
    pyvenv.cfg (never from sys.path: under -S no .pth file ran and sys.path lacks them)."""
    return env_site_dirs(venv_prefix_of(sys.executable))


def env_site_dirs(venv):
    """The site folders of the venv at `venv` (with the base's when its pyvenv.cfg includes
    the system site-packages), or of this interpreter's own install when `venv` is None."""
    found = site_dirs(venv) if venv else []
    if venv is None or (pyvenv_setting(venv, "include-system-site-packages") or "").lower() == "true":
        import site  # under -S importing site only defines functions; getsitepackages runs no .pth

        base = [getattr(sys, "base_prefix", sys.prefix), getattr(sys, "base_exec_prefix", sys.exec_prefix)]
        for path in site.getsitepackages(base if venv else None):
            if os.path.isdir(path) and path not in found:
                found.append(path)
    return found


def site_dirs(prefix):
    """The site-packages folders of an environment; without a prefix, this interpreter's."""
    if not prefix:
        return own_site_dirs()
    found = []
    for pattern in ("lib/python3*/site-packages", "lib64/python3*/site-packages"):
        for path in sorted(glob.glob(os.path.join(prefix, pattern))):
            if os.path.realpath(path) not in [os.path.realpath(p) for p in found]:
                found.append(path)
    return found


def site_entries(sites):
    """(site, entry name) for each folder's entries, sorted; a folder that cannot be listed is skipped."""
    for site in sites:
        try:
            entries = sorted(os.listdir(site))
        except OSError:
            continue
        for entry in entries:
            yield site, entry


def skipping_for(section_name):
    """Name the section that the files skipped from now on were read for."""
    _SKIP_STATE["section"] = section_name


def end_record(unfinished=(), seconds=None):
    """The last line: the end marker, with the files skipped on the way (see note_skip), the
    sections the probe's deadline stopped and each section's wall time (see guard.py)."""
    record = {"done": True}
    if seconds:
        record["seconds"] = seconds
    if SKIPS:
        record["skipped"] = SKIPS
    if _SKIP_STATE["more"]:
        record["skipped_more"] = _SKIP_STATE["more"]
    if unfinished:
        record["unfinished"] = list(unfinished)
    return record
