# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "sources": the Python files of the installed libraries that may load a model
# without trust_remote_code. For the target environment it picks the distributions that
# depend on transformers, vllm or sglang (from Requires-Dist) plus those named, lists
# their .py files from RECORD, and ships only the files that pass the byte filter: the
# controller parses them with libcst. The filter also runs on the controller (envdoctor
# scan imports it from here), so both sides agree by construction.

import base64
import csv
import io
import os
import re

from envdoctor.probe.core import canonical_name, open_regular, read_headers, section, site_dirs, site_entries

_SRC_DIST_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def compile_site_filter(groups):
    """[[[anchor, regex], ...], ...] (JSON-able) -> the same with bytes and compiled regexes.

    A file passes when, for some group, every (anchor, regex) of it matches on a code line;
    the anchor is a plain substring tested first because `in` is far cheaper than a regex.
    """
    compiled = []
    for group in groups:
        compiled.append(
            [(anchor.encode("ascii"), re.compile(regex.encode("ascii"), re.M)) for anchor, regex in group]
        )
    return compiled


def _src_on_code_line(data, start):
    # A line that starts with '#' is a comment and one that starts with '>>>' is a doctest
    # (not valid Python outside a string), so neither can hold a call. Anything subtler
    # (docstrings, strings) is left to the parser: the filter may pass too much, never too little.
    line_start = data.rfind(b"\n", 0, start) + 1
    head = data[line_start:start].lstrip(b" \t")
    return not (head.startswith(b"#") or head.startswith(b">>>"))


def bytes_might_hold_site(data, compiled):
    """Whether bytes `data` may hold a model-loading call (see compile_site_filter)."""
    for group in compiled:
        for anchor, regex in group:
            if anchor not in data:
                break
            if not any(_src_on_code_line(data, m.start()) for m in regex.finditer(data)):
                break
        else:
            return True
    return False


def bytes_are_utf8(data):
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _src_requirement_names(requires):
    """Names of the requirements that hold without an extra (an optional integration is not a dependency)."""
    names = set()
    for text in requires:
        requirement, _, marker = text.partition(";")
        if "extra" in marker:
            continue
        match = _SRC_DIST_NAME.match(requirement)
        if match:
            names.add(canonical_name(match.group(1)))
    return names


def src_select_distributions(sites, depends_on, extra):
    """The active .dist-info folders to scan: dependents of `depends_on` and those in `extra`."""
    wanted_deps = set(canonical_name(n) for n in depends_on)
    wanted_names = set(canonical_name(n) for n in extra)
    seen = set()
    chosen = []
    for site, entry in site_entries(sites):
        if not entry.endswith(".dist-info"):
            continue
        folder = os.path.join(site, entry)
        try:
            headers = read_headers(os.path.join(folder, "METADATA"))
        except OSError:
            continue
        name = headers.get("Name") or entry.split("-")[0]
        key = canonical_name(name)
        if key in seen:
            continue  # shadowed by an earlier entry of sys.path: Python never imports it
        seen.add(key)
        deps = _src_requirement_names(headers.get_all("Requires-Dist") or [])
        reason = "named" if key in wanted_names else ("depends on %s" % ", ".join(sorted(deps & wanted_deps)))
        if key in wanted_names or deps & wanted_deps:
            chosen.append({"name": name, "version": headers.get("Version") or "", "site": site,
                           "dist_info": folder, "reason": reason})
            wanted_names.discard(key)
    return chosen, sorted(wanted_names)


def src_record_python_files(dist):
    """Package .py files listed in the distribution's RECORD, relative to its site folder."""
    try:
        with open(os.path.join(dist["dist_info"], "RECORD"), encoding="utf-8", errors="replace") as handle:
            rows = list(csv.reader(io.StringIO(handle.read())))
    except OSError:
        return None
    files = []
    for row in rows:
        if row and row[0].endswith(".py") and not row[0].startswith(("..", "/")):
            files.append(row[0])
    return files


@section("sources")
def sources_section(args, emit):
    compiled = compile_site_filter(args.get("patterns") or [])
    max_file = int(args.get("max_file_bytes", 4 * 1024 * 1024))
    budget = int(args.get("max_total_bytes", 16 * 1024 * 1024))
    sites = site_dirs(args.get("prefix"))
    dists, not_found = src_select_distributions(sites, args.get("depends_on") or [], args.get("extra") or [])
    skipped = []
    shipped = 0
    summary = []
    for dist in dists:
        files = src_record_python_files(dist)
        info = {"name": dist["name"], "version": dist["version"], "site": dist["site"],
                "reason": dist["reason"], "files": 0, "bytes": 0, "matched": 0}
        summary.append(info)
        if files is None:
            info["error"] = "no readable RECORD (installed without one, or editable)"
            continue
        for rel in files:
            path = os.path.join(dist["site"], rel)
            try:
                size = os.path.getsize(path)
                if size > max_file:
                    skipped.append({"path": rel, "reason": "larger than %d bytes" % max_file})
                    continue
                with open_regular(path) as handle:
                    data = handle.read()
            except OSError as exc:
                skipped.append({"path": rel, "reason": "unreadable: %s" % exc.strerror})
                continue
            info["files"] += 1
            info["bytes"] += len(data)
            if not bytes_might_hold_site(data, compiled) and bytes_are_utf8(data):
                continue  # (a file that is not UTF-8 travels so the controller lists it as an error)
            info["matched"] += 1
            if shipped + len(data) > budget:
                skipped.append({"path": rel, "reason": "over the %d-byte budget for one probe" % budget})
                continue
            shipped += len(data)
            emit({"distribution": dist["name"], "version": dist["version"], "site": dist["site"],
                  "path": rel, "data": base64.b64encode(data).decode("ascii")})
    return {"site_packages": sites, "distributions": summary, "not_found": not_found,
            "skipped": skipped, "shipped_bytes": shipped}
