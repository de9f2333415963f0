# Runs ON THE HOST. Python standard library only; keep it working on Python 3.6+
# (no walrus, no builtin generics, no `from __future__`), since a GPU host's default
# interpreter can be old. The controller concatenates this file with the section modules
# it needs (see envdoctor.probe.program) and sends them in one command.
#
# Protocol: the first line of stdin is the JSON request {"sections": {name: args}}; the
# rest of stdin is this program. Each section writes one JSON line as soon as it is done:
#   {"section": name, "data": ...}     or     {"section": name, "error": "..."}
# and a last line {"done": true}. A section may also stream {"section": name, "item": ...}
# lines before its final line, so large results never sit whole in memory.

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


#: Flags for reading an installed file: opening a FIFO someone put in place of one would
#: otherwise wait for a writer forever (O_NONBLOCK changes nothing for regular files).
READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)


def open_regular(path):
    """A regular file opened for binary reading; OSError for anything else (see READ_FLAGS)."""
    fd = os.open(path, READ_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


#: Per-environment caches of one kind (drift-, gpu-, imports-, audit-, digests-) that the user's cache
#: folder keeps: when a new one is made, the least recently used beyond this many are removed,
#: so that environments made and deleted by the hundred (tox, CI) leave no trail behind.
USER_CACHE_KEEP = 32
#: The names this program gives its per-environment caches; nothing else is ever removed.
_USER_CACHE_NAME = re.compile(r"\A((?:drift|gpu|audit|digests)-[0-9a-f]{12}|imports-[0-9a-f]{16})\Z")
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


def open_state_file(prefix, name):
    """prefix/.envdoctor/name for reading, only when .envdoctor is a real folder and name a
    regular file (neither a symlink): a planted link must not make us read another file."""
    folder = os.path.join(prefix, b".envdoctor" if isinstance(prefix, bytes) else ".envdoctor")
    if not stat.S_ISDIR(os.lstat(folder).st_mode):
        raise OSError(errno.ELOOP, ".envdoctor is not a real folder", folder)
    fd = os.open(os.path.join(folder, name), READ_FLAGS | getattr(os, "O_NOFOLLOW", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", name)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def within(path, root):
    """Whether `path`, symlinks resolved, is inside the folder `root`."""
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def emit_line(obj):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def run_command(argv, timeout=30, stdin_data=None, env=None, cwd=None):
    """Run argv; return (exit_status, stdout_text, stderr_text). Never raises for the command."""
    import subprocess

    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
        )
    except OSError as exc:
        return 127, "", str(exc)
    try:
        out, err = proc.communicate(stdin_data, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return 124, out.decode("utf-8", "replace"), "timed out after %ss" % timeout
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


_NAME_SEPARATORS = re.compile(r"[-_.]+")


def canonical_name(name):
    """A distribution name as PEP 503 compares it."""
    return _NAME_SEPARATORS.sub("-", name).lower()


def read_headers(path):
    """The RFC 822 headers of a METADATA or PKG-INFO file (the body is the long description)."""
    lines = []
    with open(path, "rb") as handle:
        for raw in handle:
            if raw in (b"\n", b"\r\n"):
                break
            lines.append(raw.decode("utf-8", "replace"))
    import email.parser

    return email.parser.HeaderParser().parsestr("".join(lines))


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
        with open_regular(os.path.join(prefix, "pyvenv.cfg")) as handle:
            text = handle.read(65536).decode("utf-8", "replace")
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


def main(request):
    for name, args in sorted(request.get("sections", {}).items()):
        func = SECTIONS.get(name)
        if func is None:
            emit_line({"section": name, "error": "this probe has no section %r" % name})
            continue

        def emit_item(item, _name=name):
            emit_line({"section": _name, "item": item})

        try:
            data = func(args or {}, emit_item)
        except Exception:
            import traceback

            emit_line({"section": name, "error": traceback.format_exc(limit=6)})
        else:
            emit_line({"section": name, "data": data})
    emit_line({"done": True})
