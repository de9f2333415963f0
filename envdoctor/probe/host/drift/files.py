# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "drift" section (sent after drift_reach.py, before drift_consumers.py and
# drift.py): an environment's modules as its import system finds them (ModuleFiles, with
# drift_walk.ImportFinder: .pth folders and code lines, namespace packages), the
# distribution that provides each (Owners, from the RECORDs), and what the installed files
# decide of a branch's test (flag_facts, see drift_flags.py).

import ast
import csv
import io
import os
import re

from envdoctor.probe.host.audit.record import stat_key
from envdoctor.probe.host.core import MAX_RECORD_BYTES, canonical_name, read_headers, read_regular, site_entries
from envdoctor.probe.host.drift.summaries import summarize_source
from envdoctor.probe.host.drift.flags import FlagFacts, FlagScope
from envdoctor.probe.host.drift.walk import ImportFinder, editable_mapping, pth_code_paths, stdlib_names
from envdoctor.probe.host.env.venvs import with_pth_paths


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
        self.known = {}  # summaries of an earlier run (see summary_kept)
        self.fresh = {}  # this run's, to keep
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
                    summary = self.summary_kept(path, module, kind is True)
                    if summary is None:
                        summary = summarize_source(self.read_file(path), module, kind is True, path)
                        summary["path"] = self.relative(path)
                        self.fresh[path] = [self.read[path], module, kind is True, summary]
                except (OSError, SyntaxError, ValueError, RecursionError) as exc:
                    self.errors.append({"path": self.relative(path), "message": str(exc)[:300]})
                    summary = {"ext": True, "path": self.relative(path), "unreadable": True}
        self.summaries[module] = summary
        return summary

    def summary_kept(self, path, module, is_package):
        """The summary an earlier run made of the same file (same stat key, module name and
        kind: `known`, path -> [stat key, module, is package, summary]), else None."""
        earlier = self.known.get(path)
        if not earlier or earlier[1] != module or earlier[2] != is_package:
            return None
        key = stat_key(os.stat(path))
        if key != earlier[0]:
            return None
        self.read[path] = key
        self.fresh[path] = earlier
        return earlier[3]

    def relative(self, path):
        for site in self.sites:
            if path.startswith(site.rstrip("/") + "/"):
                return path[len(site.rstrip("/")) + 1:]
        return path


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
