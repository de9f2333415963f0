# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Where the Python environments of a host are, and what they hold, found by READING FILES
# ONLY: pyvenv.cfg, conda-meta/, the folder layout and the *.dist-info of the site folders.
# Nothing found here is ever executed: a discovered interpreter may be another user's (the
# probe often runs as root), a pyenv shim, or planted. Only the interpreter the user chose,
# or with none chosen the default python3, is started (venvs.py).

import glob
import os
import platform
import re

from envdoctor.probe.host.core import MAX_LIST_BYTES, read_pyvenv_cfg, read_regular, site_dirs

#: Folders users keep environments in (uv's project .venv in the home folder matches ~/.venv*).
DISCOVERY_PATTERNS = (
    "/root/venv*",
    "~/venv*",
    "~/.venv*",
    "~/venvs/*",
    "~/.venvs/*",
    "~/.virtualenvs/*",
    "/opt/*/venv",
    "/opt/venv*",
)
CONDA_ROOTS = (
    "/opt/conda",
    "/opt/miniconda3",
    "/opt/miniforge3",
    "/opt/anaconda3",
    "~/miniconda3",
    "~/anaconda3",
    "~/miniforge3",
    "~/mambaforge",
    "~/.conda",
)
#: A host with more environments than this gets the first ones (sorted) reported.
MAX_DISCOVERED = 64
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def pyenv_root():
    return os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")


def has_interpreter(prefix):
    return any(os.path.lexists(os.path.join(prefix, "bin", name)) for name in ("python3", "python"))


def is_env_dir(path):
    """A venv (pyvenv.cfg), a conda env (conda-meta/), or an installed Python (pyenv's versions)."""
    if os.path.isfile(os.path.join(path, "pyvenv.cfg")) or os.path.isdir(os.path.join(path, "conda-meta")):
        return True
    return has_interpreter(path) and bool(glob.glob(os.path.join(path, "lib", "python3*")))


def candidate_paths():
    found = []
    for pattern in DISCOVERY_PATTERNS:
        found.extend(sorted(glob.glob(os.path.expanduser(pattern))))
    versions = os.path.join(pyenv_root(), "versions")
    found.extend(sorted(glob.glob(os.path.join(versions, "*"))))  # installs, and pyenv-virtualenv's links
    found.extend(sorted(glob.glob(os.path.join(versions, "*", "envs", "*"))))
    for root in CONDA_ROOTS:
        root = os.path.expanduser(root)
        if os.path.isdir(root):
            found.append(root)
            found.extend(sorted(glob.glob(os.path.join(root, "envs", "*"))))
    try:
        text = read_regular(os.path.expanduser("~/.conda/environments.txt"), MAX_LIST_BYTES, head=True)
        text = text.decode("utf-8", "replace")
        found.extend(line.strip() for line in text.splitlines() if line.strip().startswith("/"))
    except OSError:
        pass
    return found


def discover_envs(exclude=()):
    """Environments under the usual roots, each once (a symlinked one under its first name)."""
    seen = set(os.path.realpath(p) for p in exclude)
    unique = []
    for path in candidate_paths():
        path = os.path.abspath(path)
        real = os.path.realpath(path)
        if real in seen or not os.path.isdir(path) or not is_env_dir(path):
            continue
        seen.add(real)
        unique.append(path)
        if len(unique) >= MAX_DISCOVERED:
            break
    return unique


def real_if_moved(path):
    """This host's realpath of `path` when symlinks change it, else None. The controller
    compares host paths only through these (its own file system is another machine's); a
    path no link changes is left out, and the controller then takes the path itself,
    normalised (posixpath.normpath), which is also what it does for an older probe."""
    if not path:
        return None
    real = os.path.realpath(path)
    return real if real != os.path.normpath(path) else None


def add_real_paths(env):
    """Add to an environment's record the host's resolution of the paths the controller
    compares (envdoctor/engine/host_paths.py): its prefix, its bin folder (left out when it is the
    resolved prefix's bin) and its interpreter's folder. Only those links change: a few bytes
    per environment, nothing per distribution."""
    prefix = env.get("prefix") or ""
    if prefix:
        real = real_if_moved(prefix)
        if real:
            env["real_prefix"] = real
        real_bin = os.path.realpath(os.path.join(prefix, "bin"))
        if real_bin != os.path.join(real or os.path.normpath(prefix), "bin"):
            env["real_bin"] = real_bin
    folder = real_if_moved(os.path.dirname(env.get("executable") or ""))
    if folder:
        env["real_executable_dir"] = folder
    return env


def _version_text(text):
    match = _VERSION.match(text or "")
    if not match:
        return ""
    return "%s.%s.%s" % (match.group(1), match.group(2), match.group(3) or "0") if match.group(3) else "%s.%s" % match.group(1, 2)


def static_version(prefix, cfg):
    """The environment's Python version, from its files: pyvenv.cfg, conda-meta, the lib folder."""
    for key in ("version", "version_info"):
        version = _version_text(cfg.get(key, ""))
        if version:
            return version
    for meta in sorted(glob.glob(os.path.join(prefix, "conda-meta", "python-3*.json"))):
        version = _version_text(os.path.basename(meta)[len("python-"):])
        if version:
            return version
    version = _version_text(os.path.basename(prefix))  # pyenv names installs by version
    if version.startswith("3."):
        return version
    for lib in sorted(glob.glob(os.path.join(prefix, "lib", "python3.*"))):
        version = _version_text(os.path.basename(lib)[len("python"):])
        if version:
            return version
    return ""


def static_markers(version, cfg):
    """PEP 508 markers for an environment that is not run: the host's platform (the probe's
    own view of it) with the environment's Python version."""
    implementation = (cfg.get("implementation") or "CPython").strip()
    short = ".".join(version.split(".")[:2])
    full = version if version.count(".") >= 2 else ""
    markers = {
        "implementation_name": implementation.lower(),
        "implementation_version": full or short,
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_python_implementation": implementation,
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": full or short,
        "python_version": short,
        "sys_platform": "linux" if platform.system() == "Linux" else platform.system().lower(),
    }
    return markers if short else {}


def static_site_dirs(prefix, cfg):
    """The site folders an environment imports from, by layout; the base install's too when
    its pyvenv.cfg includes them."""
    found = site_dirs(prefix)
    if (cfg.get("include-system-site-packages") or "").lower() == "true" and cfg.get("home"):
        base = os.path.dirname(cfg["home"].rstrip("/"))
        for path in site_dirs(base) + sorted(glob.glob(os.path.join(base, "lib", "python3", "dist-packages"))):
            if path not in found:
                found.append(path)
    return found


def describe_static(prefix, python):
    """What the files of an environment say about it, without running it."""
    cfg = read_pyvenv_cfg(prefix)
    version = static_version(prefix, cfg)
    env = {
        "prefix": prefix,
        "python": python,
        "exists": True,
        "runs": False,
        "static": True,
        "version": version,
        "pyvenv_cfg": os.path.isfile(os.path.join(prefix, "pyvenv.cfg")),
        "conda": os.path.isdir(os.path.join(prefix, "conda-meta")),
        "markers": static_markers(version, cfg),
    }
    if cfg.get("home"):
        env["base_prefix"] = os.path.dirname(cfg["home"].rstrip("/"))
    add_real_paths(env)
    try:
        info = os.stat(prefix)
        env["owner_uid"] = info.st_uid
        env["foreign"] = info.st_uid not in (0, os.getuid()) or bool(info.st_mode & 0o002)
    except OSError:
        pass
    return env, static_site_dirs(prefix, cfg)
