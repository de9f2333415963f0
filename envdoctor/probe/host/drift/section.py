# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "drift": will one installed distribution's calls still fit the definitions of the
# other installed distributions it imports? The host reduces source to facts and the
# controller judges them (envdoctor/drift/):
#   - consumers: the distributions the trust_remote_code scan selects (they depend on
#     transformers, vllm or sglang) plus those named; with an entry module (a stage's
#     `-m module` or script; several: their union) only the consumer files they reach are
#     read, and nothing is scoped when one of them is not on the host;
#   - uses: each consumer file that imports another installed distribution (a provider)
#     is parsed and its imports, attribute chains and calls on provider names are listed;
#   - summaries: the provider modules those uses reach, read on demand by the same
#     resolver the controller runs (drift_resolve.Resolver), reduced to their definitions;
#   - baselines: when a consumer pins its provider to versions the installed one is outside
#     of and another environment of the host holds a pinned version (drift_baseline.py),
#     the modules the same uses reach there, so the controller can tell new breaks from old.
# Nothing is imported or executed. The whole answer is cached in ~/.cache/envdoctor/drift-<digest>/
# (owner-only) under a key made of the request, the site folders' entries and the hashes
# of the RECORDs involved, and checked against the stat key (size, mtime_ns, ctime_ns,
# inode) of every file it read: an unchanged venv is answered from the cache. Not the
# mtime alone: a file's owner can set it back (`touch -d`) after a same-size edit, but not
# its ctime (nor the inode of a file replaced by rename).

import hashlib
import json
import os
import stat
import sys
import time
import warnings

from envdoctor.probe.host.audit.hashing import write_private
from envdoctor.probe.host.audit.record import fsb, stat_key
from envdoctor.probe.host.core import (
    MAX_CACHE_BYTES,
    MAX_RECORD_BYTES,
    canonical_name,
    prune_user_caches,
    read_regular,
    section,
    site_dirs,
    site_entries,
    touch_user_cache,
)
from envdoctor.probe.host.drift.baseline import (
    baseline_candidates,
    baseline_find,
    baseline_missing,
    baseline_pins,
    baseline_satisfies,
)
from envdoctor.probe.host.drift.resolve import Resolver
from envdoctor.probe.host.drift.imports import CONDITION, TYPING
from envdoctor.probe.host.drift.reach import Reach, entries_from_args, folder_listing
from envdoctor.probe.host.drift.consumers import consumers_uses, needed_summaries, resolve_use
from envdoctor.probe.host.drift.files import ModuleFiles, Owners, flag_facts
from envdoctor.probe.host.scan.sources import src_record_python_files, src_select_distributions

DRIFT_CACHE_VERSION = 2  # 2: stat keys of the files read, not (size, mtime)
DRIFT_CACHE_NAME = "drift-cache"
#: Each consumer file's uses, kept across answers (see drift_consumers.FileUses).
FILES_CACHE_NAME = "drift-files"
#: Each provider module's summary, kept across answers (drift_files.ModuleFiles.summary_kept).
SUMMARIES_CACHE_NAME = "drift-summaries"


def entry_list(entry):
    """The request's entry: one module or script, or a list of them (the stages of a host)."""
    if not entry:
        return []
    if isinstance(entry, (list, tuple)):
        return [str(e) for e in entry if e]
    return [str(entry)]


def _digest_file(path):
    try:
        return hashlib.sha1(read_regular(path, MAX_RECORD_BYTES)).hexdigest()
    except OSError:
        return None


def cache_key(args, sites, walks=True):
    """The request, the interpreter, the site folders' dist-info entries and the hash of every
    RECORD, and, when an import walk runs (`walks`), the working folder and what the folders the
    stages start in hold (a module there hides an installed one). The API-drift part alone
    reads none of those: a login folder that changes does not make it read everything again."""
    digest = hashlib.sha1(json.dumps([DRIFT_CACHE_VERSION, args, sys.version, os.getcwd() if walks else ""],
                                     sort_keys=True).encode("utf-8"))
    if walks:
        digest.update(folder_listing(args.get("import_entries")).encode("utf-8", "surrogateescape"))
    for site, entry in site_entries(sites):
        digest.update(("\0%s\0%s" % (site, entry)).encode("utf-8", "surrogateescape"))
        if entry.endswith(".dist-info"):
            digest.update(str(_digest_file(os.path.join(site, entry, "RECORD"))).encode("ascii"))
    return digest.hexdigest()


def drift_cache_folder(prefix):
    """The user's cache, one folder per environment: a check writes nothing inside the
    environment it reads."""
    digest = hashlib.sha1(fsb(os.path.abspath(prefix) if prefix else sys.prefix)).hexdigest()[:12]
    return os.path.join(os.path.expanduser("~"), ".cache", "envdoctor", "drift-" + digest)


