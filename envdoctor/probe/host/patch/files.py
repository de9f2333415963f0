# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "patch_files": the files the patches touch (bytes, base64), the hash RECORD gives
# for each, and the environment's patch ledger, so `check` can tell a patch's state and
# `fix` can transform on the controller without another round trip.

import base64
import os

from envdoctor.probe.host.core import (
    MAX_RECORD_BYTES,
    canonical_name,
    open_state_file,
    read_regular,
    run_command,
    section,
    site_dirs,
    site_entries,
    venv_prefix_of,
)


def _find_dist_info(sites, distribution):
    wanted = canonical_name(distribution)
    for site, entry in site_entries(sites):
        if entry.endswith(".dist-info") and canonical_name(entry[: -len(".dist-info")].split("-")[0]) == wanted:
            return site, os.path.join(site, entry)
    return None, None


def _record_hashes(dist_info, wanted):
    """RECORD's `sha256=<urlsafe b64>` for each wanted relative path."""
    hashes = {}
    try:
        text = read_regular(os.path.join(dist_info, "RECORD"), MAX_RECORD_BYTES).decode("utf-8", "replace")
    except OSError:
        return hashes
    for line in text.split("\n"):
        # RECORD is CSV, but a path with a comma is quoted; the paths we want have none.
        parts = line.rstrip("\r").rsplit(",", 2)
        if len(parts) == 3 and parts[0] in wanted:
            hashes[parts[0]] = parts[1]
    return hashes


def read_ledger_lines(prefix):
    try:
        with open_state_file(prefix, "ledger.jsonl") as handle:
            data = handle.read()  # open_state_file refused a ledger over its budget
    except OSError:
        return []
    lines = [line + b"\n" for line in data.split(b"\n")]  # as a file's lines are: each with its end
    lines[-1] = lines[-1][:-1]
    return [line.decode("utf-8", "replace") for line in lines if line]


def default_prefix():
    """Without a venv the job uses the python3 a bare command finds: patch that one's prefix."""
    python = os.environ.get("ENVDOCTOR_PY3") or ""
    if not python:
        return ""
    venv = venv_prefix_of(python)
    if venv:
        return venv
    # -I -S: asking the interpreter its prefix must not run the .pth files of its site folders.
    status, out, _ = run_command([python, "-I", "-S", "-c", "import sys; print(sys.prefix)"], timeout=30, cwd="/")
    return out.strip() if status == 0 else ""


#: A file a patch edits is Python source sent whole to the controller.
MAX_PATCHED_BYTES = 16 << 20


@section("patch_files")
def patch_files_section(args, emit):
    prefix = args.get("prefix") or default_prefix()
    if not prefix or not os.path.isdir(prefix):
        return {"prefix": prefix, "files": [], "ledger": [], "error": "no environment at %r" % prefix}
    sites = site_dirs(prefix)
    by_dist = {}
    for item in args.get("files", []):
        by_dist.setdefault(item["distribution"], []).append(item["path"])
    files = []
    for distribution, paths in sorted(by_dist.items()):
        site, dist_info = _find_dist_info(sites, distribution)
        record = _record_hashes(dist_info, set(paths)) if dist_info else {}
        for rel in paths:
            entry = {"distribution": distribution, "path": rel, "site": site, "dist_info": dist_info,
                     "record": record.get(rel)}
            if site is None:
                entry["error"] = "%s is not installed in %s" % (distribution, prefix)
                files.append(entry)
                continue
            full = os.path.join(site, rel)
            entry["file"] = full
            try:
                entry["data"] = base64.b64encode(read_regular(full, MAX_PATCHED_BYTES)).decode("ascii")
            except OSError as exc:
                entry["error"] = "cannot read %s: %s" % (full, exc.strerror)
            files.append(entry)
    return {"prefix": prefix, "files": files, "ledger": read_ledger_lines(prefix)}
