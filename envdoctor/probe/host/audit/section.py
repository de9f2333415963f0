# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "audit": verify every file that a distribution's .dist-info/RECORD lists (size and
# digest), find code nobody installed (extra .pth/.py/.so, bytecode that does not belong
# to its source), and stream every difference as an item. Files that match are only
# counted, so the output stays small for a venv of 20,000 files. Helpers: audit_record.py
# (RECORD and metadata) and audit_hash.py (workers, .pyc headers, the stat cache).

import gc
import hashlib
import os
import sys
import time

from envdoctor.probe.host.audit.hashing import HashRun, StatCache, usable_cpus
from envdoctor.probe.host.audit.record import (
    digest_hex,
    fsb,
    fst,
    load_record,
    pack_keys,
    read_text,
    site_distributions,
    site_path,
    site_paths,
    stat_key,
    unpack_keys,
)
from envdoctor.probe.host.audit.snapshot import (
    Snapshot,
    Watch,
    distributions_signature,
    path_exists,
    snapshot_header,
)
from envdoctor.probe.host.core import (
    MAX_TEXT_BYTES,
    interpreter_prefix,
    own_site_dirs,
    read_regular,
    section,
    site_dirs,
)

CODE_SUFFIXES_BYTES = (b".py", b".so", b".pyc", b".pth")
#: The algorithms of a file that one RECORD lists with sha256 (most files): one shared list.
SHA256_ONLY = ["sha256"]
SKIP_DIR_SUFFIXES = (".dist-info", ".egg-info")


# ---------------------------------------------------------------------------------------
# Extra code and bytecode


def list_dir(path, cache, new_dirs, watch):
    """(subfolders, code file names) of a folder; from the cache when the folder is unchanged.

    A folder's mtime changes whenever an entry is added, removed or renamed in it, which is
    all that finding extra files needs."""
    raw_path = path.encode("utf-8", "surrogateescape")
    try:
        st = os.lstat(raw_path)
    except OSError:
        watch.folder(path, None)
        return [], []
    key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    watch.folder(path, key)
    entry = cache.loaded["dirs"].get(path)
    if entry and entry[0] == key:
        subdirs, names = entry[1], entry[2]
    else:
        subdirs, names = [], []
        try:
            for item in os.scandir(raw_path):
                if item.is_dir(follow_symlinks=False):
                    subdirs.append(item.name)
                elif item.name.endswith(CODE_SUFFIXES_BYTES):
                    names.append(item.name)
        except OSError:
            pass
        # Decoded together: one call instead of one per name.
        subdirs = fst(b"\0".join(subdirs)).split("\0") if subdirs else subdirs
        names = fst(b"\0".join(names)).split("\0") if names else names
    if cache.settled(key):
        new_dirs[path] = [key, subdirs, names]
    return subdirs, names


def walk_code(site_dir, known, covered, cache, new_dirs, watch):
    """Files Python would run that no RECORD lists; and (pyc path, source path) pairs."""
    extras, pycs = [], []
    tag = getattr(sys.implementation, "cache_tag", None)
    pyc_mark = "." + (tag or "-") + "."
    top_dirs, top_names = list_dir(site_dir, cache, new_dirs, watch)
    for name in sorted(top_names):
        path = site_dir + "/" + name
        if path in known or path in covered or path[:-3] in covered:
            continue
        if name.endswith(".pth"):
            extras.append((path, ".pth file: runs at every interpreter start, and no RECORD lists it"))
        else:
            extras.append((path, "top-level module that no RECORD lists"))
    stack = [site_dir + "/" + d for d in sorted(top_dirs, reverse=True)
             if not d.endswith(SKIP_DIR_SUFFIXES) and site_dir + "/" + d not in covered]
    while stack:
        folder = stack.pop()
        subdirs, names = list_dir(folder, cache, new_dirs, watch)
        if folder.endswith("/__pycache__"):
            parent = folder[: -len("/__pycache__")]
            for name in names:
                if name.endswith(".pyc") and pyc_mark in name:
                    pycs.append((folder + "/" + name, parent + "/" + name.split(".", 1)[0] + ".py"))
        else:
            for name in names:
                full = folder + "/" + name
                if full not in known and not name.endswith(".pth"):
                    extras.append((full, "code inside a package folder that no RECORD lists"))
        stack.extend(folder + "/" + d for d in sorted(subdirs, reverse=True))
    return extras, pycs


