# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "drift" section (sent after drift_walk.py, before drift.py): the entries a
# host's stages run, and the walks from them (drift_walk.py) that give both the `imports`
# part of the answer (code.imports) and the consumer files the drift section reads when a
# stage scopes it.
#
# An entry is {"kind", "name", "cwd"}: "script" (python path/to/x.py: sys.path[0] is the
# script's folder), "module" (python -m x: sys.path[0] is the working folder), "console"
# (a console script of the environment, e.g. `vllm serve`: its entry_points.txt names the
# module; sys.path[0] is the bin folder, so the working folder hides nothing) and
# "package" (no stage: a library's top-level package, as `python -c "import x"` in the
# login folder would import it). `cwd` is the stage's `cd DIR` (None: the login folder).

import os

from envdoctor.probe.host.core import canonical_name, open_regular, site_entries
from envdoctor.probe.host.drift.imports import TYPING, Conditions
from envdoctor.probe.host.drift.walk import ImportFinder, ImportWalk, editable_mapping, shadows, stdlib_names


def entry_folder(cwd):
    """A stage's working folder as the host's shell would reach it (None: the login folder)."""
    here = os.getcwd()
    if not cwd:
        return here
    return os.path.normpath(os.path.join(here, os.path.expanduser(cwd)))


def folder_listing(entries):
    """What the folders the entries start in hold (names only), for the section's cache key."""
    folders = []
    for entry in entries if isinstance(entries, list) else [{"cwd": None}]:
        if not isinstance(entry, dict):
            continue
        folder = entry_folder(entry.get("cwd"))
        name = str(entry.get("name") or "")
        if entry.get("kind") == "script":
            folders.append(os.path.dirname(os.path.realpath(os.path.join(folder, os.path.expanduser(name)))))
        folders.append(folder)
    parts = []
    for folder in sorted(set(folders)):
        try:
            parts.append(folder + "\0" + "\0".join(sorted(os.listdir(folder))))
        except OSError:
            parts.append(folder + "\0?")
    return "\n".join(parts)


def console_module(sites, name):
    """The module a console script of the environment runs (`vllm = vllm.entrypoints.cli.main:main`)."""
    for site, entry in site_entries(sites):
        if not entry.endswith(".dist-info"):
            continue
        try:
            with open_regular(os.path.join(site, entry, "entry_points.txt")) as handle:
                text = handle.read(1 << 20).decode("utf-8", "replace")
        except OSError:
            continue
        group = ""
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                group = line[1:-1].strip()
            elif group == "console_scripts" and "=" in line:
                key, _, value = line.partition("=")
                if key.strip() == name:
                    return value.strip().split(":")[0].strip(), entry[:-len(".dist-info")]
    return None, None


def package_entries(consumers, files):
    """Without a stage: every consumer's top-level packages and modules, from its RECORD."""
    entries = []
    for dist in consumers:
        for rel in files.get(dist["name"], []):
            top = rel.split("/")[0]
            name = top[:-3] if top.endswith(".py") else top
            if name and "." not in name and not name.startswith("_") and \
                    not any(e["name"] == name for e in entries):
                entries.append({"kind": "package", "name": name, "cwd": None})
    return entries


def entries_from_args(args, consumers, files):
    """The entries to walk: those the request names, else the drift entry's, else the consumers' packages."""
    named = args.get("import_entries")
    if isinstance(named, list):
        return [e for e in named if isinstance(e, dict) and e.get("name")]
    entry = args.get("entry")
    if entry:
        names = entry if isinstance(entry, list) else [entry]
        return [{"kind": "script" if n.endswith(".py") or "/" in n else "module", "name": n, "cwd": None}
                for n in names]
    return package_entries(consumers, files)


