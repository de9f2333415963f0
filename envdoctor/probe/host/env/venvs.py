# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "venvs": the configured venv (its interpreter runs and reports its version, prefix,
# sys.path and installed distributions) and those found under the usual roots (read from
# their files only, see discovery.py: a discovered interpreter is never started).

import json
import os
import subprocess

from envdoctor.probe.host.core import (
    MAX_LIST_BYTES,
    canonical_name,
    env_site_dirs,
    read_headers,
    read_regular,
    section,
    site_dirs,
    venv_prefix_of,
)
from envdoctor.probe.host.env.discovery import add_real_paths, describe_static, discover_envs

# Printed by the venv's own interpreter, run with -I -S (no PYTHON* variables, no .pth file
# runs) from / so the working directory adds nothing to sys.path. Under -S a venv's
# sys.prefix is its base install: finish_inspection finds the venv from the layout.
INSPECT = r"""
import json, os, platform, sys, sysconfig
impl = sys.implementation
markers = {
    "implementation_name": impl.name,
    "implementation_version": "%d.%d.%d" % tuple(impl.version[:3]),
    "os_name": os.name,
    "platform_machine": platform.machine(),
    "platform_python_implementation": platform.python_implementation(),
    "platform_release": platform.release(),
    "platform_system": platform.system(),
    "platform_version": platform.version(),
    "python_full_version": platform.python_version(),
    "python_version": ".".join(platform.python_version_tuple()[:2]),
    "sys_platform": sys.platform,
}
print(json.dumps({
    "executable": sys.executable,
    "prefix": sys.prefix,
    "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    "version": "%d.%d.%d" % sys.version_info[:3],
    "sys_path": [p for p in sys.path if p and os.path.isdir(p)],
    "markers": markers,
    # PEP 668: pip refuses to install into an interpreter whose stdlib folder holds this file
    # (pip reads sysconfig's "stdlib" path too); finish_inspection drops it for a venv.
    "externally_managed": os.path.isfile(os.path.join(sysconfig.get_path("stdlib") or "", "EXTERNALLY-MANAGED")),
}))
"""

def egg_requires(folder):
    """requires.txt of an .egg-info, turned into PEP 508 strings."""
    requires = []
    marker = ""
    try:
        text = read_regular(os.path.join(folder, "requires.txt"), MAX_LIST_BYTES).decode("utf-8", "replace")
    except OSError:
        return requires
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            extra, _, condition = line[1:-1].partition(":")
            parts = []
            if condition:
                parts.append("(%s)" % condition)
            if extra:
                parts.append('extra == "%s"' % extra)
            marker = " and ".join(parts)
            continue
        requires.append("%s; %s" % (line, marker) if marker else line)
    return requires


def read_distribution(site, entry):
    folder = os.path.join(site, entry)
    if entry.endswith(".dist-info"):
        kind, meta = "dist-info", os.path.join(folder, "METADATA")
    elif entry.endswith(".egg-info"):
        kind = "egg-info"
        meta = os.path.join(folder, "PKG-INFO") if os.path.isdir(folder) else folder
    else:
        return None
    dist = {"path": folder, "site": site, "kind": kind}
    try:
        headers = read_headers(meta)
    except OSError as exc:
        dist["error"] = "unreadable metadata: %s" % (exc.strerror or exc)
        dist["name"] = entry.rsplit("-", 1)[0] if "-" in entry else entry.split(".")[0]
        dist["version"] = ""
        dist["requires"] = []
        return dist
    dist["name"] = headers.get("Name") or entry.split("-")[0]
    dist["version"] = headers.get("Version") or ""
    if kind == "dist-info":
        dist["requires"] = headers.get_all("Requires-Dist") or []
    else:
        dist["requires"] = egg_requires(folder) if os.path.isdir(folder) else []
    return dist


def pth_paths(site):
    """The folders the .pth files of a site folder put on sys.path, as site.addpackage does it
    (files in sorted order; blank and # lines skipped; a path relative to the site folder, kept
    when it exists), read, never run: an `import` line is code, skipped. Hidden .pth files are
    skipped as Python does since the gh-113659 security fix (3.13, and 3.8-3.12 point releases
    of 2024); an older interpreter would still read one."""
    try:
        names = sorted(n for n in os.listdir(site) if n.endswith(".pth") and not n.startswith("."))
    except OSError:
        return []
    found = []
    for name in names:
        try:
            text = read_regular(os.path.join(site, name), MAX_LIST_BYTES).decode("utf-8", "replace")
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("#") or not line.strip() or line.startswith(("import ", "import\t")):
                continue
            path = os.path.abspath(os.path.join(site, line.rstrip()))
            if path not in found and os.path.exists(path):
                found.append(path)
    return found


def with_pth_paths(sites):
    """Site folders each followed by what its .pth files add (site.addsitedir's order): the
    probe runs interpreters with -S, so the folders a .pth adds (an editable install, a
    `--target` folder) are found here, without running anything."""
    paths = []
    for site in sites:
        for path in [site] + pth_paths(site):
            if path not in paths:
                paths.append(path)
    return paths


def metadata_entries(sys_path):
    """(site, entry) in the order importlib.metadata finds them: sys.path order, then each
    folder in os.listdir order (its FastPath.children), never sorted: when one folder holds two
    metadata folders of a distribution, the first listed is the one Python and pip use."""
    for site in sys_path:
        try:
            entries = os.listdir(site)
        except OSError:
            continue
        for entry in entries:
            yield site, entry