# ---------------------------------------------------------------------------------------
# The section


def find_sites(prefix, default, given):
    if given:
        candidates = list(given)
    elif default:
        candidates = own_site_dirs()  # from the layout: the probe runs -S, so no .pth has run
    else:
        candidates = site_dirs(prefix)
    sites, seen = [], set()
    for path in candidates:
        if not path or not os.path.isdir(fsb(path)):
            continue
        real = os.path.realpath(fsb(path))
        if real not in seen:
            seen.add(real)
            sites.append(path)
    return sites


def cache_folder(prefix, default):
    """Where the stat cache and the snapshot live: the environment's .envdoctor when the
    environment is the running user's own; else (the default interpreter's /usr, or root's
    audit of another user's venv, which must leave no root-owned folder there) the user's
    ~/.cache/envdoctor/audit-<digest of the prefix>, owner-only."""
    if not default and owns(prefix):
        return os.path.join(prefix, ".envdoctor")
    digest = hashlib.sha1(fsb(prefix)).hexdigest()[:12]
    return os.path.join(os.path.expanduser("~"), ".cache", "envdoctor", "audit-" + digest)


def owns(path):
    """Whether `path` (a folder, links followed) belongs to the running user."""
    try:
        return os.stat(fsb(path)).st_uid == os.getuid()
    except OSError:
        return False


def pyvenv_old_prefixes(prefix):
    """Where the venv was created, from pyvenv.cfg's `command` line (Python 3.11+)."""
    try:
        text = read_text(os.path.join(prefix, "pyvenv.cfg"), MAX_TEXT_BYTES)
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "command" and value.split():
            old = value.split()[-1]
            if os.path.normpath(old) != os.path.normpath(prefix):
                found.append(old)
    return found


def shebang_rewritten(path, head, expected_algo, expected_hex, old_prefixes):
    """Whether only the shebang differs from RECORD: try the interpreters of the venv's old place."""
    if not old_prefixes:
        return None
    try:
        data = read_regular(fsb(path), 1 << 20)  # a console script
    except OSError:
        return None
    rest = data.split(b"\n", 1)[1] if b"\n" in data else b""
    interpreter = os.path.basename(head[2:].strip().split()[0]) if head[2:].strip() else "python"
    for old in old_prefixes:
        for name in (interpreter, "python", "python3"):
            line = b"#!" + fsb(os.path.join(old, "bin", name)) + b"\n"
            if hashlib.new(expected_algo, line + rest).hexdigest() == expected_hex:
                return old
    return None


def owner_of_folders(dists, quick):
    """Top-level entry of site-packages -> the distribution whose RECORD lists files in it."""
    owners = {}
    for index, dist in enumerate(dists):
        site_dir = dist["site"]
        if index in quick:
            paths = [p[len(site_dir) + 1:] for p in quick[index][0] + quick[index][1] if p.startswith(site_dir + "/")]
        else:
            paths = [row[0] for row in dist["rows"]]
        for rel in paths:
            owners.setdefault(site_dir + "/" + rel.split("/", 1)[0], dist["name"])
    return owners


def folder_owner(path, site_dirs, file_owners):
    for site_dir in site_dirs:
        if path.startswith(site_dir.rstrip("/") + "/"):
            top = path[len(site_dir.rstrip("/")) + 1:].split("/", 1)[0]
            return file_owners.get(site_dir.rstrip("/") + "/" + top, "")
    return ""


@section("audit")
def audit_section(args, emit):
    # No cyclic garbage collection while the audit runs: it makes no cycles, and each pass
    # over its 100,000 objects costs CPU and, in the forked workers, copies the pages it
    # touches. A third of the probe's CPU beyond hashing, on a venv of 20,000 files.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return audit_run(args, emit)
    finally:
        if enabled:
            gc.enable()


