"""Each distinct venv the tests ask for is built (and its bytecode compiled) once per run, then
copied to where each test wants it, as `cp -a` would, with what names the venv's own path
written again for the new one.

Compiling a venv's bytecode is most of the CPU of building it (~15 CPU-seconds for one with
transformers, ~1.3 for pip alone, against ~0.3 for copying), and a run builds some 70 venvs
with pip and several with transformers, most of them alike. A copy is the venv a direct build
at the new path makes (tests/e2e/test_venv_clones.py compares the two): the files as they
were, modification times kept (the compiled bytecode stays valid, and Python's loader names
each module's source by where it is now), pyvenv.cfg and the activate scripts written by the
venv module for the new path, and console scripts' first lines made as uv makes them (a path
with a space, or a first line past 127 bytes, runs the interpreter through /bin/sh).

The built venvs live in a folder of the run (ENVDOCTOR_TESTS_VENV_TEMPLATES, made by the
controller in pytest_configure and shared by the xdist workers, removed at its end), each
built under a lock by the first worker that needs it.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import venv as venv_module
from collections.abc import Callable
from pathlib import Path

TEMPLATES_VARIABLE = "ENVDOCTOR_TESTS_VENV_TEMPLATES"
_PREFIX = "envdoctor-venv-templates-"


def start_run() -> Path:
    """The run's folder of built venvs (made once, by the pytest controller); folders left by
    runs that were killed are removed."""
    for stale in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*"):
        pid = stale.name.removeprefix(_PREFIX).split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(stale, ignore_errors=True)
    root = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
    os.environ[TEMPLATES_VARIABLE] = str(root)
    return root


def end_run(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)


def built_once(key: object, build: Callable[[Path], None]) -> Path | None:
    """The venv ``build(path)`` makes for ``key``, built by the first caller of the run (None
    outside a pytest run: a bench builds its venvs where it wants them)."""
    if not os.environ.get(TEMPLATES_VARIABLE):
        return None
    root = Path(os.environ[TEMPLATES_VARIABLE])
    digest = hashlib.sha256(json.dumps([sys.executable, key]).encode()).hexdigest()[:20]
    folder = root / digest
    with open(root / f"{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "complete").exists():
            shutil.rmtree(folder, ignore_errors=True)
            build(folder / "venv")
            (folder / "complete").touch()
    return folder / "venv"


def shebang(python: str) -> bytes:
    """The first line(s) uv writes into a console script for the interpreter ``python``."""
    if " " in python or len(python) + 3 > 127:
        quoted = python.replace("'", "'\"'\"'")
        return f"#!/bin/sh\n'''exec' '{quoted}' \"$0\" \"$@\"\n' '''".encode()
    return f"#!{python}".encode()


def clone_venv(template: Path, path: Path) -> Path:
    """A copy of the venv ``template`` at ``path`` (which must not exist, or is replaced)."""
    if path.exists():
        shutil.rmtree(path)
    shutil.copytree(template, path, symlinks=True)
    # pyvenv.cfg and the activate scripts, as the venv module writes them for this path.
    builder = venv_module.EnvBuilder(with_pip=False, clear=True)
    context = venv_module.EnvBuilder(with_pip=False).ensure_directories(os.path.abspath(path))
    builder.create_configuration(context)
    builder.setup_scripts(context)
    old = shebang(str(template / "bin" / "python"))
    new = shebang(str(path / "bin" / "python"))
    rewritten: dict[str, bytes] = {}
    for script in (path / "bin").iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        with open(script, "rb") as handle:
            head = handle.read(len(old))
            rest = handle.read() if head == old else b""
        if rest[:1] != b"\n":
            continue
        script.write_bytes(new + rest)
        rewritten[script.name] = new + rest
    if rewritten:
        _record_scripts(path, rewritten)
    return path


def _record_scripts(venv: Path, scripts: dict[str, bytes]) -> None:
    """Each RECORD's line of a rewritten console script: its new hash and size."""
    for record in venv.glob("lib/python*/site-packages/*.dist-info/RECORD"):
        lines = record.read_bytes().split(b"\n")
        changed = False
        for index, line in enumerate(lines):
            name, _, _ = line.partition(b",")
            where = Path(name.decode("utf-8", "surrogateescape"))  # ../../../bin/<script>
            script = scripts.get(where.name)
            if script is None or where.parts[:1] != ("..",) or where.parent.name != "bin":
                continue
            digest = base64.urlsafe_b64encode(hashlib.sha256(script).digest()).rstrip(b"=")
            lines[index] = name + b",sha256=" + digest + b"," + str(len(script)).encode()
            changed = True
        if changed:
            record.write_bytes(b"\n".join(lines))
