# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "drift" section (sent after drift_files.py, before drift.py): a consumer's
# uses of the other installed distributions. Each consumer file that imports one (a byte
# filter first) is parsed and its uses listed (drift_uses.py); that part runs in forked
# workers when the host has several cores (one parse per file is most of the section's
# cost: vLLM is 2,400 files and 50 MB). Then, in order, each use is charged to the
# distribution providing its module, resolved (which reads the provider modules it
# reaches) and, when its verdict is already certain, settled and counted instead of sent.

import ast
import json
import os
import re
import select
import signal

from envdoctor.probe.host.audit.hashing import _receive, _send, usable_cpus
from envdoctor.probe.host.audit.record import stat_key
from envdoctor.probe.host.core import canonical_name, read_headers
from envdoctor.probe.host.drift.resolve import Resolver
from envdoctor.probe.host.drift.uses import Bindings, UseFinder


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


#: Fewer consumer files than this are read here: a fork costs more than it saves.
DRIFT_PARALLEL_MIN_FILES = 64
#: At most this many processes read consumer files.
DRIFT_MAX_WORKERS = 8


#: Files a worker answers for in one message (the caller resolves them while it reads on).
DRIFT_BATCH = 24


def forked_results(count, work, workers):
    """(index, work(index)) for every index, in order, as they become ready: forked workers
    (one per usable core) take every n-th index each and answer in batches (marshal behind
    its length, as audit_hash.HashRun's workers do), so the caller works on the first answers
    while they read on. A worker that fails or is killed loses nothing: what it did not answer
    is done here. `work.extra()` is what a worker sends last (its reads), `work.merge` takes it."""
    if workers <= 1 or count < DRIFT_PARALLEL_MIN_FILES or not hasattr(os, "fork"):
        for index in range(count):
            yield index, work(index)
        return
    share = min(workers, DRIFT_MAX_WORKERS)
    parent = os.getpid()
    children = {}  # read end -> (pid, number)
    for number in range(share):
        try:
            read_end, write_end = os.pipe()
            pid = os.fork()
        except OSError:
            break
        if pid == 0:  # the worker: never returns, never touches stdout
            status = 1
            try:
                os.close(read_end)
                for fd in children:
                    os.close(fd)
                batch = []
                for index in range(number, count, share):
                    if os.getppid() != parent:
                        break  # the probe is gone: so is its work
                    batch.append((index, work(index)))
                    if len(batch) >= DRIFT_BATCH:
                        _send(write_end, (batch, None))
                        batch = []
                _send(write_end, (batch, work.extra()))
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        children[read_end] = (pid, number)
    owners = dict((number, fd) for fd, (pid, number) in children.items())
    pending = {}
    failed = set(range(len(children), share))  # workers that never started
    try:
        for index in range(count):
            while index not in pending and index % share not in failed and children:
                for fd in select.select(list(children), [], [])[0]:
                    try:
                        batch, extra = _receive(fd)
                    except (OSError, ValueError, EOFError, TypeError):
                        failed.add(children[fd][1])
                        _end_worker(fd, children.pop(fd))
                        continue
                    pending.update(batch)
                    if extra is not None:
                        work.merge(extra)
                        _end_worker(fd, children.pop(fd))
                if index not in pending and owners.get(index % share) not in children:
                    failed.add(index % share)  # it ended without answering for this one
            yield index, pending.pop(index) if index in pending else work(index)
    finally:
        for fd, child in list(children.items()):
            _end_worker(fd, child)


def _end_worker(fd, child):
    try:
        os.close(fd)
    except OSError:
        pass
    try:
        os.kill(child[0], signal.SIGKILL)  # done already, or abandoned by a deadline
    except OSError:
        pass
    try:
        os.waitpid(child[0], 0)
    except OSError:
        pass