def audit_run(args, emit):
    started = time.time()
    phases = {}
    mark = [started, time.process_time()]

    def lap(name):
        now, cpu = time.time(), time.process_time()
        phases[name] = [round(now - mark[0], 3), round(cpu - mark[1], 3)]  # wall, this process's CPU
        mark[0], mark[1] = now, cpu

    default = not args.get("prefix")
    prefix = os.path.abspath(os.path.expanduser(args["prefix"])) if not default else interpreter_prefix()
    if not default and not os.path.isdir(fsb(prefix)):
        raise RuntimeError("no such directory: %s" % prefix)
    sites = find_sites(prefix, default, args.get("site_packages"))
    cache = StatCache(cache_folder(prefix, default), not args.get("full"), prefix)
    cache.open(os.stat(fsb(sites[0])).st_dev if sites else None)
    workers = max(1, int(args.get("workers") or usable_cpus()))
    notes = [] if sites else ["no site-packages folder found under %s" % prefix]

    dists = []
    for site_dir in sites:
        dists.extend(site_distributions(site_dir))
    signature = distributions_signature(dists)
    old_prefixes = pyvenv_old_prefixes(prefix) if not default else []
    snapshot = Snapshot(cache, snapshot_header(prefix, default, sites, old_prefixes, args.get("code")))
    replayed = snapshot.replay(signature, path_exists, workers)
    lap("snapshot")
    if replayed is not None:
        return replay(replayed, emit, started, phases, snapshot.workers_used)

    items = []

    def record(item):
        items.append(item)
        emit(item)

    cache.load()
    note_duplicate_names(dists)
    results = {}  # path -> [stat key, {algo: hex} or None when the cache vouches for it, shebang, error]
    quick = settled_distributions(dists, cache, results)
    owners, known, covered, unhashed = index_records(dists, quick, scheme_roots(prefix, sites),
                                                     None if default else prefix)
    for dist in dists:
        for path in dist.pop("outside", []):
            record({"path": path, "distribution": dist["name"], "version": dist["version"], "state": "outside",
                    "reason": "RECORD lists a path outside the environment's install folders; not read"})
    lap("records")

    jobs = []
    for path, own in owners.items():
        if results and path in results:
            if len(own) == 1:
                continue  # unchanged since it matched this same RECORD
            del results[path]
        # A file with one RECORD entry is compared in the worker; only a difference comes back.
        expected = own[0][1:] if len(own) == 1 else None
        algos = SHA256_ONLY if expected is not None and expected[0] == "sha256" else \
            sorted(set([o[1] for o in own] + ["sha256"]))
        jobs.append((path, algos, own[0][3], expected))
    hashing = HashRun(jobs, workers)
    new_dirs = {}
    watch = Watch(sites[0] if sites else prefix)
    extras, pycs = [], []
    for site_dir in sites:  # walks while the workers hash
        found_extras, found_pycs = walk_code(site_dir, known, covered, cache, new_dirs, watch)
        extras.extend(found_extras)
        pycs.extend(found_pycs)
    pyc_ok, pyc_todo = cached_bytecode(pycs, results, cache, watch)
    hashing.check_pycs(pyc_todo)
    lap("walk")
    hashed_bytes = 0
    for path, entry in results.items():  # the files the cache vouched for
        watch.file(path, entry[0])
    watched = watch.files
    for path, key, digests, head, error in hashing.results():
        results[path] = (key, digests, head, error)
        watched[path] = key
        if key is not None and not error:
            hashed_bytes += key[0]
    lap("hash")

    flagged, conflicts, matched = judge_files(prefix, old_prefixes, dists, owners, results, record, watch)
    for dist_index, paths in quick.items():
        note_stale_shebangs(prefix, dists[dist_index], paths[0], results, watch)
    pyc_checked = len(pyc_todo)
    save_cache = cache.status != "used" or jobs or pyc_checked or len(quick) < len(dists) or \
        len(new_dirs) != len(cache.loaded["dirs"])
    # Made while the workers check the .pyc headers.
    dist_entries = cache_dists(cache, dists, quick, matched, results) if save_cache and cache.writable else {}
    lap("verdicts")

    owners_cache = []

    def owner(path):
        if not owners_cache:  # built only when something needs attributing
            owners_cache.append(owner_of_folders(dists, quick))
        return folder_owner(path, sites, owners_cache[0])

    for path, reason in extras:
        record({"path": path, "distribution": owner(path), "state": "extra", "reason": reason})
    settled_before = cache.stamp_ns - cache.margin_ns  # cache.settled, inlined for 10,000 files
    try:
        for pyc, source, pkey, skey, why in hashing.pyc_results():
            watched[pyc] = pkey
            if watched.get(source, skey) != skey:
                watch.unfit = True  # the source changed while the audit ran (Watch.same_file, inlined)
            watched[source] = skey
            if source in flagged:
                continue  # the source's own difference already says it
            if why:
                record({"path": pyc, "distribution": owner(pyc), "state": "modified", "reason": why})
            elif max(pkey[1], pkey[2], skey[1], skey[2]) < settled_before and source in results:
                pyc_ok[pyc] = pkey
    finally:
        hashing.close()
    lap("bytecode")

    if save_cache:
        cache.save({"dists": dist_entries, "dirs": new_dirs, "pyc": pyc_ok})
    total_files = sum(len(q[0]) for q in quick.values()) + len(owners)
    data = {
        "python": sys.executable,
        "prefix": prefix,
        "default": default,
        "site_packages": sites,
        "distributions": [dict((k, d.get(k)) for k in (
            "name", "version", "path", "site", "kind", "record", "installer", "editable",
            "files", "verified", "problems", "notes")) for d in dists],
        "conflicts": conflicts,
        "notes": notes,
        "stats": {
            "files": total_files, "bytes": sum(r[0][0] for r in results.values() if r[0]),
            "hashed": len(jobs), "hashed_bytes": hashed_bytes, "cached": total_files - len(jobs),
            "unhashed": unhashed, "pyc_checked": pyc_checked, "pyc_cached": len(pycs) - pyc_checked,
            "extra": len(extras), "workers": hashing.workers, "cache": cache.status, "cache_path": cache.path,
        },
    }
    records_settled = all(cache.settled(d["record_key"]) for d in dists if d.get("record_key") is not None)
    kept = snapshot.save(signature, watch, records_settled, data, items)
    if kept:
        data["stats"]["snapshot"] = "saved"
    elif not cache.writable:
        data["stats"]["snapshot"] = "not saved: the cache is " + cache.status
    else:
        data["stats"]["snapshot"] = "not saved: files changed during the audit, or too recently"
    lap("cache_save")
    data["stats"].update(seconds=round(time.time() - started, 3), phases=phases)
    return data