def read_cache(folder, key, name=DRIFT_CACHE_NAME):
    path = os.path.join(folder, name)
    try:
        st = os.stat(path)
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            return None
        cached = json.loads(read_regular(path, MAX_CACHE_BYTES).decode("ascii"))
    except (OSError, ValueError):
        return None
    if cached.get("key") != key:
        return None
    touch_user_cache(folder)
    for path, key in cached.get("read", {}).items():
        try:
            if stat_key(os.stat(path)) != key:
                return None
        except OSError:
            return None
    return cached.get("data")


def write_cache(folder, key, read, data, name=DRIFT_CACHE_NAME):
    """Save the answer in a real, owner-only folder of ours (never through a planted symlink);
    `name`: the file (the architecture section keeps its own beside the drift one)."""
    try:
        if not os.path.isdir(folder):
            parent = os.path.dirname(folder)
            if not os.path.isdir(parent):
                os.makedirs(parent, 0o700)  # ~/.cache/envdoctor
            os.mkdir(folder, 0o700)
            prune_user_caches(folder)
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            return False
    except OSError:
        return False
    return write_private(folder, name, {"key": key, "read": read, "data": data})


#: What a request may ask of the section: "api" (code.api-drift: the consumers' uses and the
#: provider summaries they reach), "imports" (code.imports: the walk from the entries).
PARTS = ("api", "imports")


@section("drift")
def drift_section(args, emit):
    """The API-drift part (and the imports walk too when the request asks for both parts)."""
    return drift_run_section(args, args.get("parts") or list(PARTS), DRIFT_CACHE_NAME)


@section("imports")
def imports_section(args, emit):
    """The imports walk alone (code.imports): it never pays for the API-drift analysis."""
    return drift_run_section(args, ["imports"], "imports-cache")


def drift_run_section(args, parts, cache_name):
    started = time.time()
    cpu = time.process_time()
    sites = site_dirs(args.get("prefix"))
    use_cache = args.get("cache", True)
    folder = drift_cache_folder(args.get("prefix"))
    # The environments that may hold a consumer's known-good provider are part of the key:
    # one that appears or goes changes the answer.
    candidates = baseline_candidates(args.get("baselines") or [], args.get("prefix"),
                                     args.get("discover_baselines", True)) if "api" in parts else []
    key = cache_key(dict(args, baseline_candidates=candidates, parts=sorted(parts)), sites,
                    walks="imports" in parts or bool(args.get("entry")))
    if use_cache:
        cached = read_cache(folder, key, cache_name)
        if cached is not None:
            cached["cache"] = "hit"
            cached["host_seconds"] = round(time.time() - started, 4)
            cached["host_cpu_seconds"] = round(time.process_time() - cpu, 4)
            return cached
    with warnings.catch_warnings():
        # Compiling a library's sources warns (SyntaxWarning: invalid escape sequence): that
        # is the library's business, never this section's stderr or message.
        warnings.simplefilter("ignore")
        data = analyse(args, sites, candidates, parts)
    read = data.pop("_read")
    data["cache"] = "miss"
    if use_cache:
        data["cache_saved"] = write_cache(folder, key, read, data, cache_name)
    data["host_seconds"] = round(time.time() - started, 4)
    data["host_cpu_seconds"] = round(time.process_time() - cpu, 4)
    return data


