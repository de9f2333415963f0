# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "sources": the Python files of the installed libraries that may load a model
# without trust_remote_code. For the target environment it picks the distributions that
# depend on transformers, vllm or sglang (from Requires-Dist, under any extra: lm-eval
# declares them in its "hf"/"vllm" extras), those whose files import one of them (a byte
# filter over their RECORD's .py files), plus those named; lists their .py files from
# RECORD, and ships only the files that pass the byte filter: the controller parses them
# with libcst. Files that pass only the second filter (they import a loader name, so their
# package may re-export it) travel marked "exports_only": the controller reads their imports. The filter also runs on the controller (envdoctor
# scan imports it from here), so both sides agree by construction.

import base64
import csv
import errno
import hashlib
import io
import json
import os
import re
import stat
import sys
import tempfile

from envdoctor.probe.host.core import (
    MAX_CACHE_BYTES,
    MAX_RECORD_BYTES,
    canonical_name,
    decode_source,
    note_skip,
    prune_user_caches,
    read_regular,
    read_headers,
    section,
    site_dirs,
    site_entries,
    touch_user_cache,
)

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


_SRC_EXTRA = re.compile(r"""\bextra\s*==\s*['"]([^'"]+)['"]""")


def _src_requirement_names(requires):
    """Requirement name -> the extras that pull it in ("" when it is required without one)."""
    names = {}
    for text in requires:
        requirement, _, marker = text.partition(";")
        match = _SRC_DIST_NAME.match(requirement)
        if match:
            extra = _SRC_EXTRA.search(marker)
            names.setdefault(canonical_name(match.group(1)), set()).add(extra.group(1) if extra else "")
    return names


def _src_reason(deps, wanted_deps):
    parts = []
    for name in sorted(set(deps) & wanted_deps):
        extras = sorted(e for e in deps[name] if e)
        parts.append(name if "" in deps[name] or not extras else "%s (extra %s)" % (name, ", ".join(extras)))
    return "depends on %s" % ", ".join(parts)


def _src_import_filter(modules):
    names = "|".join(re.escape(m) for m in modules)
    return re.compile((r"^[ \t]*(?:from[ \t]+(?:%s)(?:[ \t.]|$)|import[ \t]+(?:[\w.]+[ \t]*,[ \t]*)*(?:%s)\b)"
                       % (names, names)).encode("ascii"), re.M)


def src_files_key(dist, files):
    """A digest of the stat keys (size, mtime_ns, ctime_ns, inode) of the RECORD and of every
    .py file it lists: any change to what could be read changes it (stat costs far less than
    reading the files again)."""
    digest = hashlib.sha1()
    for path in [os.path.join(dist["dist_info"], "RECORD")] + [os.path.join(dist["site"], r) for r in files]:
        try:
            st = os.stat(path)
            digest.update(("%d %d %d %d\n" % (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)).encode())
        except OSError:
            digest.update(b"-\n")
    return digest.hexdigest()


class ImportsCache(object):
    """Which module each distribution imports, from an earlier run, keyed by the stat of its
    files (src_files_key). Kept owner-only in the user's cache folder, one file per
    environment: a check never writes inside the environment it looks at. A folder or file
    that is not a real private one of this user is neither read nor written."""

    KIND = "imports-"

    def __init__(self, prefix, salt=""):
        """`salt`: what else the entries were derived from (a filter's patterns); a file made
        with another is as good as empty."""
        self.folder = os.path.join(os.path.expanduser("~"), ".cache", "envdoctor")
        digest = hashlib.sha1(os.path.abspath(prefix or sys.prefix).encode("utf-8", "surrogateescape"))
        self.NAME = self.KIND + digest.hexdigest()[:16]
        self.salt = salt
        self.entries = {}
        self.used = {}
        self.changed = False
        try:
            if self._private(self.folder):
                data = json.loads(read_regular(os.path.join(self.folder, self.NAME), MAX_CACHE_BYTES).decode("utf-8"))
                if (isinstance(data, dict) and data.get("v") == 1 and isinstance(data.get("entries"), dict)
                        and data.get("salt", "") == salt):
                    self.entries = data["entries"]
                    touch_user_cache(os.path.join(self.folder, self.NAME))
        except (OSError, ValueError):
            pass

    @staticmethod
    def _private(folder):
        try:
            st = os.lstat(folder)
        except OSError:
            return False
        return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077

    def lookup(self, folder, key):
        entry = self.entries.get(folder)
        if isinstance(entry, list) and len(entry) == 2 and entry[0] == key:
            self.used[folder] = entry
            return True, entry[1]
        return False, None

    def store(self, folder, key, module):
        self.used[folder] = [key, module]
        self.changed = True

    def save(self):
        if not (self.changed or len(self.used) != len(self.entries)):
            return
        try:
            if not os.path.isdir(self.folder):
                os.makedirs(self.folder, 0o700)
            if not self._private(self.folder):
                return
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix="." + self.NAME + "-")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(json.dumps({"v": 1, "salt": self.salt, "entries": self.used}).encode("utf-8"))
                path = os.path.join(self.folder, self.NAME)
                new = not os.path.lexists(path)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
            if new:
                prune_user_caches(path)
        except (OSError, ValueError):
            pass  # a cache that cannot be written only costs time next run


class FilterCache(ImportsCache):
    """The byte filter's verdict on each file of the scanned distributions ("skip": it cannot
    hold a site, nor an export the scan needs), keyed by the file's stat key (size, mtime_ns,
    ctime_ns, inode) and salted with the patterns: a warm run stats vLLM's, torch's and
    flashinfer's ~9,000 files instead of reading their ~250 MB again."""

    KIND = "sources-"