def replay(replayed, emit, started, phases, workers):
    """The last audit's result, replayed because nothing it rests on has changed."""
    data, items = replayed
    for item in items:
        emit(item)
    stats = data["stats"]
    stats.update(
        hashed=0, hashed_bytes=0, cached=stats.get("files", 0), pyc_checked=0,
        pyc_cached=stats.get("pyc_checked", 0) + stats.get("pyc_cached", 0), workers=workers, cache="used",
        snapshot="replayed: no file, folder or metadata changed since the last audit",
        seconds=round(time.time() - started, 3), phases=phases,
    )
    data["python"] = sys.executable
    return data


def note_duplicate_names(dists):
    by_name = {}
    for dist in dists:
        by_name.setdefault((dist["site"], dist["name"].lower().replace("_", "-")), []).append(dist)
    for (site_dir, _), same in sorted(by_name.items()):
        if len(same) > 1:
            versions = ", ".join("%s (%s)" % (d["version"], os.path.basename(d["path"])) for d in same)
            for dist in same:
                dist["notes"].append("several metadata folders for %s in %s: %s (a broken upgrade or "
                                     "uninstall); each is checked against its own RECORD" % (dist["name"], site_dir, versions))


def split_joined(text):
    return text.split("\0") if text else []


def vouched_files(dist, entry, results):
    """Files the cache saw match this same RECORD and whose stat has not changed since."""
    vouched = {}
    for rel, old in zip(split_joined(entry[1][0]), unpack_keys(entry[1][1])):
        path = site_path(dist["site"], rel)
        try:
            key = stat_key(os.stat(fsb(path)))
        except OSError:
            continue
        if key == old:
            vouched[path] = [key, None, entry[2].get(rel), None]
    results.update(vouched)
    return vouched


