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

import ast
import csv
import hashlib
import io
import json
import os
import re
import stat
import sys
import time
import warnings

from envdoctor.probe.host.audit_hash import write_private
from envdoctor.probe.host.audit_record import fsb, stat_key
from envdoctor.probe.host.core import (
    MAX_CACHE_BYTES,
    MAX_LIST_BYTES,
    MAX_RECORD_BYTES,
    canonical_name,
    prune_user_caches,
    read_regular,
    read_headers,
    section,
    site_dirs,
    site_entries,
    touch_user_cache,
)
from envdoctor.probe.host.drift_ast import summarize_source
from envdoctor.probe.host.drift_baseline import (
    baseline_candidates,
    baseline_find,
    baseline_missing,
    baseline_pins,
    baseline_satisfies,
)
from envdoctor.probe.host.drift_resolve import Resolver
from envdoctor.probe.host.drift_imports import CONDITION, TYPING
from envdoctor.probe.host.drift_reach import Reach, entries_from_args, folder_listing
from envdoctor.probe.host.drift_flags import FlagFacts, FlagScope
from envdoctor.probe.host.drift_uses import Bindings, UseFinder
from envdoctor.probe.host.drift_walk import ImportFinder, editable_mapping, pth_code_paths, stdlib_names
from envdoctor.probe.host.sources import src_record_python_files, src_select_distributions
from envdoctor.probe.host.venvs import with_pth_paths

DRIFT_CACHE_VERSION = 2  # 2: stat keys of the files read, not (size, mtime)
DRIFT_CACHE_NAME = "drift-cache"


def module_finder(sites):
    """The import system's view of an environment's site folders, as files say it: the
    folders the .pth files add (paths, and the code lines pth_code_paths reads) and the
    namespace packages several distributions share."""
    front, back = [], []
    for site in sites:
        more_front, more_back = pth_code_paths(site)
        front.extend(p for p in more_front if p not in front)
        back.extend(p for p in more_back if p not in back)
    extra = [p for p in with_pth_paths(sites) + back if p not in sites]
    return ImportFinder([], sites, extra, editable_mapping(sites + extra), stdlib_names(), front)


class ModuleFiles(object):
    """Finds (as the import system would: drift_walk.ImportFinder) and parses modules, each
    once; counts what it read. Only summaries are kept: a parsed tree is dropped at once."""

    def __init__(self, sites, max_file, finder=None):
        self.sites = sites
        self.max_file = max_file
        self.finder = finder if finder is not None else module_finder(sites)
        self.summaries = {}
        self.read = {}  # path -> its stat key when it was read
        self.errors = []
        self.bytes = 0

    def locate(self, module):
        """(path, is_package) of a module's source, ("", "ext") for a compiled one (or one whose
        files cannot say), (folders, "ns") for a namespace package, None when there is none
        (or it is the standard library's, which is not read)."""
        found = self.finder.find(module)
        if found.status == "missing":
            return None
        if found.status == "unknown":
            return "", "ext"
        if found.kind in ("stdlib", "builtin"):
            return None
        if found.kind == "ns":
            return found.dirs, "ns"
        if found.kind == "ext":
            return "", "ext"
        return found.path, found.kind == "pkg"

    def read_file(self, path):
        st = os.stat(path)
        data = read_regular(path, self.max_file)
        self.read[path] = stat_key(st)
        self.bytes += len(data)
        return data

    def load(self, module):
        if module in self.summaries:
            return self.summaries[module]
        self.summaries[module] = None
        found = self.locate(module)
        summary = None
        if found is not None:
            path, kind = found
            if kind == "ext":
                summary = {"ext": True}
            elif kind == "ns":
                summary = {"ns": True, "names": {}, "stars": [], "pkg": True, "path": self.relative(path[0]) + "/"}
            else:
                try:
                    summary = summarize_source(self.read_file(path), module, kind is True, path)
                    summary["path"] = self.relative(path)
                except (OSError, SyntaxError, ValueError, RecursionError) as exc:
                    self.errors.append({"path": self.relative(path), "message": str(exc)[:300]})
                    summary = {"ext": True, "path": self.relative(path), "unreadable": True}
        self.summaries[module] = summary
        return summary

    def relative(self, path):
        for site in self.sites:
            if path.startswith(site.rstrip("/") + "/"):
                return path[len(site.rstrip("/")) + 1:]
        return path


_IMPORT_LINE = re.compile(rb"^[ \t]*(?:from[ \t]+([A-Za-z_]\w*)|import[ \t]+([A-Za-z_][\w., \t]*))", re.M)