def read_distributions(sys_path):
    """Every distribution on sys_path, in import order; the first of a name is the active one."""
    dists = []
    active = {}
    for site, entry in metadata_entries(sys_path):
        dist = read_distribution(site, entry)
        if dist is None:
            continue
        key = canonical_name(dist["name"])
        dist["active"] = key not in active
        if key in active:
            dist["shadowed_by"] = active[key]
        else:
            active[key] = dist["path"]
        dists.append(dist)
    return dists


def env_python(prefix):
    for name in ("python", "python3"):
        python = os.path.join(prefix, "bin", name)
        if os.path.exists(python):
            return python
    return os.path.join(prefix, "bin", "python")


def start_inspection(python):
    """Start `python` reporting on itself; returns (process, error)."""
    if not os.path.exists(python):
        return None, "no interpreter at %s" % python
    try:
        proc = subprocess.Popen(
            [python, "-I", "-S", "-c", INSPECT],  # -S: no .pth runs; the sites come from the layout
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd="/",
        )
    except OSError as exc:
        return None, "%s does not run: %s" % (python, exc)
    return proc, None


def finish_inspection(prefix, python, proc, error, timeout):
    env = {"prefix": prefix, "python": python, "exists": True}
    if prefix and not os.path.isdir(prefix):
        if os.path.exists(prefix):
            env["not_a_venv"] = "%s is a file, not a virtualenv folder" % prefix
        env.update(exists=False, runs=False, error="no such directory", site_packages=[], distributions=[])
        return env
    if prefix:
        env["pyvenv_cfg"] = os.path.isfile(os.path.join(prefix, "pyvenv.cfg"))
        env["conda"] = os.path.isdir(os.path.join(prefix, "conda-meta"))
        if not env["pyvenv_cfg"] and not env["conda"] and not os.path.exists(python):
            env["not_a_venv"] = "%s is a folder but not a virtualenv: no pyvenv.cfg, no conda-meta, no bin/python" % prefix
    info = None
    if proc is not None:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            error = "%s did not answer within %ss" % (python, timeout)
        else:
            if proc.returncode == 0:
                try:
                    info = json.loads(out.decode("utf-8", "replace"))
                except ValueError:
                    error = "unexpected output from %s" % python
            else:
                lines = err.decode("utf-8", "replace").strip().splitlines()
                error = "%s exited with %d: %s" % (python, proc.returncode, (lines or [""])[-1])
    env["runs"] = info is not None
    if error:
        env["error"] = error
    if info is not None:
        env.update(info)
        # The interpreter ran with -S, so a venv's python3 reported its base install as
        # sys.prefix: its environment is the venv, found as site.py finds it.
        own_venv = venv_prefix_of(info.get("executable") or python)
        env["prefix"] = prefix or own_venv or info["prefix"]
        # A venv's interpreter under -S reports its base's stdlib, marker included; pip
        # ignores the marker inside a virtual environment, and so does envdoctor.
        env["externally_managed"] = bool(info.get("externally_managed")) and not (own_venv or venv_prefix_of(python))
        sites = with_pth_paths(env_site_dirs(prefix or venv_prefix_of(python) or None))
        sys_path = info["sys_path"] + [p for p in sites if p not in info["sys_path"]]
    else:
        sys_path = with_pth_paths(site_dirs(prefix)) if prefix else []
    env["site_packages"] = [p for p in sys_path if p.endswith("-packages")]
    env["distributions"] = read_distributions(sys_path)
    return add_real_paths(env)


@section("venvs")
def venvs_section(args, emit):
    """The chosen environment, run to report on itself; every other one read from its files."""
    configured = [os.path.abspath(os.path.expanduser(p)) for p in args.get("configured", [])]
    discovered = discover_envs(exclude=configured) if args.get("discover", True) else []
    timeout = args.get("timeout", 60)
    # Only what the user chose runs: the configured venv, or with none the default python3.
    jobs = []
    for prefix in configured:
        python = env_python(prefix)
        proc, error = start_inspection(python) if os.path.isdir(prefix) else (None, None)
        jobs.append((prefix, python, proc, error))
    default_python = os.environ.get("ENVDOCTOR_PY3") or ""
    default_job = None
    if default_python and not configured:
        proc, error = start_inspection(default_python)
        default_job = ("", default_python, proc, error)
    envs = [finish_inspection(*job, timeout=timeout) for job in jobs]
    for prefix in discovered:
        env, sites = describe_static(prefix, env_python(prefix))
        env["site_packages"] = [p for p in sites if p.endswith("-packages")]
        # With a venv chosen the others are only named (a typo's hint); without, they are ranked
        # by what they have installed. What their distributions require is never judged (only a
        # chosen or default interpreter is): it stays on the host (a fifth of a typical answer).
        env["distributions"] = [] if configured else read_distributions(with_pth_paths(sites))
        for dist in env["distributions"]:
            dist["requires"] = []
        envs.append(env)
    default = finish_inspection(*default_job, timeout=timeout) if default_job else None
    if default and default.get("prefix"):
        # The default interpreter reported on itself: its environment read from files as well
        # would only repeat it with less (often the largest part of the answer). It is that
        # environment when the prefixes resolve alike, or when the interpreter sits in its bin
        # folder (a venv's python3 first on PATH: under -S its sys.prefix is the base install).
        own = os.path.realpath(default["prefix"])
        own_bin = os.path.realpath(os.path.dirname(default.get("executable") or default["python"]))
        envs = [e for e in envs if not (e.get("static") and (
            os.path.realpath(e["prefix"]) == own or os.path.realpath(os.path.join(e["prefix"], "bin")) == own_bin))]
    return {"configured": configured, "discovered": discovered, "envs": envs, "default": default}