class Reach(object):
    """Runs one walk per first sys.path folder the entries have, and gathers the answer."""

    def __init__(self, sites, extra, consumers, owners, modules, max_files, library_class=TYPING, front=()):
        self.library_class = library_class
        self.sites = sites
        self.extra = extra
        self.front = list(front)
        self.consumers = set(canonical_name(d["name"]) for d in consumers)
        self.owners = owners
        self.modules = modules
        self.max_files = max_files
        self.editable = editable_mapping(sites + extra)
        self.stdlib = stdlib_names()
        self.conditions = Conditions()
        self.walks = {}
        self.entries = []
        self.infos = {}  # canonical name -> the owner's {name, version, requires}

    def owner(self, path):
        """The canonical name of the distribution whose RECORD lists a file (None: none does)."""
        found = self.owners.of_file(path)
        if not found:
            return None
        key = canonical_name(found["name"])
        self.infos.setdefault(key, found)
        return key

    def walk_for(self, path0, follow):
        key = tuple(path0)
        if key not in self.walks:
            finder = ImportFinder(path0, self.sites, self.extra, self.editable, self.stdlib, self.front)
            self.walks[key] = ImportWalk(finder, self.conditions, self.read, self.owner, follow,
                                         self.modules.relative, self.max_files, self.library_class)
        return self.walks[key]

    def read(self, path):
        return self.modules.read_file(path)

    def add(self, entry):
        kind, name = entry.get("kind"), str(entry.get("name"))
        cwd = entry_folder(entry.get("cwd"))
        record = {"kind": kind, "name": name, "cwd": cwd}
        self.entries.append(record)
        follow = set(self.consumers)
        if kind not in ("script", "module", "console", "package"):
            record["status"] = "unfollowed"  # python -c, a shell script: nothing names a module
            return
        if kind == "script":
            path = os.path.join(cwd, os.path.expanduser(name))
            record.update(path=path, path0=[os.path.dirname(os.path.realpath(path))])
            if not os.path.isfile(path):
                record["status"] = "no-file"
                return
            record["status"] = "found"
            self.walk_for(record["path0"], follow).add(path, "__main__", 0, as_main=True)
            return
        module = name
        path0 = [cwd] if kind in ("module", "package") else []
        if kind == "console":
            module, dist = console_module(self.sites, name)
            if module is None:
                record.update(status="no-console-script", path0=path0)
                return
            record.update(module=module, distribution=dist)
        record["path0"] = path0
        walk = self.walk_for(path0, follow)
        found = walk.finder.find(module)
        if found.status == "missing":
            record.update(status="missing", missing=found.missing)
            return
        owner = self.owner(found.path) if found.path else None
        if owner:
            follow.add(owner)  # the entry's own distribution is read, consumer or not
            record["owner"] = owner
        record["status"] = "found" if found.path else "not-read"
        record["file"] = found.path
        walk.enqueue(found, 0)
        if kind == "module" and found.kind == "pkg":  # python -m pkg runs pkg/__main__.py
            main = walk.finder.find(module + ".__main__")
            if main.status == "found" and main.path:
                walk.add(main.path, module + ".__main__", 0, as_main=True)
        elif kind == "module" and found.path:
            walk.main_files.add(found.path)

    def run(self):
        for walk in self.walks.values():
            walk.run()

    def consumer_scope(self, drift_entries):
        """(consumer files relative to their site, entries that cannot scope drift) for the
        drift section: a script that is not a file, a module that is missing or that belongs
        to a distribution drift does not read."""
        unfound = []
        for name in drift_entries:
            record = next((e for e in self.entries if e["name"] == name), None)
            if record is None or record.get("status") != "found" or (
                    record.get("owner") and record["owner"] not in self.consumers):
                unfound.append(name)
        reached = set()
        for walk in self.walks.values():
            for path in walk.reached(lambda p: self.owner(p) in self.consumers):
                reached.add(self.modules.relative(path))
        return reached, unfound

    def report(self):
        missing = []
        files = 0
        counts = {}
        errors = []
        truncated = False
        for walk in self.walks.values():
            files += walk.counts["files"]
            for name, count in zip(("import", "condition", "deferred", "guarded", "typing"), walk.counts["missing"]):
                counts[name] = counts.get(name, 0) + count
            for record in walk.missing:
                if record not in missing:
                    missing.append(record)
            errors.extend(walk.errors)
            truncated = truncated or walk.truncated
        folders = []
        for record in self.entries:
            if record["kind"] != "console" and record.get("path0"):
                folders.extend(f for f in record["path0"] if f not in folders)
        finder = ImportFinder([], self.sites, self.extra, self.editable, self.stdlib, self.front)
        hidden = shadows(folders, finder, lambda p: self.owner(p))
        importers = {}
        for record in missing:
            name = record.get("importer")
            if name and name not in importers:
                info = self.infos.get(name)
                if info:
                    importers[name] = {"version": info["version"], "requires": info["requires"]}
        return {"entries": self.entries, "folders": folders, "files": files,
                "sites": sum(w.counts["sites"] for w in self.walks.values()),
                "unknown": sum(w.counts["unknown"] for w in self.walks.values()),
                "missing_counts": counts, "missing": missing, "importers": importers, "shadows": hidden,
                "errors": errors[:50], "truncated": truncated}
