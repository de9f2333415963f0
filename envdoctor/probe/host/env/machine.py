# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "host": what a non-interactive command reaches (python3, pip, uv), GPUs, free disk.

import os
import platform
import shutil
import socket
import sys

from envdoctor.probe.host.core import run_command, section
from envdoctor.probe.host.env.discovery import real_if_moved
from envdoctor.probe.host.env.shims import follow_launcher, script_interpreter, search_path

#: Where uv's installer puts uv when it is not on the PATH of a non-interactive command
#: (~/.local/bin; older installers used cargo's ~/.cargo/bin).
MACHINE_UV_DIRS = (".local/bin", ".cargo/bin")

def describe_program(path):
    """Where a program found on PATH really points: its realpath, the file that really runs
    after pyenv/asdf shims and exec wrappers (read, never run: see shims.py), and this host's
    resolution of that file's folder when links change it (what the controller compares with
    an environment's bin folder)."""
    info = {"path": path, "realpath": os.path.realpath(path)}
    launched = follow_launcher(path)
    info["resolved"] = launched["resolved"]
    info["via"] = launched["via"]
    if launched.get("error"):
        info["error"] = launched["error"]
    folder = real_if_moved(os.path.dirname(launched["resolved"] or path))
    if folder:
        info["real_dir"] = folder
    return info


def describe_pip(path):
    """A pip script belongs to the interpreter it runs under (shebang or sh trampoline),
    itself followed through shims."""
    info = describe_program(path)
    script = info["resolved"]
    if not script:
        return info
    interpreter = script_interpreter(script)
    if interpreter:
        info["shebang"] = interpreter
        launched = follow_launcher(interpreter)
        info["interpreter"] = launched["resolved"] or interpreter
        info["via"] = info["via"] + launched["via"]
        folder = real_if_moved(os.path.dirname(info["interpreter"]))
        if folder:
            info["interpreter_real_dir"] = folder
    return info


def describe_uv(home):
    """The uv that fix installs with into a venv that has no pip: the first `uv` on the PATH of
    a non-interactive command, else where uv's installer puts it; shims followed by reading
    them (a pyenv shim whose version lacks uv is skipped), never run. None when there is none."""
    candidates = []
    found = search_path("uv")
    if found:
        candidates.append((found, "PATH"))
    for folder in MACHINE_UV_DIRS:
        candidates.append((os.path.join(home, folder, "uv"), "~/" + folder))
    for path, where in candidates:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            continue
        info = describe_program(path)
        if info.get("error") or not info["resolved"]:
            continue
        info["found_in"] = where
        return info
    return None


def gpu_facts():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {"nvidia_smi": None, "gpus": []}
    status, out, err = run_command([smi, "-L"], timeout=20)
    gpus = [line.strip() for line in out.splitlines() if line.strip().startswith("GPU ")]
    result = {"nvidia_smi": smi, "gpus": gpus, "exit_status": status}
    if status != 0:
        result["error"] = (err.strip() or out.strip())[:500]
    return result


def disk_facts(paths):
    seen = {}
    for path in paths:
        probe_path = path
        while probe_path and not os.path.exists(probe_path):
            probe_path = os.path.dirname(probe_path)
        if not probe_path:
            continue
        try:
            usage = shutil.disk_usage(probe_path)
        except OSError:
            continue
        seen[path] = {"free": usage.free, "total": usage.total, "mount": mount_point(probe_path)}
    return seen


def mount_point(path):
    """The folder the filesystem holding `path` is mounted on."""
    path = os.path.realpath(path)
    while not os.path.ismount(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


@section("host")
def host_section(args, emit):
    env = os.environ
    on_path = {}
    for key, program in (("python3", "ENVDOCTOR_PY3"), ("python", "ENVDOCTOR_PYTHON")):
        found = env.get(program) or None
        on_path[key] = describe_program(found) if found else None
    for key, program in (("pip", "ENVDOCTOR_PIP"), ("pip3", "ENVDOCTOR_PIP3")):
        found = env.get(program) or None
        on_path[key] = describe_pip(found) if found else None
    home = os.path.expanduser("~")
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "user": env.get("USER") or env.get("LOGNAME") or "",
        "home": home,
        "path_env": env.get("ENVDOCTOR_PATH", env.get("PATH", "")),
        "probe_python": {"executable": os.path.realpath(sys.executable), "version": platform.python_version()},
        "on_path": on_path,
        "uv": describe_uv(home),
        "gpu": gpu_facts(),
        "disk": disk_facts([home] + list(args.get("disk_paths", []))),
    }
