"""C++ symbol names made readable with the controller's c++filt, when it has one.

Only for messages: a name c++filt cannot read, or a controller without binutils, keeps
the mangled name, which is what the loader's ImportError prints anyway.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable

DEMANGLE_TIMEOUT = 10


def demangle(names: Iterable[str]) -> dict[str, str]:
    """{mangled: readable} for the names c++filt turned into something else."""
    wanted = [n for n in dict.fromkeys(names) if n.startswith("_Z") and "\n" not in n]
    tool = shutil.which("c++filt")
    if not wanted or tool is None:
        return {}
    try:
        done = subprocess.run([tool], input="\n".join(wanted) + "\n", capture_output=True, text=True,
                              timeout=DEMANGLE_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != len(wanted):
        return {}
    return {name: f"{line} [{name}]" for name, line in zip(wanted, lines) if line != name}