def src_imported_module(dist, modules, max_file, cache=None):
    """The first of `modules` a .py file of the distribution imports (a byte filter), or None."""
    files = src_record_python_files(dist) or []
    own = canonical_name(dist["name"])
    wanted = [m for m in modules if canonical_name(m) != own]  # a library importing itself is no dependent
    if not wanted:
        return None
    if cache is None:
        return _src_first_import(dist, files, wanted, max_file)
    key = "%s|%d|%s" % (",".join(wanted), max_file, src_files_key(dist, files))
    hit, module = cache.lookup(dist["dist_info"], key)
    if not hit:
        module = _src_first_import(dist, files, wanted, max_file)
        cache.store(dist["dist_info"], key, module)
    return module


def _src_first_import(dist, files, wanted, max_file):
    quick = [m.encode("ascii") for m in wanted]
    pattern = _src_import_filter(wanted)
    for rel in files:
        path = os.path.join(dist["site"], rel)
        try:
            data = read_regular(path, max_file)
        except OSError:
            continue
        if not any(q in data for q in quick):
            continue
        match = pattern.search(data)
        if match is not None:
            for module in wanted:
                if module.encode("ascii") in match.group(0):
                    return module
    return None


def src_select_distributions(sites, depends_on, extra, imports=(), max_file=4 * 1024 * 1024, cache=None):
    """The active .dist-info folders to scan: dependents of `depends_on` (under any extra),
    distributions whose files import one of `imports`, and those in `extra`."""
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
        dist = {"name": name, "version": headers.get("Version") or "", "site": site, "dist_info": folder}
        if key in wanted_names:
            dist["reason"] = "named"
        elif set(deps) & wanted_deps:
            dist["reason"] = _src_reason(deps, wanted_deps)
        elif imports:
            module = src_imported_module(dist, imports, max_file, cache)
            if module is None:
                continue
            dist["reason"] = "imports %s" % module
        else:
            continue
        chosen.append(dist)
        wanted_names.discard(key)
    return chosen, sorted(wanted_names)


def src_record_python_files(dist):
    """Package .py files listed in the distribution's RECORD, relative to its site folder."""
    try:
        text = read_regular(os.path.join(dist["dist_info"], "RECORD"), MAX_RECORD_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error:  # a NUL byte, a field over csv's limit: not a RECORD pip wrote
        return None
    files = []
    for row in rows:
        if row and row[0].endswith(".py") and not row[0].startswith(("..", "/")):
            files.append(row[0])
    return files


@section("sources")
def sources_section(args, emit):
    compiled = compile_site_filter(args.get("patterns") or [])
    exporting = compile_site_filter(args.get("export_patterns") or [])
    max_file = int(args.get("max_file_bytes", 4 * 1024 * 1024))
    budget = int(args.get("max_total_bytes", 16 * 1024 * 1024))
    sites = site_dirs(args.get("prefix"))
    cache = ImportsCache(args.get("prefix")) if args.get("imports") else None
    dists, not_found = src_select_distributions(sites, args.get("depends_on") or [], args.get("extra") or [],
                                                args.get("imports") or [], max_file, cache)
    if cache is not None:
        cache.save()
    skipped = []
    shipped = 0
    summary = []
    filters = FilterCache(args.get("prefix"), hashlib.sha1(json.dumps(
        [args.get("patterns"), args.get("export_patterns"), max_file], sort_keys=True).encode()).hexdigest())
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
                st = os.stat(path)
                key = "%d:%d:%d:%d" % (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            except OSError:
                key = ""
            if key and filters.lookup(path, key) == (True, "skip"):
                info["files"] += 1
                info["bytes"] += st.st_size
                continue
            try:
                data = src_filter_read(path, max_file, compiled, exporting)
            except OSError as exc:  # (a skipped one is also named by host.probe)
                skipped.append({"path": rel, "reason": "not read: %s" % exc.strerror})
                continue
            info["files"] += 1
            if data is None:
                if key:
                    info["bytes"] += st.st_size
                    filters.store(path, key, "skip")
                continue
            info["bytes"] += len(data)
            exports_only = False
            if not bytes_might_hold_site(data, compiled) and decode_source(data)[0] is not None:
                # (a file Python cannot decode travels so the controller lists it as an error)
                if not (exporting and bytes_might_hold_site(data, exporting)):
                    if key:
                        filters.store(path, key, "skip")
                    continue
                exports_only = True
            else:
                info["matched"] += 1
            if shipped + len(data) > budget:
                skipped.append({"path": rel, "reason": "over the %d-byte budget for one probe" % budget})
                continue
            shipped += len(data)
            item = {"distribution": dist["name"], "version": dist["version"], "site": dist["site"],
                    "path": rel, "data": base64.b64encode(data).decode("ascii")}
            if exports_only:
                item["exports_only"] = True
            emit(item)
    filters.save()
    return {"site_packages": sites, "distributions": summary, "not_found": not_found,
            "skipped": skipped, "shipped_bytes": shipped}


#: How much of a file over the scan's per-file budget is still read through the byte filter:
#: a generated 4 MiB binding module that holds no loader call is no file the scan missed.
FILTER_ONLY_BYTES = 64 * 1024 * 1024


def src_filter_read(path, max_file, compiled, exporting):
    """The file's bytes, or None when it is over `max_file` and the byte filters find nothing
    in it (nothing the scan would parse); one over the budget that may hold a site is skipped
    and named, as before."""
    try:
        return read_regular(path, max_file, note=False)
    except OSError as exc:
        if exc.errno != errno.EFBIG:
            raise
    data = read_regular(path, FILTER_ONLY_BYTES)
    if bytes_might_hold_site(data, compiled) or (exporting and bytes_might_hold_site(data, exporting)):
        raise note_skip(path, "%d bytes, more than the %d read of a file the scan parses" % (len(data), max_file))
    return None