def analyse(args, sites, candidates=(), parts=PARTS):
    consumers, not_found = src_select_distributions(sites, args.get("depends_on") or [], args.get("extra") or [])
    modules = ModuleFiles(sites, int(args.get("max_file_bytes", 4 * 1024 * 1024)))
    owners = Owners(sites, modules.finder)
    facts = flag_facts(modules, owners)
    files = {}
    for dist in consumers:
        files[dist["name"]] = [r for r in (src_record_python_files(dist) or []) if not r.startswith("..")]
    entry = args.get("entry") if "api" in parts else None
    data = {"site_packages": sites, "not_found": not_found, "errors": modules.errors, "parts": list(parts)}
    scope, unfound = None, []
    if "imports" in parts or entry:
        # One walk from the entries serves code.imports (what they import, and what is missing)
        # and scopes the API-drift part to the consumer files a stage reaches.
        reach = Reach(sites, modules.finder.extra, consumers, owners, modules, int(args.get("max_files", 20000)),
                      library_class=TYPING if entry else CONDITION, front=modules.finder.front)
        reach.conditions.facts = facts
        for item in entries_from_args(args, consumers, files):
            reach.add(item)
        reach.run()
        scope, unfound = reach.consumer_scope(entry_list(entry)) if entry else (None, [])
        if unfound:
            scope = None  # the job runs code this section cannot follow: every consumer file is read
        if "imports" in parts:
            data["imports"] = reach.report()
        del reach
    parsed = 0
    if "api" in parts:
        wanted = set(canonical_name(p) for p in args.get("providers") or [])
        budget = {"files": int(args.get("max_files", 20000)), "parsed": 0}
        resolver = Resolver(modules.load)
        # Each consumer file's answer of an earlier run, reused while the file and the facts it
        # depended on are the same (an install changes the whole answer's key, not these).
        folder = drift_cache_folder(args.get("prefix"))
        files_key = hashlib.sha1(json.dumps([DRIFT_CACHE_VERSION, args.get("code"), sys.version, sites]).encode(
            "utf-8", "surrogateescape")).hexdigest()
        known = read_cache(folder, files_key, FILES_CACHE_NAME) if args.get("cache", True) else None
        summaries_known = read_cache(folder, files_key, SUMMARIES_CACHE_NAME) if args.get("cache", True) else None
        modules.known = summaries_known if isinstance(summaries_known, dict) else {}
        out_consumers, work = consumers_uses(
            consumers, lambda d: [r for r in files[d["name"]] if scope is None or r in scope],
            owners, wanted, modules, resolver, budget, facts, known if isinstance(known, dict) else None)
        if args.get("cache", True):
            write_cache(folder, files_key, {}, work.fresh, FILES_CACHE_NAME)
        data["files_reused"] = work.reused
        del resolver
        used = set(p for c in out_consumers for p in c["providers"])
        providers = dict((name, {"version": info["version"], "requires": info["requires"]})
                         for name, info in owners.used.items() if name in used)
        import_names = {}
        versions = {}  # the installed version of each name a version guard tests
        for consumer in out_consumers:
            for use in consumer["uses"]:
                import_names.setdefault(use["path"].split(".")[0], use["provider"])
                for guard in use.get("g") or []:
                    if "ver" in guard and guard["ver"] not in versions:
                        versions[guard["ver"]] = facts.version(guard["ver"])
        baselines, base_read, base_parsed, base_bytes = known_good(out_consumers, providers, candidates,
                                                                   modules.max_file)
        modules.read.update(base_read)
        parsed = budget["parsed"] + sum(1 for s in modules.summaries.values() if s is not None) + base_parsed
        summaries = needed_summaries(out_consumers, modules)
        if args.get("cache", True):
            write_cache(folder, files_key, {}, modules.fresh, SUMMARIES_CACHE_NAME)
        modules.bytes += base_bytes
        data.update({"baselines": baselines, "baselines_missing": baseline_missing(args.get("baselines") or []),
                     "import_names": import_names, "consumers": out_consumers, "providers": providers,
                     "versions": dict((k, v) for k, v in versions.items() if v),
                     "modules": summaries, "entry": entry, "entries_unfound": unfound,
                     "scoped_files": sorted(scope) if scope is not None else None})
    data.update({"files_parsed": parsed + (data.get("imports") or {}).get("files", 0), "bytes_read": modules.bytes,
                 "_read": modules.read})
    return data


def known_good(consumers, providers, candidates, max_file):
    """For each pair whose consumer pins the provider to versions the installed one is outside
    of: the first candidate environment holding a pinned version, with the summaries of the
    modules the pair's uses reach there. Returns (baselines, files read, modules parsed, bytes)."""
    found = []
    located = {}
    files_of = {}
    for consumer in consumers:
        for provider in consumer["providers"]:
            installed = (providers.get(provider) or {}).get("version", "")
            for specifier, extra, text in baseline_pins(consumer["requires"], provider):
                if baseline_satisfies(installed, specifier) is not False:
                    continue  # the installed version meets this pin, or it cannot be told here
                if (provider, specifier) not in located:
                    located[provider, specifier] = baseline_find(candidates, provider, specifier)
                hit = located[provider, specifier]
                if hit is None:
                    continue
                prefix, base_sites, version = hit
                if prefix not in files_of:
                    files_of[prefix] = ModuleFiles(base_sites, max_file)
                files = files_of[prefix]
                resolver = Resolver(files.load)
                for use in consumer["uses"]:
                    if use["provider"] == provider:
                        resolve_use(resolver, use)
                found.append({"consumer": consumer["name"], "provider": provider, "version": version,
                              "requirement": text, "extra": extra, "prefix": prefix, "site_packages": base_sites})
                break
    read = {}
    parsed = 0
    for baseline in found:
        files = files_of[baseline["prefix"]]
        baseline["modules"] = dict((m, s) for m, s in files.summaries.items() if s is not None)
        baseline["errors"] = files.errors
        read.update(files.read)
    for files in files_of.values():
        parsed += sum(1 for s in files.summaries.values() if s is not None)
    return found, read, parsed, sum(f.bytes for f in files_of.values())
