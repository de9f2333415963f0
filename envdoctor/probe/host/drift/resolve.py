# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "drift" section (sent after drift_ast.py, before drift.py): the resolver
# that follows a dotted name through module summaries (re-exports, star imports, aliases,
# submodules, class bodies and their bases in the same provider). The controller imports
# it too (envdoctor.drift), so the modules the host reads while resolving are exactly those
# the controller will ask for.
#
# Cost is bounded: each (module, name) is resolved once and kept (a vLLM stack re-exports
# through chains of star imports that, followed afresh for every use, ran for minutes), a
# name met again while it is being resolved is a cycle, and each use (one call from outside)
# may take at most MAX_STEPS steps and MAX_DEPTH levels: past them it is `unresolved`. A
# result that met a cycle or a bound is not kept, so it never stands for the full answer.

from envdoctor.probe.host.drift.summaries import MAX_DEPTH

#: Lookups one use may cost (each a module or class attribute not answered from the memo).
MAX_STEPS = 2000

#: What every module object has, whatever its source defines.
MODULE_DUNDERS = frozenset(["__name__", "__file__", "__path__", "__spec__", "__loader__", "__package__",
                            "__doc__", "__dict__", "__builtins__", "__cached__", "__class__"])


class Target(object):
    """What a dotted name resolved to. kind: module, def, class, value, missing, unresolved."""

    __slots__ = ("kind", "module", "name", "binding", "owner", "why")

    def __init__(self, kind, module, name=None, binding=None, owner=None, why=""):
        self.kind = kind
        self.module = module
        self.name = name
        self.binding = binding
        self.owner = owner  # the class Target a method or attribute belongs to
        self.why = why

    def __repr__(self):
        return "Target(%s %s.%s %s)" % (self.kind, self.module, self.name, self.why)