def settled_distributions(dists, cache, results):
    """Distributions whose RECORD and every hashed file are as in the last clean audit: their
    RECORD is not even parsed. Returns {index: (hashed paths, unhashed paths)}; files of the
    other distributions that the cache still vouches for are put in `results`."""
    quick = {}
    for index, dist in enumerate(dists):
        entry = cache.loaded["dists"].get(dist["path"])
        if not entry or dist.get("record_key") is None or entry[0] != dist["record_key"]:
            continue
        vouched = vouched_files(dist, entry, results)
        unhashed = split_joined(entry[3])
        listed = entry[1][0].count("\0") + 1 if entry[1][0] else 0
        if entry[4] and len(vouched) == listed:
            quick[index] = (sorted(vouched), [site_path(dist["site"], rel) for rel in unhashed])
            dist["record_notes"] = list(entry[5])
            dist["notes"].extend(entry[5])
            dist.update(files=len(vouched) + len(unhashed), verified=len(vouched), problems=0)
    # A newly installed distribution may list a settled one's path: judge both in full then.
    claimed = {}
    for index, (hashed_paths, _) in quick.items():
        for path in hashed_paths:
            claimed[path] = index
    for index, dist in enumerate(dists):
        if index in quick:
            continue
        if dist["record"] == "ok" and not dist["rows"]:
            load_record(dist)
        if not claimed:
            continue  # nothing settled (--full, a first audit): no path to look up
        for row in dist["rows"]:
            other = claimed.get(site_path(dist["site"], row[0]))
            if other in quick:
                del quick[other]
                load_record(dists[other])
    return quick


SCHEME_FOLDERS = ("bin", "include", "share", "etc")


def scheme_roots(prefix, sites):
    """Folders a wheel may install into (the install scheme): each site folder, and bin/,
    include/, share/ and etc/ of the environment and of each site folder's own base (the
    part before its lib/ or lib64/), with a trailing slash."""
    bases = [prefix] if prefix else []
    for site_dir in sites:
        parts = site_dir.split("/")
        for i in range(len(parts) - 1, 0, -1):
            if parts[i] in ("lib", "lib64"):
                bases.append("/".join(parts[:i]) or "/")
                break
    roots = [os.path.normpath(s) + "/" for s in sites]
    for base in bases:
        roots.extend(os.path.normpath(os.path.join(base, f)) + "/" for f in SCHEME_FOLDERS)
    return tuple(sorted(set(roots)))


def inside_data_scheme(full, data_root):
    """Whether `full` lies in the environment's own prefix, where a wheel's `data` scheme installs
    (`pkg-1.0.data/data/external/ffmpeg/readme.txt` -> `<venv>/external/ffmpeg/readme.txt`): below
    the prefix once links are resolved, and not in envdoctor's own `.envdoctor/` folder."""
    if not data_root:
        return False
    root = os.path.normpath(data_root) + "/"
    if full != os.path.normpath(full) or not full.startswith(root) or full.startswith(root + ".envdoctor/"):
        return False
    real_root = os.path.realpath(fsb(data_root)) + b"/"
    return os.path.realpath(fsb(full)).startswith(real_root)