def import_lines(data):
    """Top-level names the absolute import statements of a source name (a cheap superset test:
    an import inside a string may pass, an import missed here is one no parse would see)."""
    names = set()
    for match in _IMPORT_LINE.finditer(data):
        if match.group(1):
            names.add(match.group(1).decode("ascii"))
        else:
            for part in match.group(2).split(b","):
                part = part.strip().split(b" ")[0].split(b".")[0]
                if part:
                    names.add(part.decode("ascii", "replace"))
    return names


def module_of(rel):
    """'a/b/c.py' -> ('a.b.c', False); 'a/b/__init__.py' -> ('a.b', True)."""
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def flag_facts(modules, owners):
    """What the installed files tell of a branch's test (drift_flags.FlagFacts): a module found
    by the import system, a distribution's version, another module's top-level flags."""
    versions = {}
    scopes = {}

    def found(module):
        status = modules.finder.find(module).status
        return True if status == "found" else False if status == "missing" else None

    def version(name):
        if name not in versions:
            versions[name] = owners.version(name)
        return versions[name]

    def scope(module):
        if module not in scopes:
            scopes[module] = None
            located = modules.locate(module)
            if located is not None and located[1] in (True, False):
                try:
                    tree = ast.parse(modules.read_file(located[0]))
                    scopes[module] = FlagScope(tree, module, located[1])
                except (OSError, SyntaxError, ValueError, RecursionError):
                    pass
        return scopes[module]

    facts = FlagFacts(found, version, scope)
    facts.versions = versions
    return facts


def record_module_files(dist_info):
    """The module files (.py and compiled) a RECORD lists, relative to its site folder."""
    try:
        text = read_regular(os.path.join(dist_info, "RECORD"), MAX_RECORD_BYTES).decode("utf-8", "replace")
        rows = list(csv.reader(io.StringIO(text)))
    except (OSError, csv.Error):
        return []
    return [row[0] for row in rows if row and row[0].endswith(_MODULE_SUFFIXES) and not row[0].startswith(("..", "/"))]


_MODULE_SUFFIXES = (".py", ".so", ".pyd")


class Owners(object):
    """Which installed distribution provides a module: the one whose RECORD lists its file
    (the RECORDs are read once, on demand). Several distributions share a namespace package
    (nvidia/, nccl/, opentelemetry/), so a module is never charged to the first distribution
    that names its top-level folder; a namespace package itself belongs to none."""

    def __init__(self, sites, finder):
        self.sites = sites
        self.finder = finder
        self.files = None  # normalized path -> (site, dist-info entry)
        self.infos = {}  # (site, entry) -> {name, version, requires, dist_info, site}
        self.used = {}  # distribution name -> its info, for each one charged with a module

    def index(self):
        if self.files is None:
            self.files = {}
            for site, entry in site_entries(self.sites):
                if entry.endswith(".dist-info"):
                    for rel in record_module_files(os.path.join(site, entry)):
                        self.files.setdefault(os.path.normpath(os.path.join(site, rel)), (site, entry))
        return self.files

    def info(self, site, entry):
        if (site, entry) not in self.infos:
            folder = os.path.join(site, entry)
            try:
                headers = read_headers(os.path.join(folder, "METADATA"))
                info = {"name": headers.get("Name") or entry.split("-")[0], "version": headers.get("Version") or "",
                        "dist_info": folder, "site": site, "requires": headers.get_all("Requires-Dist") or []}
            except OSError:
                info = None
            self.infos[site, entry] = info
        return self.infos[site, entry]

    def of_file(self, path):
        hit = self.index().get(os.path.normpath(path)) if path else None
        info = self.info(*hit) if hit else None
        if info is not None:
            self.used.setdefault(info["name"], info)
        return info

    def version(self, name):
        """The installed version of a distribution (by its name) or of the one providing an
        import name; None when neither is installed."""
        wanted = canonical_name(name)
        for site, entry in site_entries(self.sites):
            if entry.endswith(".dist-info") and canonical_name(entry[:-len(".dist-info")].rsplit("-", 1)[0]) == wanted:
                info = self.info(site, entry)
                if info is not None:
                    return info["version"]
        if not re.match(r"^[A-Za-z_]\w*$", name):
            return None
        info = self.of_module(name)
        return info["version"] if info is not None else None

    def installed(self, top):
        """Whether an installed distribution provides something under a top-level name (the
        standard library's and missing names are not)."""
        found = self.finder.find(top)
        return found.status == "found" and found.kind not in ("stdlib", "builtin")

    def of_module(self, dotted_path):
        """The distribution charged with a dotted name (a module, or a name in one): the owner
        of the deepest module on the way that has a file; None when that is a namespace package
        (the name is missing there, and no installed distribution would provide it) or none is."""
        parts = dotted_path.split(".")
        for end in range(len(parts), 0, -1):
            found = self.finder.find(".".join(parts[:end]))
            if found.status != "found":
                continue  # a name inside a module, or a submodule files cannot tell: its parent's
            if found.kind in ("stdlib", "builtin", "ns"):
                return None
            path = found.path
            if found.kind == "ext" and path and os.path.isdir(path):
                path = next((os.path.join(path, n) for n in sorted(os.listdir(path)) if n.startswith("__init__.")), path)
            return self.of_file(path)
        return None


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


