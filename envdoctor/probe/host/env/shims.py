# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# What a program found on PATH really runs. pyenv and asdf put shims on PATH (bash scripts
# that pick a version and exec the real program), conda and module systems put small sh
# wrappers there (`exec "/opt/conda/envs/x/bin/python" "$@"`), and pip writes a
# `#!/bin/sh` + `'''exec' "/long path/bin/python" "$0" "$@"` trampoline when the
# interpreter's path is too long or has spaces for a shebang. All are followed by READING
# them, the way `pyenv which` and `asdf which` decide: nothing is run.

import os
import re

from envdoctor.probe.host.core import MAX_TEXT_BYTES, read_regular

MAX_HOPS = 6
_PYENV_ROOT_LINE = re.compile(rb'^export PYENV_ROOT="([^"]+)"', re.M)
_PYENV_EXEC = re.compile(rb'pyenv"?\s+exec\s')
_EXEC_LINE = re.compile(rb'^\s*exec\s+(?:"(/[^"]+)"|(/\S+))(.*)$', re.M)
_TRAMPOLINE = re.compile(rb"^'''exec' (?:\"([^\"]+)\"|(\S+)) \"\$0\" \"\$@\"", re.M)


def read_head(path, size=4096):
    try:
        return read_regular(path, size, head=True)
    except OSError:
        return b""


def search_path(program, exclude=()):
    """The first executable `program` on PATH (the session's), skipping the shim folders."""
    skip = set(os.path.realpath(d) for d in exclude)
    for folder in (os.environ.get("ENVDOCTOR_PATH") or os.environ.get("PATH", "")).split(os.pathsep):
        if not folder or os.path.realpath(folder) in skip:
            continue
        candidate = os.path.join(folder, program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def read_version_words(path):
    """The versions a .python-version (or pyenv's global version) file names, in order."""
    try:
        text = read_regular(path, MAX_TEXT_BYTES, head=True).decode("utf-8", "replace")
    except OSError:
        return None
    words = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            words.extend(w for w in line.split() if ".." not in w)
    return words


def find_up(start, name):
    """The nearest `name` file in `start` or a folder above it."""
    folder = os.path.abspath(start)
    while True:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def pyenv_versions(root):
    """(versions, where they were set), as pyenv-version-name decides: $PYENV_VERSION, then
    .python-version from $PYENV_DIR or the working folder upwards, then the global file."""
    chosen = os.environ.get("PYENV_VERSION")
    if chosen:
        return chosen.split(":"), "PYENV_VERSION"
    starts = []
    for start in (os.environ.get("PYENV_DIR"), os.getcwd()):
        if start and start not in starts:
            starts.append(start)
    for start in starts:
        found = find_up(start, ".python-version")
        if found:
            words = read_version_words(found)
            if words:
                return words, found
    global_file = os.path.join(root, "version")
    words = read_version_words(global_file)
    if words:
        return words, global_file
    return ["system"], "no version file"


def _version_key(name):
    return [int(p) if p.isdigit() else -1 for p in re.split(r"[.\-]", name)]


def pyenv_prefix(root, name):
    """versions/NAME, or for a prefix such as 3.11 the newest installed 3.11.x (as pyenv does)."""
    if name.startswith("python-"):
        name = name[len("python-"):]
    versions = os.path.join(root, "versions")
    if os.path.isdir(os.path.join(versions, name)):
        return os.path.join(versions, name)
    try:
        matches = [v for v in os.listdir(versions) if v.startswith(name + ".")]
    except OSError:
        return None
    return os.path.join(versions, sorted(matches, key=_version_key)[-1]) if matches else None


def pyenv_which(root, program, shim_dir):
    names, where = pyenv_versions(root)
    for name in names:
        if name == "system":
            found = search_path(program, exclude=(shim_dir, os.path.join(root, "shims")))
        else:
            prefix = pyenv_prefix(root, name)
            found = os.path.join(prefix, "bin", program) if prefix else None
        if found and os.path.isfile(found):
            return found, "pyenv %s (set by %s)" % (name, where)
    return None, "pyenv finds no `%s` in version %s (set by %s)" % (program, ":".join(names), where)


def asdf_versions():
    chosen = os.environ.get("ASDF_PYTHON_VERSION")
    if chosen:
        return chosen.split(), "ASDF_PYTHON_VERSION"
    name = os.environ.get("ASDF_DEFAULT_TOOL_VERSIONS_FILENAME") or ".tool-versions"
    for found in (find_up(os.getcwd(), name), os.path.join(os.path.expanduser("~"), name)):
        if not found:
            continue
        try:
            text = read_regular(found, MAX_TEXT_BYTES, head=True).decode("utf-8", "replace")
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) > 1 and words[0] == "python":
                return words[1:], found
    return [], "no .tool-versions names python"


def asdf_which(program, shim_dir):
    data = os.environ.get("ASDF_DATA_DIR") or os.path.dirname(shim_dir)
    names, where = asdf_versions()
    for name in names:
        if name == "system":
            found = search_path(program, exclude=(shim_dir,))
        else:
            found = os.path.join(data, "installs", "python", name, "bin", program)
        if found and os.path.isfile(found):
            return found, "asdf python %s (set by %s)" % (name, where)
    return None, "asdf finds no `%s` (%s)" % (program, where)


def follow_launcher(path):
    """Follow shims and exec wrappers from `path` to the file that really runs.
    Returns {"resolved": path or None, "via": [steps], "error": ...}. Symlinks to an
    interpreter are NOT followed: a venv's bin/python is a link to its base interpreter."""
    via = []
    current = path
    for _ in range(MAX_HOPS):
        head = read_head(current)
        if not head.startswith(b"#!"):
            break  # a binary: this is what runs
        program = os.path.basename(current)
        shim_dir = os.path.dirname(current)
        if _PYENV_EXEC.search(head):
            match = _PYENV_ROOT_LINE.search(head)
            root = match.group(1).decode("utf-8", "replace") if match else (
                os.environ.get("PYENV_ROOT") or os.path.dirname(shim_dir))
            target, note = pyenv_which(root, program, shim_dir)
        elif b"asdf exec" in head or b"# asdf-plugin:" in head:
            target, note = asdf_which(program, shim_dir)
        else:
            match = _EXEC_LINE.search(head)
            if not match or b"$@" not in match.group(3):
                break  # a script with its own interpreter (a pip entry point): it is what runs
            target = (match.group(1) or match.group(2)).decode("utf-8", "replace")
            note = "wrapper %s" % current
        via.append(note)
        if target is None:
            return {"resolved": None, "via": via, "error": note}
        current = target
    return {"resolved": current, "via": via}


def script_interpreter(path):
    """The interpreter a script runs under: its shebang (`env X` looked up on PATH) or pip's
    sh trampoline; None for a binary."""
    head = read_head(path)
    if not head.startswith(b"#!"):
        return None
    match = _TRAMPOLINE.search(head)
    if match:
        return (match.group(1) or match.group(2)).decode("utf-8", "replace")
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        return search_path(names[0]) if names else None
    return words[0]
