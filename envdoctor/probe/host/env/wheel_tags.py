# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "wheel-tags": what packages.tags compares (envdoctor/install/wheel_tags.py judges):
#   - the interpreter of the environment: version, implementation, ABI (SOABI, debug and
#     free-threaded builds), platform and machine, pointer size, and the C library: glibc's
#     version from os.confstr (as packaging reads it) or platform.libc_ver(), or musl;
#   - for every .dist-info of the environment's site folders: its WHEEL file's Tag lines and
#     METADATA's Requires-Python (header block only).
# The interpreter reports on itself only when it is not the one running the probe: it is the
# environment the user chose (run with -I -S from /, as the venvs section runs it). Nothing
# else runs; the files are read within a few KB each.

import json
import os
import subprocess
import sys

from envdoctor.probe.host.core import open_regular, read_headers, section, site_dirs, site_entries
from envdoctor.probe.host.env.venvs import with_pth_paths

#: The most distributions read (a site folder is not expected to hold more).
MAX_DISTRIBUTIONS = 20000
#: WHEEL files are a few lines; a larger one is not read.
MAX_WHEEL_BYTES = 64 * 1024

# Printed by the environment's interpreter (or evaluated in the probe when it is that one).
INTERPRETER = r"""
import json, os, platform, struct, sys, sysconfig
def var(name):
    try:
        return sysconfig.get_config_var(name)
    except Exception:
        return None
glibc = ""
try:
    glibc = os.confstr("CS_GNU_LIBC_VERSION") or ""
except (AttributeError, OSError, ValueError):
    pass
try:
    libc = list(platform.libc_ver())
except Exception:
    libc = ["", ""]
print(json.dumps({
    "executable": sys.executable,
    "version": list(sys.version_info[:3]),
    "implementation": sys.implementation.name,
    "cache_tag": sys.implementation.cache_tag,
    "soabi": var("SOABI"),
    "ext_suffix": var("EXT_SUFFIX"),
    "py_debug": bool(var("Py_DEBUG")),
    "gil_disabled": bool(var("Py_GIL_DISABLED")),
    "py_version_nodot": var("py_version_nodot"),
    "platform": sysconfig.get_platform(),
    "machine": platform.machine(),
    "system": platform.system(),
    "bits": struct.calcsize("P") * 8,
    "glibc": glibc,
    "libc": libc,
    "mac_ver": platform.mac_ver()[0],
}))
"""


def interpreter_facts(python, timeout):
    """The interpreter's tag facts: this process's when `python` is the probe's own binary."""
    here = os.path.realpath(sys.executable)
    if not python or os.path.realpath(python) == here:
        namespace = {}
        captured = []
        namespace["print"] = lambda text: captured.append(text)
        exec(compile(INTERPRETER, "<envdoctor-tags>", "exec"), namespace)
        facts = json.loads(captured[0])
        facts["executable"] = python or sys.executable
        return facts
    if not os.path.exists(python):
        return {"error": "no interpreter at %s" % python}
    try:
        proc = subprocess.Popen([python, "-I", "-S", "-c", INTERPRETER], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
        out, err = proc.communicate(timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        try:
            proc.kill()
            proc.communicate()
        except Exception:
            pass
        return {"error": "%s did not report its tags: %s" % (python, exc)}
    if proc.returncode != 0:
        lines = err.decode("utf-8", "replace").strip().splitlines()
        return {"error": "%s exited with %d: %s" % (python, proc.returncode, (lines or [""])[-1])}
    try:
        return json.loads(out.decode("utf-8", "replace"))
    except ValueError:
        return {"error": "unexpected output from %s" % python}


def wheel_file(folder):
    """(Tag lines, Root-Is-Purelib) of a dist-info's WHEEL, or (None, None) without one."""
    try:
        with open_regular(os.path.join(folder, "WHEEL")) as handle:
            text = handle.read(MAX_WHEEL_BYTES).decode("utf-8", "replace")
    except OSError:
        return None, None
    tags = []
    purelib = None
    for line in text.splitlines():
        if not line.strip():
            break  # the header block ends at the first blank line (RFC 822, as pip and uv read it)
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key == "tag" and value.strip():
            tags.append(value.strip())
        elif key == "root-is-purelib":
            purelib = value.strip().lower() == "true"
    return tags, purelib


def describe(site, entry):
    folder = os.path.join(site, entry)
    record = {"path": folder, "site": site}
    try:
        headers = read_headers(os.path.join(folder, "METADATA"))
        record["name"] = headers.get("Name") or entry.split("-")[0]
        record["version"] = headers.get("Version") or ""
        record["requires_python"] = headers.get("Requires-Python")
    except OSError as exc:
        record.update(name=entry.split("-")[0], version="", error="unreadable METADATA: %s" % exc)
    record["tags"], record["purelib"] = wheel_file(folder)
    return record


@section("wheel-tags")
def wheel_tags_section(args, emit):
    prefix = args.get("prefix") or None
    python = args.get("python") or (os.path.join(prefix, "bin", "python") if prefix else
                                    os.environ.get("ENVDOCTOR_PY3") or sys.executable)
    sites = with_pth_paths(site_dirs(prefix))
    dists = []
    truncated = False
    for site, entry in site_entries(sites):
        if entry.endswith(".dist-info"):
            if len(dists) >= MAX_DISTRIBUTIONS:
                truncated = True
                break
            dists.append(describe(site, entry))
    return {"prefix": prefix or "", "interpreter": interpreter_facts(python, args.get("timeout", 60)),
            "site_packages": sites, "distributions": dists, "truncated": truncated}