def index_records(dists, quick, roots=None, data_root=None):
    """path -> [(dist index, algo, digest, size)] for files to judge; every path any RECORD lists.
    With `roots`, a path outside them (``../../../../etc/shadow``) is never read: it is put in
    the distribution's "outside" list instead. `data_root`, the environment's own prefix when the
    audit is of a named environment, is inside too (see inside_data_scheme)."""
    owners, known, covered = {}, set(), set()
    unhashed = 0
    for index, dist in enumerate(dists):
        if index in quick:
            known.update(quick[index][0])
            known.update(quick[index][1])
            unhashed += len(quick[index][1])
            continue
        rows = dist["rows"]
        dist.update(files=len(rows), verified=0, problems=0)
        paths, odd = site_paths(dist["site"], [row[0] for row in rows])
        dist["paths"] = paths  # row by row
        # Plain joins below a site folder in the scheme are all inside it: only the odd rows
        # (../../../bin/tool) are checked, unless the site folder itself is not in the scheme.
        if roots is not None and not (dist["site"] + "/").startswith(roots):
            odd = range(len(rows))
        for number in sorted(odd):
            full = paths[number]
            if roots is not None and not full.startswith(roots) and (
                    full != os.path.normpath(full) or not (full + "/").startswith(roots)) and \
                    not inside_data_scheme(full, data_root):
                dist.setdefault("outside", []).append(full)
        known.update(paths)
        if dist.get("outside"):
            known.difference_update(dist["outside"])
        outside = set(dist.get("outside", ()))
        for row, full in zip(rows, paths):
            if outside and full in outside:
                continue
            if row[1] is None:
                unhashed += 1
                continue
            own = owners.get(full)
            if own is None:
                owners[full] = [(index, row[1], row[2], row[4])]
            else:
                own.append((index, row[1], row[2], row[4]))
        for top in dist.get("covers", []):
            covered.add(os.path.join(dist["site"], top))
    return owners, known, covered, unhashed


def note_stale_shebangs(prefix, dist, paths, results, watch):
    bin_dir = prefix + "/bin/"
    for path in paths:
        head = results.get(path, [None, None, None])[2]
        if head and path.startswith(bin_dir):
            interpreter = head[2:].strip().split()[0] if head[2:].strip() else ""
            if not interpreter.startswith("/"):
                continue
            exists = path_exists(interpreter)
            watch.interpreter(interpreter, exists)
            if not exists:
                dist["notes"].append("console script %s runs %s, which does not exist (the venv was moved?)"
                                     % (os.path.basename(path), interpreter))


def judge_files(prefix, old_prefixes, dists, owners, results, emit, watch):
    """Compare each judged file with its RECORD entries; emit the differences."""
    bin_dir = prefix + "/bin/"
    conflicts, flagged, matched = [], set(), set()
    for path, own in owners.items():
        key, digests, head, error = results[path]
        if digests is None and not error:
            dists[own[0][0]]["verified"] += 1  # as its RECORD says: vouched by the cache or the worker
            matched.add(path)
            if head:
                note_stale_shebangs(prefix, dists[own[0][0]], [path], results, watch)
            continue
        if not error and len(own) == 1:
            record = own[0]
            if digests.get(record[1]) == digest_hex(record[1], record[2]) and \
                    (record[3] is None or record[3] == key[0]):
                dists[record[0]]["verified"] += 1
                matched.add(path)
                if head:
                    note_stale_shebangs(prefix, dists[record[0]], [path], results, watch)
                continue
        first = dists[own[0][0]]
        item = {"path": path, "distribution": first["name"], "version": first["version"],
                "dist_path": first["path"]}
        if len(own) > 1:
            item["also_listed_by"] = sorted(set("%s %s" % (dists[o[0]]["name"], dists[o[0]]["version"]) for o in own[1:]))
        if error:
            item.update(state="missing" if error == "missing" else "modified",
                        reason="listed in RECORD but not on disk" if error == "missing" else error)
            for o in own:
                dists[o[0]]["problems"] += 1
            flagged.add(path)
            emit(item)
            continue
        matching = [o for o in own
                    if digests.get(o[1]) == digest_hex(o[1], o[2]) and (o[3] is None or o[3] == key[0])]
        if matching:
            for o in matching:
                dists[o[0]]["verified"] += 1
            losers = [o for o in own if o not in matching]
            if losers:
                winner = dists[matching[0][0]]
                conflicts.append({
                    "path": path,
                    "kept": "%s %s" % (winner["name"], winner["version"]),
                    "overwritten": sorted(set("%s %s" % (dists[o[0]]["name"], dists[o[0]]["version"]) for o in losers)),
                })
            note_stale_shebangs(prefix, first, [path], results, watch)
            continue
        expected = own[-1]
        expected_hex = digest_hex(expected[1], expected[2])
        if expected[3] is not None and expected[3] != key[0]:
            reason = "size %d, RECORD says %d" % (key[0], expected[3])
        else:
            reason = "content differs from RECORD (%s)" % expected[1]
        if head and path.startswith(bin_dir):
            moved_from = shebang_rewritten(path, head, expected[1], expected_hex, old_prefixes)
            if moved_from:
                reason = "only the shebang differs: rewritten after the venv moved from %s" % moved_from
        item.update(state="modified", reason=reason, sha256=digests.get("sha256"), expected=expected_hex,
                    expected_algo=expected[1])
        for o in own:
            dists[o[0]]["problems"] += 1
        flagged.add(path)
        emit(item)
    return flagged, conflicts, matched