class FileUses(object):
    """work(index) for forked_results: one consumer file's uses (or why it has none). Reads go
    through ModuleFiles (its stat keys, errors and byte count come back with extra()).

    `known` (path -> [stat key, facts, answer as JSON text]) are the answers of an earlier run:
    one is reused when the file's stat key is the same and so is every fact the answer
    depended on (which top-level names are installed, what a branch's test asked of the
    environment: a module found, a version, another module's flags and that module's stat),
    so a warm run after an install parses only what changed. `fresh` collects new answers."""

    def __init__(self, tasks, owners, modules, facts, known=None):
        self.tasks = tasks  # [(dist, rel, own tops)]
        self.owners = owners
        self.modules = modules
        self.facts = facts
        self.maybe = {}
        self.known = known or {}
        self.fresh = {}
        self.reused = 0
        self.noted = None  # the facts the file being read depends on
        if facts is not None:
            self._watch_facts(facts)

    def _watch_facts(self, facts):
        found, version, scope = facts.found, facts.version, facts.scope

        def noted(kind, asked, answer):
            if self.noted is not None:
                self.noted.append([kind, asked, answer])
            return answer

        facts.found = lambda module: noted("found", module, found(module))
        facts.version = lambda name: noted("version", name, version(name))

        def scope_of(module):
            answer = scope(module)
            located = self.modules.locate(module)
            path = located[0] if located is not None and located[1] in (True, False) else None
            noted("scope", module, [path, self.modules.read.get(path) if path else None])
            return answer

        facts.scope = scope_of
        self.raw = (found, version, self.modules)

    def still(self, fact):
        """Whether a fact an earlier answer depended on holds now."""
        kind, asked, answer = fact
        if kind == "top":
            return self.owners.installed(asked) == answer
        found, version, modules = self.raw
        if kind == "found":
            return found(asked) == answer
        if kind == "version":
            return version(asked) == answer
        located = modules.locate(asked)
        path = located[0] if located is not None and located[1] in (True, False) else None
        if path != answer[0]:
            return False
        try:
            return path is None or stat_key(os.stat(path)) == answer[1]
        except OSError:
            return False

    def may_provide(self, top, own_tops):
        if top in own_tops:
            return False
        if top not in self.maybe:
            self.maybe[top] = self.owners.installed(top)
        if self.noted is not None:
            self.noted.append(["top", top, self.maybe[top]])
        return self.maybe[top]

    def __call__(self, index):
        dist, rel, own_tops = self.tasks[index]
        path = os.path.join(dist["site"], rel)
        earlier = self.known.get(path)
        if earlier is not None:
            try:
                key = stat_key(os.stat(path))
            except OSError:
                key = None
            if key == earlier[0] and all(self.still(f) for f in earlier[1]):
                self.modules.read[path] = key
                self.fresh[path] = earlier
                self.reused += 1
                return json.loads(earlier[2])
        self.noted = []
        try:
            answer = self.read(dist, rel, own_tops)
            key = self.modules.read.get(path)
            if key is not None:
                self.fresh[path] = [key, self.noted, json.dumps(answer, separators=(",", ":"))]
            return answer
        finally:
            self.noted = None

    def read(self, dist, rel, own_tops):
        modules = self.modules
        try:
            data = modules.read_file(os.path.join(dist["site"], rel))
        except OSError as exc:
            modules.errors.append({"path": rel, "message": str(exc)})
            return None
        if not any(self.may_provide(t, own_tops) for t in import_lines(data)):
            return None  # imports no other installed distribution: nothing to parse for
        module, is_package = module_of(rel)
        try:
            tree = ast.parse(data, filename=rel)
        except (SyntaxError, ValueError, RecursionError) as exc:
            modules.errors.append({"path": rel, "message": "does not parse: %s" % exc})
            return None
        del data
        bindings = Bindings(tree, module, is_package)
        tops = set(top for top in bindings.tops if self.may_provide(top, own_tops))
        if not tops:
            return {"uses": [], "sets": []}
        finder = UseFinder(tree, module, is_package, tops, bindings, self.facts)
        return {"uses": finder.run(), "sets": sorted(finder.sets)}

    def extra(self):
        modules = self.modules
        return {"read": modules.read, "errors": modules.errors, "bytes": modules.bytes, "fresh": self.fresh,
                "reused": self.reused}

    def merge(self, extra):
        self.modules.read.update(extra["read"])
        self.modules.errors.extend(extra["errors"])
        self.modules.bytes += extra["bytes"]
        self.fresh.update(extra["fresh"])
        self.reused += extra["reused"]


def consumers_uses(consumers, rels_of, owners, wanted, modules, resolver, budget, facts, known=None):
    """Every consumer's record (consumer_uses), the files read in forked workers first; with
    the answers of an earlier run (`known`, see FileUses), the files' answers of this run are
    in the returned FileUses' `fresh`."""
    tasks = []
    for dist in consumers:
        rels = rels_of(dist)
        own_tops = frozenset(r.split("/")[0][:-3] if "/" not in r else r.split("/")[0] for r in rels)
        tasks.extend((dist, rel, own_tops) for rel in rels)
    work = FileUses(tasks, owners, modules, facts, known)
    # Before forking: what every worker would otherwise build again (the RECORD index).
    owners.index()
    results = forked_results(len(tasks), work, usable_cpus())
    records = []
    for dist in consumers:
        count = sum(1 for t in tasks if t[0] is dist)
        records.append(consumer_uses(dist, tasks, results, count, owners, wanted, resolver, budget))
    for _rest in results:
        pass  # (what a budget left unread)
    return records, work


def consumer_uses(dist, tasks, results, count, owners, wanted, resolver, budget):
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
    sets = set()
    for _ in range(count):  # this consumer's files: the next `count` of the results, in task order
        index, found = next(results)
        rel = tasks[index][1]
        if found is None or record.get("truncated"):
            continue
        if budget["parsed"] >= budget["files"]:
            record["truncated"] = True
            continue
        budget["parsed"] += 1
        record["files"] += 1
        sets.update(found["sets"])
        for use in found["uses"]:
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
    if sets:
        record["sets"] = sorted(sets)
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