class Resolver(object):
    """Follows names through module summaries. `load(module)` returns a summary, or
    {"ext": True} for a compiled extension, {"ns": True} for a namespace package, None when
    there is no such module. Every result is a list of Targets, one per variant."""

    def __init__(self, load, max_steps=MAX_STEPS):
        self.load = load
        self.max_steps = max_steps
        self.memo = {}  # (module, name) or (module, class, line, name) -> [Target]
        self.active = set()  # keys being resolved: met again, a cycle
        self.steps = 0  # the current use's work
        self.cut = 0  # cycles and bounds met so far: a result computed across one is not kept
        self.nesting = 0

    def _start(self):
        """Called by each public entry: a call from outside starts a use's budget afresh."""
        if not self.nesting:
            self.steps = 0

    def _memoized(self, key, compute, unresolved_module, name, depth):
        hit = self.memo.get(key)
        if hit is not None:
            return list(hit)
        if key in self.active:
            self.cut += 1
            return [Target("unresolved", unresolved_module, name, why="re-exports nested in a cycle")]
        self.steps += 1
        if self.steps > self.max_steps or depth > MAX_DEPTH:
            self.cut += 1
            return [Target("unresolved", unresolved_module, name,
                           why="re-exports nested too deeply to follow (%s)" % ("depth" if depth > MAX_DEPTH else "work"))]
        self.active.add(key)
        self.nesting += 1
        before = self.cut
        try:
            found = compute()
        finally:
            self.nesting -= 1
            self.active.discard(key)
        if self.cut == before:
            self.memo[key] = found
        return list(found)

    def module(self, name):
        summary = self.load(name)
        if summary is None:
            return Target("missing", name, why="no module %s" % name)
        return Target("module", name, binding=summary)

    def resolve(self, path):
        self._start()
        parts = path.split(".")
        targets = [self.module(parts[0])]
        for part in parts[1:]:
            targets = self.attribute_all(targets, part)
        return targets

    def attribute_all(self, targets, name, depth=0):
        found = []
        for target in targets:
            found.extend(self.attribute(target, name, depth))
        return found

    def attribute(self, target, name, depth=0):
        if depth > MAX_DEPTH:
            return [Target("unresolved", target.module, name, why="re-exports nested too deeply")]
        if target.kind == "module":
            return self.module_attribute(target.module, target.binding, name, depth)
        if target.kind == "class":
            return self.class_attribute(target, name, depth)
        if target.kind in ("missing", "unresolved"):
            return [target]
        return [Target("unresolved", target.module, name, why="an attribute of a %s" % target.kind)]

    def module_attribute(self, module, summary, name, depth):
        if name in MODULE_DUNDERS:
            return [Target("value", module, name, why="every module has %s" % name)]
        self._start()
        return self._memoized((module, name), lambda: self._module_attribute(module, summary, name, depth),
                              module, name, depth)

    def _module_attribute(self, module, summary, name, depth):
        if summary.get("ext"):
            return [Target("unresolved", module, name, why="%s is a compiled extension" % module)]
        bindings = [b for b in summary.get("names", {}).get(name, []) if not b.get("ann")]
        if bindings:
            found = []
            for binding in bindings:
                found.extend(self.expand(module, name, binding, depth + 1))
            if summary.get("getattr") and all(b.get("tc") for b in bindings):
                # Only a type checker's import: at run time the lazy loader's table decides.
                found = [t if t.kind != "missing" else Target("unresolved", module, name, why=t.why + " (lazy module)")
                         for t in found]
            return found
        sub = self.load(module + "." + name) if (summary.get("pkg") or summary.get("ns")) else None
        if sub is not None:
            return [Target("module", module + "." + name, binding=sub)]
        maybe = []
        for star in summary.get("stars", []):
            star_summary = self.load(star)
            if star_summary is None:
                continue
            if star_summary.get("getattr") and name not in star_summary.get("names", {}):
                maybe.append(Target("unresolved", star, name, why="%s is a lazy module (__getattr__)" % star))
                continue  # a lazy module names nothing statically: look on in the other stars
            found = [t for t in self.module_attribute(star, star_summary, name, depth + 1) if t.kind != "missing"]
            if any(t.kind != "unresolved" for t in found):
                return [t for t in found if t.kind != "unresolved"]
            maybe.extend(found)
        if maybe:
            return maybe[:1]
        if summary.get("getattr"):
            return [Target("unresolved", module, name, why="%s is a lazy module (__getattr__)" % module)]
        if summary.get("stars") and any(self.load(s) is None or self.load(s).get("ext") for s in summary["stars"]):
            return [Target("unresolved", module, name, why="%s has a star import of a module not read" % module)]
        return [Target("missing", module, name, why="%s does not define %s" % (module, name))]

    def expand(self, module, name, binding, depth):
        kind = binding["k"]
        if kind == "from":
            source = self.load(binding["mod"])
            if source is None:
                sub = self.load(binding["mod"] + "." + binding["name"])
                if sub is not None:
                    return [Target("module", binding["mod"] + "." + binding["name"], binding=sub)]
                return [Target("unresolved", module, name, binding,
                               why="%s is imported from %s, which is not installed here" % (name, binding["mod"]))]
            return self.module_attribute(binding["mod"], source, binding["name"], depth)
        if kind == "import":
            if self.load(binding["mod"]) is None:  # the standard library, or not installed here
                return [Target("unresolved", module, name, binding, why="%s is not read (the standard library or "
                               "not installed)" % binding["mod"])]
            return [self.module(binding["mod"])]
        if kind == "alias":
            parts = binding["to"].split(".")
            if parts[0] == name and len(parts) == 1:
                return [Target("value", module, name, binding)]
            summary = self.load(module) or {}
            own = [b for b in summary.get("names", {}).get(parts[0], []) if b is not binding and not b.get("ann")]
            if not own:
                return [Target("unresolved", module, name, binding, why="%s is bound to %s" % (name, binding["to"]))]
            targets = []
            for other in own:
                if other.get("line", 0) <= binding.get("line", 0) or len(own) == 1:
                    targets.extend(self.expand(module, parts[0], other, depth + 1))
            for part in parts[1:]:
                targets = self.attribute_all(targets, part, depth + 1)
            return targets
        return [Target(kind, module, name, binding)]

    def bases(self, target, depth=0):
        """The class Targets of a class's bases (or unresolved ones for the rest)."""
        self._start()
        found = []
        for base in target.binding.get("bases", []):
            if base is None:
                found.append(Target("unresolved", target.module, why="a computed base class"))
                continue
            if base in ("object", "Generic", "typing.Generic", "ABC", "abc.ABC", "Protocol", "typing.Protocol"):
                continue
            for base_target in self.resolve_in(target.module, base, depth + 1):
                if base_target.kind == "missing":  # a base that cannot be read is not "no base"
                    base_target = Target("unresolved", target.module, base, why="base %s was not read" % base)
                found.append(base_target)
        return found

    def resolve_in(self, module, text, depth=0):
        """A dotted name as written in `module` (its first part a name bound there)."""
        self._start()
        parts = text.split(".")
        summary = self.load(module)
        if summary is None:
            return [Target("unresolved", module, why="%s was not read" % module)]
        if parts[0] not in summary.get("names", {}):
            return [Target("unresolved", module, parts[0], why="%s is a builtin or not bound in %s" % (parts[0], module))]
        targets = self.module_attribute(module, summary, parts[0], depth + 1)
        for part in parts[1:]:
            targets = self.attribute_all(targets, part, depth + 1)
        return targets

    def class_attribute(self, target, name, depth, seen=None):
        body = target.binding.get("body", {})
        if name in body:
            return [Target(b["k"], target.module, name, b, owner=target) for b in body[name]]
        self._start()
        key = (target.module, target.name, target.binding.get("line", 0), name)
        return self._memoized(key, lambda: self._class_attribute(target, name, depth, seen), target.module, name, depth)

    def _class_attribute(self, target, name, depth, seen):
        body = target.binding.get("body", {})
        seen = seen if seen is not None else set()
        key = (target.module, target.name)
        if key in seen or depth > MAX_DEPTH:
            return [Target("unresolved", target.module, name, why="a cycle of base classes")]
        seen.add(key)
        if "__getattr__" in body or target.binding.get("meta"):
            return [Target("unresolved", target.module, name, why="%s builds attributes at run time" % target.name)]
        unresolved = []
        for base in self.bases(target, depth):
            if base.kind == "class":
                found = self.class_attribute(base, name, depth + 1, seen)
                hits = [t for t in found if t.kind != "missing"]
                if hits:
                    return hits
            elif base.kind != "missing":
                unresolved.append(base)
        if unresolved:
            return [Target("unresolved", target.module, name, why="%s may come from a base outside the provider" % name)]
        if name.startswith("__") and name.endswith("__"):
            return [Target("value", target.module, name, why="every class has %s (from object or type)" % name)]
        return [Target("missing", target.module, name, owner=target,
                       why="class %s has no attribute %s" % (target.name, name))]