def cache_key(args, sites):
    """The request, the interpreter, the site folders' dist-info entries and the hash of every
    RECORD, and what the folders the stages start in hold (a module there hides an installed one)."""
    digest = hashlib.sha1(json.dumps([DRIFT_CACHE_VERSION, args, sys.version, os.getcwd()],
                                     sort_keys=True).encode("utf-8"))
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
    return run_section(args, args.get("parts") or list(PARTS), DRIFT_CACHE_NAME)


@section("imports")
def imports_section(args, emit):
    """The imports walk alone (code.imports): it never pays for the API-drift analysis."""
    return run_section(args, ["imports"], "imports-cache")


def run_section(args, parts, cache_name):
    started = time.time()
    cpu = time.process_time()
    sites = site_dirs(args.get("prefix"))
    use_cache = args.get("cache", True)
    folder = drift_cache_folder(args.get("prefix"))
    # The environments that may hold a consumer's known-good provider are part of the key:
    # one that appears or goes changes the answer.
    candidates = baseline_candidates(args.get("baselines") or [], args.get("prefix"),
                                     args.get("discover_baselines", True)) if "api" in parts else []
    key = cache_key(dict(args, baseline_candidates=candidates, parts=sorted(parts)), sites)
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
        out_consumers = []
        for dist in consumers:
            rels = [r for r in files[dist["name"]] if scope is None or r in scope]
            out_consumers.append(consumer_uses(dist, rels, owners, wanted, modules, resolver, budget, facts))
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
        modules.bytes += base_bytes
        data.update({"baselines": baselines, "baselines_missing": baseline_missing(args.get("baselines") or []),
                     "import_names": import_names, "consumers": out_consumers, "providers": providers,
                     "versions": dict((k, v) for k, v in versions.items() if v),
                     "modules": summaries, "entry": entry, "entries_unfound": unfound,
                     "scoped_files": sorted(scope) if scope is not None else None})
    data.update({"files_parsed": parsed + (data.get("imports") or {}).get("files", 0), "bytes_read": modules.bytes,
                 "_read": modules.read})
    return data


def needed_summaries(consumers, modules):
    """The summaries the controller's judge of the kept uses reads: those a fresh resolver
    loads following them (the judge runs the same resolver on the same summaries)."""
    needed = {}

    def load(module):
        if module not in needed:
            summary = modules.load(module)
            if summary is not None and "names" in summary:
                summary = dict(summary, names=_AskedNames(summary["names"]))
            needed[module] = summary
        return needed[module]

    resolver = Resolver(load)
    seen = set()
    for consumer in consumers:
        for use in consumer["uses"]:
            key = (use["path"], use["kind"], bool(use.get("amb")))
            if key not in seen:
                seen.add(key)
                resolve_use(resolver, use)
    # Each summary keeps only the names the resolver asked for (the judge asks the same):
    # a generated module of thousands of functions travels as the few a consumer calls.
    shipped = {}
    for module, summary in needed.items():
        if summary is not None:
            if isinstance(summary.get("names"), _AskedNames):
                summary = dict(summary, names=summary["names"].asked_part())
            shipped[module] = summary
    return shipped


class _AskedNames(dict):
    """A summary's names that remember which were asked for (present or not)."""

    def __init__(self, names):
        dict.__init__(self, names)
        self.asked = set()

    def get(self, key, default=None):
        self.asked.add(key)
        return dict.get(self, key, default)

    def __contains__(self, key):
        self.asked.add(key)
        return dict.__contains__(self, key)

    def __getitem__(self, key):
        self.asked.add(key)
        return dict.__getitem__(self, key)

    def asked_part(self):
        return dict((k, dict.__getitem__(self, k)) for k in self.asked if dict.__contains__(self, k))


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


