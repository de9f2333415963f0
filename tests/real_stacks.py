"""The real serving stacks envdoctor is judged on, pinned in one place, and their builder.

Users build them with uv (`uv venv -p 3.12 && uv pip install vllm==... speculators==...`), so
the tests and `bench/real_stack_bench.py` do too. Moving a stack to newer releases is a change
of its line in :data:`STACKS`. A built stack is kept (9-10 GB each) under
``$ENVDOCTOR_STACKS_DIR`` (default ``~/.cache/envdoctor-stacks``), in a folder named by a digest
of its pins and interpreter, so a later run reuses it and a changed pin builds a new one; uv's
own cache makes a rebuild take about a minute. The files are copied from uv's cache, not
hard-linked: a link shares its inode with the cache, whose ctime moves whenever another venv
links the same wheel, and the host caches envdoctor keys by ctime would then miss at random.

Only the standard library here: the bench imports it without pytest.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: name -> the requirements uv installs, exactly as a user types them.
STACKS: dict[str, tuple[str, ...]] = {
    "vllm": ("vllm==0.33.0", "speculators==0.9.0"),
    "sglang": ("sglang==0.5.23",),
}
#: The Python the stacks are built for (their wheels are cp312).
STACK_PYTHON = "3.12"
_COMPLETE = ".envdoctor-stack-complete"


class StackUnavailable(Exception):
    """The stack cannot be built here (no uv, no Python 3.12, the index unreachable)."""


def stacks_dir() -> Path:
    return Path(os.environ.get("ENVDOCTOR_STACKS_DIR") or Path.home() / ".cache" / "envdoctor-stacks")


def find_uv() -> str:
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.exists() else shutil.which("uv")
    if not found:
        raise StackUnavailable("uv is not installed (`pip install -e '.[test]'` installs it)")
    return found


def find_python() -> str:
    """A CPython 3.12 to build the stacks on: $ENVDOCTOR_STACK_PYTHON, python3.12 on PATH, a
    pyenv or uv-managed one; else the version for uv to find or fetch."""
    chosen = os.environ.get("ENVDOCTOR_STACK_PYTHON")
    if chosen:
        return chosen
    candidates = [shutil.which(f"python{STACK_PYTHON}") or ""]
    candidates += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{STACK_PYTHON}.*/bin/python{STACK_PYTHON}")))
    candidates += sorted(glob.glob(os.path.expanduser(f"~/.local/share/uv/python/cpython-{STACK_PYTHON}.*/bin/python{STACK_PYTHON}")))
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            try:
                subprocess.run([candidate, "-c", "import sys"], check=True, capture_output=True, timeout=30)
            except (OSError, subprocess.SubprocessError):
                continue
            return candidate
    return STACK_PYTHON


def stack_path(name: str, python: str | None = None) -> Path:
    python = python or find_python()
    key = hashlib.sha256("\n".join((*STACKS[name], python)).encode()).hexdigest()[:10]
    return stacks_dir() / f"{name}-{key}"


def build_stack(name: str, *, log=None) -> Path:
    """The stack's venv, built with uv unless a complete build is kept; raises StackUnavailable."""
    if name not in STACKS:
        raise KeyError(f"no stack named {name!r}; known: {', '.join(STACKS)}")
    python = find_python()
    venv = stack_path(name, python)
    if (venv / _COMPLETE).is_file():
        return venv
    uv = find_uv()
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    steps = ([uv, "venv", "-q", "-p", python, str(venv)],
             [uv, "pip", "install", "-q", "--link-mode=copy", "--python", str(venv / "bin" / "python"), *STACKS[name]])
    for command in steps:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise StackUnavailable(f"`{' '.join(command[:3])} ...` failed for stack {name}: {tail}")
        if log:
            log(f"{name}: {' '.join(command[1:3])} done")
    (venv / _COMPLETE).write_text("\n".join(STACKS[name]) + "\n")
    return venv