def cached_bytecode(pycs, results, cache, watch):
    """Split .pyc files into those the cache vouches for ({pyc: key}) and those to check.

    The header's verdict depends on both files: it stands while the .pyc's stat is the same
    and its source is one the cache vouched for (unchanged since that verdict was saved)."""
    if not cache.loaded["pyc"]:
        return {}, list(pycs)
    ok, todo = {}, []
    for pyc, source in pycs:
        entry = cache.loaded["pyc"].get(pyc)
        known = results.get(source)
        if entry and known is not None and known[1] is None and not known[3]:
            try:
                pkey = stat_key(os.stat(fsb(pyc)))
            except OSError:
                continue
            if pkey == entry:
                ok[pyc] = entry
                watch.file(pyc, pkey)  # its source's key is watched with the verified files
                continue
        todo.append((pyc, source))
    return ok, todo


def cache_dists(cache, dists, quick, matched, results):
    """Per distribution with a RECORD: the files that matched it (settled ones only), for next time.

    Entry: [RECORD key, [relative paths, their stat keys], {relative path: shebang},
    unhashed relative paths, complete (every hashed file matched, alone), RECORD notes].
    Relative paths are as RECORD spells them (site_path makes the same path of them) and
    "\0"-joined: a few long strings are written and read far faster than 20,000 short ones."""
    entries = {}
    settled_before = cache.stamp_ns - cache.margin_ns  # cache.settled, inlined for 20,000 files
    for index, dist in enumerate(dists):
        if dist.get("record") != "ok" or not cache.settled(dist.get("record_key")):
            continue
        site_dir = dist["site"]
        rels, keys, heads, unhashed, complete = [], [], {}, [], True
        vouched = index in quick  # every hashed file is one the cache vouched for
        if vouched:
            paths, unhashed_paths = quick[index]
            rows = [(relative_to(site_dir, p), True) for p in paths]  # (RECORD path, hashed) as in a row
            unhashed = [relative_to(site_dir, p) for p in unhashed_paths]
        else:
            paths, rows = dist["paths"], dist["rows"]
        for path, row in zip(paths, rows):
            rel = row[0]
            if row[1] is None:
                unhashed.append(rel)
                continue
            result = results.get(path) if vouched or path in matched else None
            key = result[0] if result else None
            if key is None or key[1] >= settled_before or key[2] >= settled_before:
                complete = False
                continue
            rels.append(rel)
            keys.append(key)
            if result[2]:
                heads[rel] = result[2]
        entries[dist["path"]] = [dist["record_key"], ["\0".join(rels), pack_keys(keys)], heads,
                                 "\0".join(unhashed), complete, dist.get("record_notes", [])]
    return entries


def relative_to(site_dir, path):
    if path.startswith(site_dir + "/"):
        return path[len(site_dir) + 1:]
    return os.path.relpath(path, site_dir)