def consumer_uses(dist, rels, owners, wanted, modules, resolver, budget, facts=None):
    """One consumer's uses of the other installed distributions (`wanted` ones when named),
    each resolved once here so the provider modules it reaches are read and shipped. A use
    is charged to the distribution that provides the module it reaches (Owners.of_module);
    one that no installed distribution would provide (a missing part of a namespace
    package) is no API of anyone's: code.imports tells whether it matters."""
    own = canonical_name(dist["name"])
    record = {"name": dist["name"], "version": dist["version"], "reason": dist["reason"],
              "files": 0, "providers": [], "requires": [], "uses": []}
    try:
        record["requires"] = read_headers(os.path.join(dist["dist_info"], "METADATA")).get_all("Requires-Dist") or []
    except OSError:
        pass
    own_tops = set(r.split("/")[0][:-3] if "/" not in r else r.split("/")[0] for r in rels)
    maybe = {}

    def may_provide(top):
        if top not in maybe:
            maybe[top] = top not in own_tops and owners.installed(top)
        return maybe[top]

    charged = {}

    def provider_of(path):
        if path not in charged:
            info = owners.of_module(path)
            name = info["name"] if info is not None else None
            if name is not None and (canonical_name(name) == own or (wanted and canonical_name(name) not in wanted)):
                name = None
            charged[path] = name
        return charged[path]

    resolved = set()
    for rel in rels:
        if budget["parsed"] >= budget["files"]:
            record["truncated"] = True
            break
        try:
            data = modules.read_file(os.path.join(dist["site"], rel))
        except OSError as exc:
            modules.errors.append({"path": rel, "message": str(exc)})
            continue
        if not any(may_provide(t) for t in import_lines(data)):
            continue  # imports no other installed distribution: nothing to parse for
        module, is_package = module_of(rel)
        try:
            tree = ast.parse(data, filename=rel)
        except (SyntaxError, ValueError, RecursionError) as exc:
            modules.errors.append({"path": rel, "message": "does not parse: %s" % exc})
            continue
        del data
        budget["parsed"] += 1
        record["files"] += 1
        bindings = Bindings(tree, module, is_package)
        tops = set(top for top in bindings.tops if may_provide(top))
        if not tops:
            continue
        finder = UseFinder(tree, module, is_package, tops, bindings, facts)
        for use in finder.run():
            provider = provider_of(use["path"])
            if provider is None:
                continue
            use["file"] = rel
            use["provider"] = provider
            record["uses"].append(use)
            if provider not in record["providers"]:
                record["providers"].append(provider)
            key = (use["path"], use["kind"], bool(use.get("amb")))
            if key not in resolved:
                resolved.add(key)
                resolve_use(resolver, use)
            settle(record, use, resolver)
        if finder.sets:
            record["sets"] = sorted(set(record.get("sets", [])) | finder.sets)
        del tree, bindings, finder
    return record


#: Uses kept per pair whose verdict is `unresolved` (the rest are counted): a provider of
#: compiled code (torch) is reached by tens of thousands, all unresolved for the same reason.
MAX_UNRESOLVED_KEPT = 25


def settle(record, use, resolver):
    """Keep a use for the controller unless its verdict is already certain here, by the same
    resolver and the first rules of envdoctor.drift.judge: a name or import that resolves
    fits (one in a `try` stays: it tells whether the fallback runs), and one that reaches only
    what cannot be read is unresolved (a few are kept as examples). Those are counted."""
    verdict = None
    if use.get("amb"):
        verdict = "unresolved"
    else:
        found = [t for t in resolver.resolve(use["path"]) if t.kind != "missing"]
        if found and all(t.kind == "unresolved" for t in found):
            verdict = "unresolved"
        elif found and use["kind"] != "call" and not any("try" in g for g in use.get("g") or []):
            verdict = "fits"
    if verdict is None:
        return
    counts = record.setdefault("settled", {}).setdefault(use["provider"], {"fits": 0, "unresolved": 0, "kept": 0})
    if verdict == "unresolved" and counts["kept"] < MAX_UNRESOLVED_KEPT:
        counts["kept"] += 1  # an example the controller judges (and says why)
        return
    counts[verdict] += 1
    record["uses"].pop()  # (the use settle was given is the last one kept)


def resolve_use(resolver, use):
    """Read what the controller will need to judge this use (the resolver loads modules)."""
    if use.get("amb"):
        return
    targets = resolver.resolve(use["path"])
    if use["kind"] != "call":
        return
    for target in targets:
        if target.kind == "class":
            class_needs(resolver, target, 0)
        elif target.kind == "def":
            for dec in target.binding.get("dec", []):
                resolver.resolve_in(target.module, dec[0])


def class_needs(resolver, target, depth):
    key = (target.module, target.name, target.binding.get("line", 0))
    done = resolver.__dict__.setdefault("classes_read", set())  # each class's needs once per resolver
    if depth > 8 or key in done:
        return
    done.add(key)
    for dec in target.binding.get("dec", []):
        resolver.resolve_in(target.module, dec[0])
    for base in resolver.bases(target):
        if base.kind == "class":
            class_needs(resolver, base, depth + 1)
    for name in ("__init__", "__new__"):
        for method in resolver.class_attribute(target, name, 0):
            if method.kind == "def":
                for dec in method.binding.get("dec", []):
                    resolver.resolve_in(method.module, dec[0])
